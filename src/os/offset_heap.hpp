// Best-fit allocator over a range of offsets [0, capacity) with coalescing of free neighbours. It
// manages numbers only, never memory: device memories (sim) and arena segments (the object
// directory) carve their ranges with it.
#pragma once

#include <hdsm/export.h>

#include <cstddef>
#include <map>
#include <optional>
#include <string>

HDSM_VISIBLE_BEGIN
namespace hdsm::os {

class OffsetHeap {
 public:
  static constexpr std::size_t kDefaultAlignment = 256;  // as cudaMalloc guarantees

  /// `alignment` must be a power of two (hdsm::InvalidArgument otherwise); the capacity is rounded
  /// down to a multiple of it.
  explicit OffsetHeap(std::size_t capacity, std::size_t alignment = kDefaultAlignment);
  /// Offset of a free range of `bytes` rounded up to the alignment, or nullopt when none fits.
  std::optional<std::size_t> allocate(std::size_t bytes);
  /// Give back a range returned by allocate (with the same byte count).
  void release(std::size_t offset, std::size_t bytes);

  std::size_t capacity() const { return capacity_; }
  std::size_t used() const { return used_; }
  /// The largest free range: where it is less than capacity() - used(), the free bytes are scattered.
  std::size_t largest_free() const { return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first; }
  /// For an allocation of `bytes` that failed: " (its free memory is scattered: the largest free range
  /// is X)" where the free bytes would hold it in one piece, else empty (also for 0, what rounded()
  /// gives where it overflows). Without it, "X of Y in use" reads as if it fitted.
  std::string scattered_note(std::size_t bytes) const;
  std::size_t alignment() const { return alignment_; }
  /// `bytes` rounded up to the alignment (0 when that overflows).
  std::size_t rounded(std::size_t bytes) const { return (bytes + alignment_ - 1) & ~(alignment_ - 1); }

 private:
  void insert_free(std::size_t offset, std::size_t bytes);
  void erase_free(std::map<std::size_t, std::size_t>::iterator it);

  std::size_t alignment_;
  std::size_t capacity_;
  std::size_t used_ = 0;
  std::map<std::size_t, std::size_t> free_by_offset_;     // offset -> bytes
  std::multimap<std::size_t, std::size_t> free_by_size_;  // bytes -> offset
};

}  // namespace hdsm::os

HDSM_VISIBLE_END
