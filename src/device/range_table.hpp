// Host address ranges by start address, for the backends whose pinned host memory is the driver's
// (OpenCL, CUDA): which allocation starts at a pointer, and whether a range lies inside one. The
// owner locks; lookups are O(log n) in the number of live allocations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>

namespace hdsm {

template <class Value>
class RangeTable {
 public:
  struct Range {
    std::size_t bytes;
    Value value;  // what the backend keeps per allocation (an OpenCL buffer, nothing for CUDA)
  };

  void insert(const void* start, std::size_t bytes, Value value = {}) {
    ranges_.insert_or_assign(key(start), Range{bytes, std::move(value)});
  }
  /// Removes and returns the range that starts at `start`; nothing when none does.
  std::optional<Range> take(const void* start) {
    const auto it = ranges_.find(key(start));
    if (it == ranges_.end()) return std::nullopt;
    std::optional<Range> out(std::move(it->second));
    ranges_.erase(it);
    return out;
  }
  /// True when [pointer, pointer + bytes) lies inside one range.
  bool contains(const void* pointer, std::size_t bytes) const {
    const std::uintptr_t a = key(pointer);
    auto it = ranges_.upper_bound(a);
    if (it == ranges_.begin()) return false;
    --it;
    return a - it->first <= it->second.bytes && bytes <= it->second.bytes - (a - it->first);
  }
  /// f(start, range) for every range, in address order.
  template <class F>
  void for_each(F&& f) {
    for (auto& [start, range] : ranges_) f(reinterpret_cast<void*>(start), range);
  }

 private:
  static std::uintptr_t key(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
  std::map<std::uintptr_t, Range> ranges_;
};

}  // namespace hdsm
