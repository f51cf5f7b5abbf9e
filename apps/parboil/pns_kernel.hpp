// What pns's kernel bodies share (see apps/host_device.hpp): the net's size and the simulation of
// one replica, which the reference runs too.
#pragma once

#include "apps/host_device.hpp"
#include "apps/random.hpp"

#include <cstdint>

namespace hdsm::apps::parboil::pns_kernel {

constexpr std::uint32_t kPlaces = 32;

// One call's work for one replica. The marking is worked on in a local copy (registers on a GPU)
// and a transition fires without a branch, since whether it is enabled is a coin toss the CPU would
// mispredict.
HDSM_APPS_HD inline void simulate(const std::int32_t* arcs, std::int32_t* marking, std::uint64_t& rng,
                                  std::uint32_t* sums, std::uint32_t transitions, std::uint32_t steps) {
  std::int32_t m[kPlaces];
  for (std::uint32_t p = 0; p < kPlaces; ++p) m[p] = marking[p];
  Xorshift64 s{rng};
  for (std::uint32_t i = 0; i < steps; ++i) {
    const std::int32_t* a = arcs + 4 * s.below(transitions);
    const std::int32_t fire = (m[a[0]] > 0) & (m[a[1]] > 0);
    m[a[0]] -= fire;
    m[a[1]] -= fire;
    m[a[2]] += fire;
    m[a[3]] += fire;
  }
  rng = s.state();
  for (std::uint32_t p = 0; p < kPlaces; ++p) marking[p] = m[p];
  for (std::uint32_t p = 0; p < kPlaces; ++p) sums[p] += static_cast<std::uint32_t>(m[p]);
}

}  // namespace hdsm::apps::parboil::pns_kernel
