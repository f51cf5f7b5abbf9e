// The object directory (seed 000 §4.2-4.3): the shared objects living in an os::Arena, each split
// into fixed-size blocks. GMAC kept blocks in a balanced tree; here "which object, which block" is an
// index computation: one block table over the whole arena, indexed by the pointer's distance from the
// arena's start shifted by the block size, names the live object there. No search, no lock on the
// lookup path, which reads the directory, one table entry and the object.
//
// Objects start at block boundaries (an OffsetHeap per segment aligned to the block size), so one
// table entry never holds two objects. A pointer past an object's last byte but inside its last block
// belongs to no object. Each object reserves one byte more than it holds, so no object starts where
// another ends: the pointer one past an object's last byte (a range's end, which kernels take as
// arguments) names that object alone, even when its size is a whole number of blocks.
//
// Freed objects leave tombstones: the table entries they covered remember them until another object
// takes those blocks, so describe() can say which freed object a stray pointer hits.
//
// Thread safety: lookup() and object_at_start() are lock-free and may run concurrently with each other
// and with insert() and erase() of *other* objects (a new object is published with release stores
// after it is complete). insert(), erase(), find() and describe() serialise on a mutex. For the same
// object the caller orders things: every lookup of a pointer into an object, and every use of its
// Object, must happen before the object's erase (the runtime holds the object's lock; a program that
// frees memory another thread still uses has a data race of its own). Object::states belongs to the
// caller's protocol and its locking.
#pragma once

#include <hdsm/export.h>

#include "coherence/protocol.hpp"
#include "os/arena.hpp"
#include "os/lock_rank.hpp"
#include "os/mapping.hpp"
#include "os/offset_heap.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm::coherence {

/// Names an object for the directory's lifetime; ids are never reused, so stale ids are detected.
using ObjectId = std::uint64_t;

struct Object {
  ObjectId id = 0;
  unsigned segment = 0;
  std::size_t offset = 0;          // within the segment, a multiple of the block size
  std::size_t bytes = 0;           // as requested
  std::size_t blocks = 0;          // ceil(bytes / block size)
  std::vector<BlockState> states;  // one per block, all invalid until the caller's protocol sets them
  /// The caller's record of the object (SharedSpace: its Entry). Atomic: the fault handler reads it
  /// while free() clears it.
  std::atomic<void*> owner{nullptr};

  /// Back to a free slot's state (its block states' memory given back).
  void reset() {
    id = 0;
    segment = 0;
    offset = bytes = blocks = 0;
    states = {};
    owner.store(nullptr, std::memory_order_relaxed);
  }
};

class Directory {
 public:
  struct Hit {
    Object* object = nullptr;  // nullptr: the pointer is in no live object
    std::size_t block = 0;     // index within the object
    std::size_t offset_in_object = 0;
  };

  /// `block_bytes`: a power of two, a multiple of the page size and at most the segment size
  /// (hdsm::InvalidArgument otherwise). The arena must outlive the directory.
  Directory(os::Arena& arena, std::size_t block_bytes);
  ~Directory();
  Directory(const Directory&) = delete;
  Directory& operator=(const Directory&) = delete;

  /// A new object of `bytes` (> 0, else hdsm::InvalidArgument) at a block-aligned offset of `segment`;
  /// hdsm::OutOfDeviceMemory naming the segment when no free range fits.
  ObjectId insert(unsigned segment, std::size_t bytes);
  /// Forget the object, give its pages back (arena.release) and free its range. An id that is not live
  /// (freed already, or never returned by insert) throws hdsm::InvalidPointer.
  void erase(ObjectId id);

