#include "device/sim/heap.hpp"

namespace hdsm::sim {

DeviceHeap::DeviceHeap(std::size_t capacity) : capacity_(capacity / kAlignment * kAlignment) {
  if (capacity_ > 0) insert_free(0, capacity_);
}

void DeviceHeap::insert_free(std::size_t offset, std::size_t bytes) {
  free_by_offset_.emplace(offset, bytes);
  free_by_size_.emplace(bytes, offset);
}

void DeviceHeap::erase_free(std::map<std::size_t, std::size_t>::iterator it) {
  auto [first, last] = free_by_size_.equal_range(it->second);
  for (auto s = first; s != last; ++s)
    if (s->second == it->first) {
      free_by_size_.erase(s);
      break;
    }
  free_by_offset_.erase(it);
}

std::optional<std::size_t> DeviceHeap::allocate(std::size_t bytes) {
  const std::size_t need = rounded(bytes);
  if (need == 0 || need < bytes) return std::nullopt;
  const auto fit = free_by_size_.lower_bound(need);
  if (fit == free_by_size_.end()) return std::nullopt;
  const std::size_t offset = fit->second, size = fit->first;
  erase_free(free_by_offset_.find(offset));
  if (size > need) insert_free(offset + need, size - need);
  used_ += need;
  return offset;
}

void DeviceHeap::release(std::size_t offset, std::size_t bytes) {
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

}  // namespace hdsm::sim
