// Counters of what hdsm moved and ran, readable at any time and printed at exit with HDSM_STATS=1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hdsm {

enum class Route { h2d, d2h, d2d, peer };
inline constexpr int kRouteCount = 4;
const char* to_string(Route route) noexcept;

struct RouteStats {
  std::uint64_t bytes = 0;
  std::uint64_t transfers = 0;
};

struct DeviceStats {
  std::string name;
  RouteStats routes[kRouteCount];  // indexed by Route; peer copies count on the receiving device
  std::uint64_t kernel_launches = 0;
  const RouteStats& route(Route r) const { return routes[static_cast<int>(r)]; }
};

/// A snapshot of the counters of one runtime.
struct Stats {
  RouteStats routes[kRouteCount];
  std::uint64_t kernel_launches = 0;
  std::uint64_t read_faults = 0;
  std::uint64_t write_faults = 0;
  std::vector<DeviceStats> devices;
  const RouteStats& route(Route r) const { return routes[static_cast<int>(r)]; }
  /// A human-readable table (what HDSM_STATS=1 prints at exit).
  std::string to_string() const;
};

}  // namespace hdsm
