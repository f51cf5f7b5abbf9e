// A worker's side of the protocol: its page buffer, the misses, upgrades, write-backs and
// acquires, and the API's slow paths. Every coherence action starts here, as a call to the home
// (or, for read-only and single-writer pages, a direct copy with no handshake).
#pragma once

#include "crc/engine.hpp"
#include "crc/page_buffer.hpp"
#include "crc/transport.hpp"
#include "os/mapping.hpp"

#include <hdsm/crc.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include <hdsm/export.h>

HDSM_VISIBLE_BEGIN
namespace hdsm::crc::detail {

/// Where the shared space is, as the workers see it (under MPI only the numbers exist locally).
/// Which granules of the shared space (kSpaceAlignment bytes each) hold an allocation: each holds
/// at most one, allocations being aligned and rounded up to a granule. Changed between regions only
/// (alloc and free are refused inside one); workers test it on their misses, so that an access to
/// freed or never allocated shared memory is an error, not a silent read of zeros or a lost write.
class Granules {
 public:
  explicit Granules(std::size_t space_bytes) : bits_((space_bytes / kSpaceAlignment + 63) / 64, 0) {}
  /// [offset, offset + bytes) of the space is allocated (or not, any more).
  void mark(std::size_t offset, std::size_t bytes, bool allocated) {
    for (std::size_t g = offset / kSpaceAlignment;
         g < (offset + bytes + kSpaceAlignment - 1) / kSpaceAlignment; ++g) {
      const std::uint64_t bit = std::uint64_t{1} << (g % 64);
      bits_[g / 64] = allocated ? bits_[g / 64] | bit : bits_[g / 64] & ~bit;
    }
  }
  bool allocated(std::size_t offset) const {
    const std::size_t g = offset / kSpaceAlignment;
    return ((bits_[g / 64] >> (g % 64)) & 1) != 0;
  }

 private:
  std::vector<std::uint64_t> bits_;
};

struct Space {
  std::uintptr_t base = 0;
  std::size_t bytes = 0;
  const Granules* granules = nullptr;  // null: every byte of the space counts as allocated
};

class Worker {
 public:
  Worker(int id, int count, std::size_t local_store, WorkerLink& link, Space space);

  /// Lays the page buffer out for `g` and makes this the current thread's worker, one of `count`
  /// (0: the count it was made with).
  void begin(const Geometry& g, int count = 0);
  /// The release at the end of the task, then the done post; the buffer empties.
  void end();
  /// The task threw `error` (a RegionAborted counts as done).
  void failed(const std::exception_ptr& error);
  /// The request that tells the home this worker failed with `error` (or ended, where the home ended
  /// the region); out of memory to describe it, one without the words.
  Request failure(const std::exception_ptr& error) const noexcept;
  /// This worker's part of a region: begin, the task, then end, or failed with what it threw (which
  /// is returned; null when the task returned).
  std::exception_ptr run(const std::function<void()>& task, const Geometry& g, int count = 0);

  /// An access the inline path could not serve from the tags (a miss, or one that straddles pages).
  void access(Access access, const void* address, void* bytes, std::size_t size);
  std::pair<std::byte*, std::size_t> localize(Access access, const void* address, std::size_t element);
  void lock(int number);
  void unlock(int number);
  void barrier();
  void release();

  /// Localized read-only and single-writer accesses return pointers into the shared space itself
  /// (the workers share the home's memory: threads, not MPI ranks).
  void serve_in_place(bool on) { in_place_ = on; }

  int id() const { return id_; }
  int count() const { return count_; }
  /// This worker's counters, the page buffer's included.
  Stats stats() const {
    Stats s = stats_;
    s.evictions = buffer_.evictions;
    s.conflict_misses = buffer_.conflict_misses;
    return s;
  }
  void reset_stats() {
    stats_ = Stats{};
    buffer_.evictions = buffer_.conflict_misses = 0;
  }

  /// The worker of the calling thread, or nullptr outside a task.
  static Worker* current();
  /// From another thread (the home's), after the region failed: the worker's next access throws
  /// RegionAborted, even one that would hit its buffer.
  void interrupt();
  /// Before a region starts (the engine, ahead of waking the worker): no interrupt pending.
  void rearm() { interrupted_.store(false, std::memory_order_relaxed); }

