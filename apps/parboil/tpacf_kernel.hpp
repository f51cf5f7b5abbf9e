// What tpacf's kernel bodies share (see apps/host_device.hpp): points, the histogram's shape and the
// pair counting of one point, which the reference runs too.
#pragma once

#include "apps/host_device.hpp"

#include <cstdint>

namespace hdsm::apps::parboil::tpacf_kernel {

struct Point {
  float x, y, z;
};

constexpr int kBounds = 24;          // bin boundaries, as cosines of log-spaced angles
constexpr int kSlots = kBounds + 1;  // a pair lands between two boundaries or beyond the ends

// The number of boundaries above `dot` (binb is descending). Parboil searches the boundaries
// binarily; a branch-free, vectorised count over the 24 of them is as exact and much faster on a
// CPU, where the search's data-dependent branches mispredict on every pair.
HDSM_APPS_HD inline int bin_of(float dot, const float* binb) {
  int n = 0;
  for (int k = 0; k < kBounds; ++k) n += binb[k] > dot ? 1 : 0;
  return n;
}

// Pairs of point i with a window of the second set: points i+1 .. i+partners of its own set in an
// autocorrelation (each unordered pair once), i .. i+partners-1 of another set, both modulo n.
// count(bin) counts one pair into slot `bin` of a histogram.
template <class Count>
HDSM_APPS_HD inline void count_pairs(const Count& count, const float* binb, Point p, std::uint64_t i,
                                     const Point* set2, std::uint32_t n, std::uint32_t partners,
                                     std::uint32_t self) {
  std::uint64_t j = self != 0 ? i + 1 : i;
  for (std::uint32_t k = 0; k < partners; ++k, ++j) {
    const Point q = set2[j < n ? j : j - n];
    // Products of floats are exact in double, so contracting them into FMAs cannot move a pair
    // across a boundary: kernel and reference bin identically whatever the compiler fuses.
    const double dot = double{p.x} * q.x + double{p.y} * q.y + double{p.z} * q.z;
    count(bin_of(static_cast<float>(dot), binb));
  }
}

}  // namespace hdsm::apps::parboil::tpacf_kernel