  /// O(1) and lock-free: the live object holding `user_pointer` (a user-view pointer), its block and
  /// the offset within the object.
  Hit lookup(const void* user_pointer) const {
    const std::uintptr_t in_arena = reinterpret_cast<std::uintptr_t>(user_pointer) - user_begin_;
    if (in_arena >= user_bytes_) return {};
    Object* const object = live(in_arena >> shift_).load(std::memory_order_acquire);
    if (object == nullptr) return {};
    const std::size_t in_object = (in_arena & segment_mask_) - object->offset;
    if (in_object >= object->bytes) return {};
    return {object, in_object >> shift_, in_object};
  }
  /// lookup(), or for the pointer one past a live object's last byte (the end of a range), that object
  /// with offset_in_object == bytes and block == blocks: what a kernel argument may point at.
  Hit lookup_argument(const void* user_pointer) const {
    if (const Hit hit = lookup(user_pointer); hit.object != nullptr) return hit;
    const Hit last = lookup(static_cast<const std::byte*>(user_pointer) - 1);
    if (last.object == nullptr || last.offset_in_object + 1 != last.object->bytes) return {};
    return {last.object, last.object->blocks, last.object->bytes};
  }
  /// The live object that starts exactly at `user_pointer`; nullptr for an interior pointer or none.
  Object* object_at_start(const void* user_pointer) const {
    const Hit hit = lookup(user_pointer);
    return hit.object != nullptr && hit.offset_in_object == 0 ? hit.object : nullptr;
  }
  /// lookup()'s answer as values, read under the directory's lock: for callers that may race with
  /// another thread's free of the object (a sync's acquire of its calls' objects), whose erase()
  /// resets the Object's fields meanwhile. Empty where `user_pointer` is in no live object.
  struct Found {
    ObjectId id = 0;
    std::size_t bytes = 0;
    std::size_t offset_in_object = 0;
  };
  std::optional<Found> lookup_values(const void* user_pointer) const;
  /// The live object with this id, or nullptr.
  Object* find(ObjectId id) const;
  /// What `p` points at, for error messages: "0x7f.. is inside freed object #12 (4 MiB, freed)".
  std::string describe(const void* p) const;

  os::Arena& arena() const { return arena_; }
  std::size_t block_bytes() const { return std::size_t{1} << shift_; }
  unsigned block_shift() const { return shift_; }
  /// Number of live objects.
  std::size_t size() const;
  /// The user-view address of an object's first byte.
  std::byte* user(const Object& object) const { return arena_.user(object.segment, object.offset); }

 private:
  static constexpr unsigned kChunkShift = 10;  // slots are allocated 1024 at a time
  static constexpr std::uint32_t kChunkSlots = std::uint32_t{1} << kChunkShift;

  struct ObjectSlot {
    Object object;
    std::uint32_t next_free = 0;
  };
  struct Tombstone {
    ObjectId id = 0;
    std::size_t offset = 0, bytes = 0;
    std::size_t blocks_left = 0;  // table entries still naming it; recycled at zero
    std::uint32_t next_free = 0;
  };
  struct Segment {
    os::OffsetHeap heap;
    os::ZeroedTable<std::uint32_t>
        freed;  // per block: tombstone of the last object freed there (under mutex_)
  };

  // The tables cost memory only where they are written (os::ZeroedTable). The live table is
  // accessed only through atomic_ref.
  std::atomic_ref<Object*> live(std::size_t arena_block) const {
    return std::atomic_ref<Object*>(live_[arena_block]);
  }
  /// The live-table index of a block of a segment.
  std::size_t arena_block(unsigned segment, std::size_t block) const {
    return (std::size_t{segment} << (segment_shift_ - shift_)) + block;
  }
  ObjectSlot& slot_at(std::uint32_t slot) const {  // caller holds mutex_
    const std::uint32_t i = slot - 1;
    return owned_[i >> kChunkShift][i & (kChunkSlots - 1)];
  }

  std::uint32_t take_slot();                                                        // caller holds mutex_
  void forget_tombstones(Segment& segment, std::size_t first, std::size_t blocks);  // holds mutex_

  os::Arena& arena_;
  unsigned shift_;
  // The lookup path's data, copied from the arena so that a lookup reads this object, one table
  // entry and the object it names. After a change of protection the kernel has flushed the TLB,
  // and each further page a fault handler touches costs a page walk (docs/benchmarks.md).
  std::uintptr_t user_begin_;
  std::size_t user_bytes_;
  unsigned segment_shift_;
  std::size_t segment_mask_;
  /// Object* per block of the whole arena, segment after segment: the live object there or null.
  mutable os::ZeroedTable<Object*> live_;  // mutable: const lookups take atomic_refs to its entries
  std::vector<Segment> tables_;
  // Slots never move: the live table points into them.
  std::vector<std::unique_ptr<ObjectSlot[]>> owned_;

  mutable os::RankedMutex<std::mutex> mutex_{os::LockRank::directory};
  std::uint32_t slots_used_ = 0, free_slot_ = 0;
  std::vector<Tombstone> tombstones_;  // index 0 unused
  std::uint32_t free_tombstone_ = 0;
  std::unordered_map<ObjectId, std::uint32_t> slots_by_id_;
  ObjectId next_id_ = 1;
};

}  // namespace hdsm::coherence

HDSM_VISIBLE_END
