#include "os/offset_heap.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <bit>

namespace hdsm::os {

OffsetHeap::OffsetHeap(std::size_t capacity, std::size_t alignment) : alignment_(alignment) {
  if (!std::has_single_bit(alignment))
    throw InvalidArgument(fmt::format("offset heap alignment {} is not a power of two", alignment));
  capacity_ = capacity & ~(alignment_ - 1);
  if (capacity_ > 0) insert_free(0, capacity_);
}

void OffsetHeap::insert_free(std::size_t offset, std::size_t bytes) {
  free_by_offset_.emplace(offset, bytes);
  free_by_size_.emplace(bytes, offset);
}

void OffsetHeap::erase_free(std::map<std::size_t, std::size_t>::iterator it) {
  auto [first, last] = free_by_size_.equal_range(it->second);
  for (auto s = first; s != last; ++s)
    if (s->second == it->first) {
      free_by_size_.erase(s);
      break;
    }
  free_by_offset_.erase(it);
}

std::optional<std::size_t> OffsetHeap::allocate(std::size_t bytes) {
  const std::size_t need = rounded(bytes);
  if (need == 0 || need < bytes) return std::nullopt;  // zero bytes, or rounding overflowed
  const auto fit = free_by_size_.lower_bound(need);
  if (fit == free_by_size_.end()) return std::nullopt;
  const std::size_t offset = fit->second, size = fit->first;
  erase_free(free_by_offset_.find(offset));
  if (size > need) insert_free(offset + need, size - need);
  used_ += need;
  return offset;
}

void OffsetHeap::release(std::size_t offset, std::size_t bytes) {
  std::size_t start = offset, size = rounded(bytes);
  used_ -= size;
  auto next = free_by_offset_.lower_bound(start);
  if (next != free_by_offset_.end() && next->first == start + size) {
    size += next->second;
    erase_free(next);
  }
  auto after = free_by_offset_.lower_bound(start);
  if (after != free_by_offset_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      erase_free(prev);
    }
  }
  insert_free(start, size);
}

std::string OffsetHeap::scattered_note(std::size_t bytes) const {
  if (bytes == 0 || bytes > capacity_ - used_) return {};  // 0: a rounding that overflowed
  return fmt::format(" (its free memory is scattered: the largest free range is {})",
                     format_bytes(largest_free()));
}

}  // namespace hdsm::os
