// Sets of CRC workers as bit masks (at most 64 workers).
#pragma once

#include <bit>
#include <cstdint>

namespace hdsm::crc::detail {

using WorkerSet = std::uint64_t;
inline constexpr int kMaxWorkers = 64;

constexpr WorkerSet bit(int w) { return WorkerSet{1} << w; }
constexpr bool has(WorkerSet s, int w) { return (s & bit(w)) != 0; }

/// Calls f(w) for every worker in `s`, lowest first.
template <class F>
void for_each(WorkerSet s, F&& f) {
  while (s != 0) {
    f(std::countr_zero(s));
    s &= s - 1;
  }
}

}  // namespace hdsm::crc::detail
