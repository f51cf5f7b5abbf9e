#include "coherence/directory.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <bit>
#include <limits>
#include <optional>

namespace hdsm::coherence {

static_assert(std::atomic_ref<Object*>::is_always_lock_free);

namespace {
// The heap range of an object of `bytes` (< the segment size): one byte more, so that the next
// object starts after its end pointer. It costs address space only, one block for an object whose
// size is a whole number of blocks: the blocks past the object's own are never backed.
std::size_t reserved(std::size_t bytes) { return bytes + 1; }
}  // namespace

Directory::Directory(os::Arena& arena, std::size_t block_bytes)
    : arena_(arena),
      user_begin_(reinterpret_cast<std::uintptr_t>(arena.user(0, 0))),
      user_bytes_(arena.segments() * arena.segment_bytes()),
      segment_shift_(static_cast<unsigned>(std::countr_zero(arena.segment_bytes()))),
      segment_mask_(arena.segment_bytes() - 1) {
  if (!std::has_single_bit(block_bytes) || block_bytes % os::page_size() != 0 ||
      block_bytes > arena.segment_bytes())
    throw InvalidArgument(fmt::format(
        "block size {} must be a power of two, a multiple of the page size ({}) "
        "and at most the arena segment size ({})",
        format_bytes(block_bytes), format_bytes(os::page_size()), format_bytes(arena.segment_bytes())));
  shift_ = static_cast<unsigned>(std::countr_zero(block_bytes));
  const std::size_t blocks_per_segment = arena.segment_bytes() >> shift_;
  const std::size_t total_blocks = blocks_per_segment * arena.segments();
  // Every live object holds at least one block, so there are never more objects than blocks.
  if (total_blocks >= std::numeric_limits<std::uint32_t>::max())
    throw InvalidArgument(fmt::format(
        "an arena of {} segments of {} has {} blocks of {}, more than the directory "
        "can index; use a larger block size",
        arena.segments(), format_bytes(arena.segment_bytes()), total_blocks, format_bytes(block_bytes)));
  live_ = os::ZeroedTable<Object*>(total_blocks, "block table of the arena");
  tables_.reserve(arena.segments());
  for (unsigned s = 0; s < arena.segments(); ++s)
    tables_.push_back(
        Segment{os::OffsetHeap(arena.segment_bytes(), block_bytes),
                os::ZeroedTable<std::uint32_t>(blocks_per_segment,
                                               fmt::format("freed-object table of arena segment {}", s))});
  tombstones_.emplace_back();
}

Directory::~Directory() = default;

std::uint32_t Directory::take_slot() {
  if (free_slot_ != 0) {
    const std::uint32_t slot = free_slot_;
    free_slot_ = slot_at(slot).next_free;
    return slot;
  }
  // Cannot run out: a slot per block exists, and the segment's heap fails first.
  const std::uint32_t slot = ++slots_used_;
  const std::uint32_t i = slot - 1;
  if ((i & (kChunkSlots - 1)) == 0) {
    try {
      owned_.push_back(std::make_unique<ObjectSlot[]>(kChunkSlots));
    } catch (...) {
      --slots_used_;
      throw;
    }
  }
  return slot;
}

void Directory::forget_tombstones(Segment& segment, std::size_t first, std::size_t blocks) {
  for (std::size_t b = first; b < first + blocks; ++b) {
    std::uint32_t& t = segment.freed[b];
    if (t == 0) continue;
    if (--tombstones_[t].blocks_left == 0) {
      tombstones_[t].next_free = free_tombstone_;
      free_tombstone_ = t;
    }
    t = 0;
  }
}

ObjectId Directory::insert(unsigned segment, std::size_t bytes) {
  if (bytes == 0) throw InvalidArgument("cannot create a shared object of 0 bytes");
  if (segment >= arena_.segments())
    throw InvalidArgument(
        fmt::format("cannot create a shared object in arena segment {}: the arena has {} segments", segment,
                    arena_.segments()));
  Segment& seg = tables_[segment];
  std::optional<std::size_t> offset;
  std::size_t blocks = 0;
  {
    std::lock_guard lock(mutex_);
    offset = bytes < seg.heap.capacity() ? seg.heap.allocate(reserved(bytes)) : std::nullopt;
    if (!offset)
      throw OutOfDeviceMemory(
          fmt::format("arena segment {} (the host address range of one device's shared "
                      "objects{}; {} live object{} in all, each taking its size plus one byte rounded up to "
                      "whole blocks of {}, HDSM_BLOCK_SIZE)",
                      segment,
                      bytes < seg.heap.capacity() ? ""
                                                  : ", which holds objects smaller than itself: each one's "
                                                    "end must lie inside it",
                      slots_by_id_.size(), slots_by_id_.size() == 1 ? "" : "s",
                      format_bytes(std::size_t{1} << shift_)),
          bytes, seg.heap.used(), seg.heap.capacity(), "HDSM_ARENA_SEGMENT");
    blocks = seg.heap.rounded(bytes) >> shift_;
  }
  // The range is this thread's from here on; zeroing what a freed object left in it can take long,
  // so it runs without the lock that every alloc, free and describe takes.
  try {
    arena_.reuse(segment, *offset, blocks << shift_);
  } catch (...) {
    std::lock_guard lock(mutex_);
    seg.heap.release(*offset, reserved(bytes));
    throw;
  }
  std::lock_guard lock(mutex_);
  std::uint32_t slot = 0;
  try {
    slot = take_slot();
    Object& object = slot_at(slot).object;
    object.states.assign(blocks, BlockState::invalid);
    object.id = next_id_;
    object.segment = segment;
    object.offset = *offset;
    object.bytes = bytes;
    object.blocks = blocks;
    slots_by_id_.emplace(next_id_, slot);
  } catch (...) {
    if (slot != 0) {
      slot_at(slot).object.reset();
      slot_at(slot).next_free = free_slot_;
      free_slot_ = slot;
    }
    seg.heap.release(*offset, reserved(bytes));
    throw;
  }
  const std::size_t first = *offset >> shift_;
  forget_tombstones(seg, first, blocks);
  Object* const object = &slot_at(slot).object;
  for (std::size_t b = first; b < first + blocks; ++b)
    live(arena_block(segment, b)).store(object, std::memory_order_release);
  return next_id_++;
}

void Directory::erase(ObjectId id) {
  std::lock_guard lock(mutex_);
  const auto it = slots_by_id_.find(id);
  if (it == slots_by_id_.end()) {
    if (id != 0 && id < next_id_)
      throw InvalidPointer(
          fmt::format("shared object #{} was already freed (double free or use of a stale handle)", id));
    throw InvalidPointer(fmt::format("#{} is not a shared object of this runtime", id));
  }
  const std::uint32_t slot = it->second;
  Object& object = slot_at(slot).object;
  Segment& seg = tables_[object.segment];

  std::uint32_t tomb = free_tombstone_;
  if (tomb != 0) {
    free_tombstone_ = tombstones_[tomb].next_free;
  } else {
    tombstones_.emplace_back();
    tomb = static_cast<std::uint32_t>(tombstones_.size() - 1);
  }
  try {
    arena_.release(object.segment, object.offset, object.blocks << shift_);
  } catch (...) {
    tombstones_[tomb].next_free = free_tombstone_;
    free_tombstone_ = tomb;
    throw;
  }
  tombstones_[tomb] = Tombstone{object.id, object.offset, object.bytes, object.blocks, 0};

  const std::size_t first = object.offset >> shift_;
  for (std::size_t b = first; b < first + object.blocks; ++b) {
    live(arena_block(object.segment, b)).store(nullptr, std::memory_order_release);
    seg.freed[b] = tomb;
  }
  seg.heap.release(object.offset, reserved(object.bytes));
  slots_by_id_.erase(it);
  object.reset();
  slot_at(slot).next_free = free_slot_;
  free_slot_ = slot;
}

std::optional<Directory::Found> Directory::lookup_values(const void* user_pointer) const {
  std::lock_guard lock(mutex_);
  const Hit hit = lookup(user_pointer);
  if (hit.object == nullptr) return std::nullopt;
  return Found{hit.object->id, hit.object->bytes, hit.offset_in_object};
}

Object* Directory::find(ObjectId id) const {
  std::lock_guard lock(mutex_);
  const auto it = slots_by_id_.find(id);
  return it == slots_by_id_.end() ? nullptr : &slot_at(it->second).object;
}

std::size_t Directory::size() const {
  std::lock_guard lock(mutex_);
  return slots_by_id_.size();
}

std::string Directory::describe(const void* p) const {
  if (!arena_.contains(p)) return fmt::format("{} is not in the shared-object arena", fmt::ptr(p));
  const unsigned segment = arena_.segment_of(p);
  const std::size_t offset = arena_.offset_of(p);
  const std::size_t block = offset >> shift_;
  std::lock_guard lock(mutex_);
  const Segment& seg = tables_[segment];
  if (const Object* live_object = live(arena_block(segment, block)).load(std::memory_order_acquire);
      live_object != nullptr) {
    const Object& o = *live_object;
    const std::size_t in = offset - o.offset;
    if (in < o.bytes)
      return fmt::format("{} is inside shared object #{} ({}) at offset {}, block {} of {}", fmt::ptr(p),
                         o.id, format_bytes(o.bytes), in, in >> shift_, o.blocks);
    return fmt::format("{} is at offset {}, past the end of shared object #{} ({})", fmt::ptr(p), in, o.id,
                       format_bytes(o.bytes));
  }
  if (const std::uint32_t tomb = seg.freed[block]; tomb != 0) {
    const Tombstone& t = tombstones_[tomb];
    const std::size_t in = offset - t.offset;
    if (in < t.bytes)
      return fmt::format("{} is inside freed object #{} ({}, freed) at offset {}", fmt::ptr(p), t.id,
                         format_bytes(t.bytes), in);
    return fmt::format("{} is at offset {}, past the end of freed object #{} ({}, freed)", fmt::ptr(p), in,
                       t.id, format_bytes(t.bytes));
  }
  return fmt::format("{} is in arena segment {} at offset {}, outside any shared object", fmt::ptr(p),
                     segment, offset);
}

}  // namespace hdsm::coherence
