#include "obs/counters.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

namespace hdsm {

const char* to_string(Route route) noexcept {
  switch (route) {
    case Route::h2d:
      return "H2D";
    case Route::d2h:
      return "D2H";
    case Route::d2d:
      return "D2D";
    case Route::peer:
      return "peer";
  }
  return "?";
}

const char* to_string(Action action) noexcept {
  switch (action) {
    case Action::release:
      return "call upload";
    case Action::acquire:
      return "sync download";
    case Action::fault:
      return "fault fetch";
    case Action::evict:
      return "eviction upload";
    case Action::bulk:
      return "memcpy/memset/io";
  }
  return "?";
}

const char* to_string(CopyRoute route) noexcept {
  switch (route) {
    case CopyRoute::host:
      return "host";
    case CopyRoute::on_device:
      return "on-device";
    case CopyRoute::direct:
      return "direct";
    case CopyRoute::peer:
      return "peer";
    case CopyRoute::staged:
      return "staged";
  }
  return "?";
}

std::string Stats::to_string() const {
  // The first column as wide as its longest label ("opencl0 H2D"), so that the numbers line up.
  std::size_t width = 10;
  for (const auto& d : devices)
    for (int r = 0; r < kRouteCount; ++r)
      width = std::max(width,
                       d.name.size() + 1 + std::string_view(hdsm::to_string(static_cast<Route>(r))).size());
  std::string out = fmt::format("hdsm statistics\n  {:<{}} {:>16} {:>12} {:>12}\n", "route", width, "bytes",
                                "transfers", "kernels");
  auto row = [&](const std::string& who, const RouteStats* routes, std::uint64_t kernels) {
    for (int r = 0; r < kRouteCount; ++r)
      out +=
          fmt::format("  {:<{}} {:>16} {:>12} {:>12}\n", who + " " + hdsm::to_string(static_cast<Route>(r)),
                      width, routes[r].bytes, routes[r].transfers, r == 0 ? fmt::format("{}", kernels) : "");
  };
  for (const auto& d : devices) row(d.name, d.routes, d.kernel_launches);
  row("total", routes, kernel_launches);
  for (const auto& d : devices)
    if (d.kernel_ns + d.transfer_ns != 0)
      out += fmt::format("  {} device time: kernels {:.3f} ms, copies {:.3f} ms\n", d.name,
                         static_cast<double>(d.kernel_ns) / 1e6, static_cast<double>(d.transfer_ns) / 1e6);
  for (const auto& d : devices)
    if (d.program_builds + d.program_cache_loads != 0)
      out += fmt::format("  {} programs: {} built from source, {} loaded from the cache\n", d.name,
                         d.program_builds, d.program_cache_loads);
  out += fmt::format(
      "  shared memory faults: {} read, {} write, {:.3f} ms in the handler; {} objects fetched at syncs\n",
      read_faults, write_faults, static_cast<double>(fault_handler_ns) / 1e6, sync_prefetches);
  out += fmt::format("  enqueue lock waits: {} contended, {:.3f} ms blocked\n", lock_waits,
                     static_cast<double>(lock_wait_ns) / 1e6);
  for (int a = 0; a < kActionCount; ++a)
    out += fmt::format("  {:<16} {:>16} {:>12}\n", hdsm::to_string(static_cast<Action>(a)), actions[a].bytes,
                       actions[a].transfers);
  for (int r = 0; r < kCopyRouteCount; ++r)
    if (copies[r].transfers != 0)
      out += fmt::format("  {:<16} {:>16} {:>12}\n",
                         fmt::format("copies {}", hdsm::to_string(static_cast<CopyRoute>(r))),
                         copies[r].bytes, copies[r].transfers);
  return out;
}

namespace obs {

DeviceCounters& Counters::add_device(std::string name) {
  std::lock_guard lock(mutex_);
  return devices_.emplace_back(std::move(name));
}

Stats Counters::snapshot() const {
  std::lock_guard lock(mutex_);
  Stats s;
  for (const auto& d : devices_) {
    DeviceStats ds;
    ds.name = d.name;
    for (int r = 0; r < kRouteCount; ++r) {
      ds.routes[r] = d.routes[r].load();
      s.routes[r].bytes += ds.routes[r].bytes;
      s.routes[r].transfers += ds.routes[r].transfers;
    }
    ds.kernel_launches = d.kernel_launches.load(std::memory_order_relaxed);
    ds.kernel_ns = d.kernel_ns.load(std::memory_order_relaxed);
    ds.transfer_ns = d.transfer_ns.load(std::memory_order_relaxed);
    ds.program_builds = d.program_builds.load(std::memory_order_relaxed);
    ds.program_cache_loads = d.program_cache_loads.load(std::memory_order_relaxed);
    s.kernel_launches += ds.kernel_launches;
    s.devices.push_back(std::move(ds));
  }
  s.read_faults = read_faults.load(std::memory_order_relaxed);
  s.write_faults = write_faults.load(std::memory_order_relaxed);
  s.sync_prefetches = sync_prefetches.load(std::memory_order_relaxed);
  s.kept_views = kept_views.load(std::memory_order_relaxed);
  s.fault_handler_ns = fault_handler_ns.load(std::memory_order_relaxed);
  s.lock_wait_ns = lock_wait_ns.load(std::memory_order_relaxed);
  s.lock_waits = lock_waits.load(std::memory_order_relaxed);
  for (int a = 0; a < kActionCount; ++a) s.actions[a] = actions[a].load();
  for (int r = 0; r < kCopyRouteCount; ++r) s.copies[r] = copies[r].load();
  return s;
}

void Counters::reset() {
  std::lock_guard lock(mutex_);
  for (auto& d : devices_) {
    for (auto& r : d.routes) r.reset();
    d.kernel_launches.store(0, std::memory_order_relaxed);
    d.kernel_ns.store(0, std::memory_order_relaxed);
    d.transfer_ns.store(0, std::memory_order_relaxed);
    d.program_builds.store(0, std::memory_order_relaxed);
    d.program_cache_loads.store(0, std::memory_order_relaxed);
  }
  read_faults.store(0, std::memory_order_relaxed);
  write_faults.store(0, std::memory_order_relaxed);
  sync_prefetches.store(0, std::memory_order_relaxed);
  kept_views.store(0, std::memory_order_relaxed);
  fault_handler_ns.store(0, std::memory_order_relaxed);
  lock_wait_ns.store(0, std::memory_order_relaxed);
  lock_waits.store(0, std::memory_order_relaxed);
  for (auto& a : actions) a.reset();
  for (auto& c : copies) c.reset();
}

}  // namespace obs
}  // namespace hdsm
