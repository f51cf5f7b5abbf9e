// The timing tests' sim set-up: two devices on 0.1 GB/s links with 200 us per transfer, so 4 MiB take
// 42 ms one way, far more than the memcpy of the bytes even under a sanitizer with four engines busy
// on two cores.
#pragma once

#include <hdsm/config.hpp>

namespace hdsm::test {

inline constexpr double kSlowLinkGbps = 0.1;

/// `peers`: HDSM_SIM_PEER ("none", "all").
inline Config slow_link(const char* peers) {
  auto c = Config::defaults();
  c.set("HDSM_SIM_MEMORY", "256MiB")
      .set("HDSM_SIM_DEVICES", "2")
      .set("HDSM_SIM_LINK_GBPS", "0.1")
      .set("HDSM_SIM_LATENCY_US", "200")
      .set("HDSM_SIM_PEER", peers)
      .set("HDSM_ARENA_SEGMENT", "1GiB");
  return c;
}

}  // namespace hdsm::test
