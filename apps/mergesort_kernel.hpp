// What the mergesort's kernel bodies share (see apps/host_device.hpp): the rank of a key in a sorted
// run, one element of a merge pass, and one element of a merge-split between two devices' chunks.
#pragma once

#include "apps/host_device.hpp"

#include <cstdint>

namespace hdsm::apps::mergesort_kernel {

/// The keys of the sorted `run` (n keys) below x (after_equal = 0) or not above x (after_equal = 1).
HDSM_APPS_HD inline std::uint32_t rank(const std::uint32_t* run, std::uint32_t n, std::uint32_t x,
                                       std::uint32_t after_equal) {
  std::uint32_t lo = 0, hi = n;
  while (lo < hi) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    if (after_equal != 0 ? run[mid] <= x : run[mid] < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/// Element i of a merge pass over runs of `width` sorted keys (the array a multiple of 2 * width):
/// its place in the merged pair of runs is its index in its run plus its rank in the other run, the
/// left run's keys going before equal keys of the right one.
HDSM_APPS_HD inline void merge_point(const std::uint32_t* src, std::uint32_t* dst, std::uint32_t i,
                                     std::uint32_t width) {
  const std::uint32_t run = i / width, base = (run & ~1u) * width, x = src[i];
  if ((run & 1u) == 0)
    dst[i + rank(src + base + width, width, x, 0)] = x;
  else
    dst[i - width + rank(src + base, width, x, 1)] = x;
}

/// A merge-split of two sorted chunks of n keys: the lower device keeps the n smallest keys of both,
/// the upper one the n largest, each sorted.
struct SplitHalf {
  std::uint32_t n;
  std::uint32_t low;  // 1 on the lower device of the pair
};

/// Key t of the 2n (t < n: this device's chunk `mine`, else the partner's `theirs`) to its place in
/// this device's half, if it belongs there.
HDSM_APPS_HD inline void split_point(const std::uint32_t* mine, const std::uint32_t* theirs,
                                     std::uint32_t* out, std::uint32_t t, const SplitHalf& s) {
  const bool own = t < s.n;
  const std::uint32_t i = own ? t : t - s.n, x = own ? mine[i] : theirs[i];
  const bool lower_chunk = own == (s.low != 0);  // the lower device's keys go before equal keys
  const std::uint32_t at = i + rank(own ? theirs : mine, s.n, x, lower_chunk ? 0u : 1u);
  if (s.low != 0 && at < s.n) out[at] = x;
  if (s.low == 0 && at >= s.n) out[at - s.n] = x;
}

}  // namespace hdsm::apps::mergesort_kernel
