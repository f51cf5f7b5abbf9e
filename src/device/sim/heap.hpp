// Best-fit allocator over the offsets of one device memory, with coalescing of free neighbours.
#pragma once

#include <cstddef>
#include <map>
#include <optional>

namespace hdsm::sim {

class DeviceHeap {
 public:
  static constexpr std::size_t kAlignment = 256;  // as cudaMalloc guarantees

  explicit DeviceHeap(std::size_t capacity);
  /// Offset of a free range of `bytes` rounded up to kAlignment, or nullopt when none fits.
  std::optional<std::size_t> allocate(std::size_t bytes);
  /// Give back a range returned by allocate (with the same byte count).
  void release(std::size_t offset, std::size_t bytes);

  std::size_t capacity() const { return capacity_; }
  std::size_t used() const { return used_; }
  static std::size_t rounded(std::size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

 private:
  void insert_free(std::size_t offset, std::size_t bytes);
  void erase_free(std::map<std::size_t, std::size_t>::iterator it);

  std::size_t capacity_;
  std::size_t used_ = 0;
  std::map<std::size_t, std::size_t> free_by_offset_;      // offset -> bytes
  std::multimap<std::size_t, std::size_t> free_by_size_;   // bytes -> offset
};

}  // namespace hdsm::sim