 private:
  /// The way holding `page` for `access`, after a miss or write fault where needed. `missed`: the
  /// caller looked the page up in the tags `access` uses (read tags for reads, write tags for
  /// writes) and did not find it. `kept`: for an overwrite, the bytes from the page's start that the
  /// worker does not overwrite, which a miss fetches.
  int ensure(std::uintptr_t page, Access access, bool missed = false, std::size_t kept = 0);
  int miss(std::uintptr_t page, bool write);
  // Inline in the one file that calls them, with the page buffer's place and install: a direct miss
  // (read-only, single writer) is then one call from the access, not five, whose prologues were a
  // quarter of its bookkeeping's instructions.
  /// `fetch`: the whole page comes in; otherwise its first `kept` bytes (an overwrite from there on).
  [[gnu::always_inline]] inline int miss_direct(std::uintptr_t page, bool single, bool fetch,
                                                std::size_t kept = 0);
  [[gnu::always_inline]] inline void evict_direct(const PageBuffer::Victim& victim, std::byte* bytes);
  /// The page at `page` from the shared space into `frame`, without the home.
  void copy_in(std::uintptr_t page, std::byte* frame) {
    link_.get(page - space_.base, frame, buffer_.geometry().page_size);
  }
  void write_back(int way, std::uintptr_t page, bool single);
  void acquire();
  /// A page a single writer wrote (put back whole, or in place): the home hears of it at the
  /// release, with the others, in one note. Not sent before: a page written in place may still be
  /// written through its run, and a note the home took before the last write could let another
  /// worker keep a stale copy.
  [[gnu::always_inline]] void note_single(std::uintptr_t page) {
    const std::uint64_t p = page_number(page);
    if (set_bit(single_listed_, p)) single_written_.push_back(p);
  }
  /// Sets bit p; whether it was clear.
  static bool set_bit(os::ZeroedTable<std::uint64_t>& bits, std::uint64_t p) {
    std::uint64_t& word = bits[p / 64];
    const std::uint64_t bit = std::uint64_t{1} << (p % 64);
    if ((word & bit) != 0) return false;
    word |= bit;
    return true;
  }
  void note_single_writes();
  /// Forgets the pages noted (their bits cleared, so the bitmaps are all zeros between releases).
  void clear_single_writes();
  /// A page this worker writes in place (through a zero-copy run) since its last release: its own
  /// other accesses to the page go to the shared page too, since a copy in the buffer would hide the
  /// run's later writes, and put back over them what it held.
  bool written_in_place(std::uintptr_t page) const {
    if (in_place_pages_ == 0) return false;
    const std::uint64_t p = page_number(page);
    return ((in_place_listed_[p / 64] >> (p % 64)) & 1) != 0;
  }
  /// An access of `size` bytes at `a` (within one page) to the shared page itself.
  static void access_in_place(Access access, std::uintptr_t a, std::byte* bytes, std::size_t size);
  void check(const Reply& reply, const char* what, std::uintptr_t page);
  std::uint64_t page_number(std::uintptr_t page) const {
    return (page - space_.base) >> buffer_.geometry().page_shift;
  }
  std::uintptr_t check_range(const void* address, std::size_t size, const char* what) const;
  /// InvalidPointer unless the page of `a` (inside the space) is allocated.
  void check_allocated(std::uintptr_t a, std::size_t size, const char* what) const {
    if (space_.granules != nullptr && !space_.granules->allocated(a - space_.base)) [[unlikely]]
      refuse_unallocated(a, size, what);
  }
  /// InvalidPointer for the access of `size` bytes at `a`, whose bytes from `at` (0: `a`) are not
  /// allocated.
  /// The region failed: this worker's task unwinds (RegionAborted), and its unlocks do nothing.
  [[noreturn]] void abort_task() {
    aborted_ = true;
    throw RegionAborted{};
  }
  [[noreturn]] void refuse_unallocated(std::uintptr_t a, std::size_t size, const char* what,
                                       std::uintptr_t at = 0) const;

  int id_;
  int made_count_;
  int count_;
  WorkerLink& link_;
  Space space_;
  PageBuffer buffer_;
  std::vector<std::uint64_t> invalidations_;
  bool in_place_ = false;
  // Pages a single writer wrote since the last release (put back, or written in place), each once:
  // the home hears of them then, so that other workers' copies are listed for invalidation. A bit
  // per page of the shared space (a thousandth of its bytes at 128 B pages) says which are listed,
  // so noting a page is O(1) however long the phase.
  std::vector<std::uint64_t> single_written_;       // page numbers
  os::ZeroedTable<std::uint64_t> single_listed_;    // bit p: page p is in single_written_
  os::ZeroedTable<std::uint64_t> in_place_listed_;  // bit p: page p is written in place (in single_written_)
  std::size_t in_place_pages_ = 0;                  // the bits set in in_place_listed_
  std::uint64_t barriers_ = 0;
  bool aborted_ = false;  // this region failed and this worker was told so (RegionAborted thrown)
  Stats stats_;
  // interrupt(): set by the home's thread, cleared by rearm() before the region.
  std::atomic<bool> interrupted_{false};
  std::atomic<std::atomic<const Lookup*>*> current_slot_{nullptr};  // the task's thread's lookup
  // The thread's worker and lookup before begin() (another runtime's task that runs this region),
  // put back when this worker leaves the thread.
  Worker* outer_worker_ = nullptr;
  const Lookup* outer_lookup_ = nullptr;
  void leave_thread();
};

}  // namespace hdsm::crc::detail
HDSM_VISIBLE_END
