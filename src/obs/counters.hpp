// Transfer and kernel counters of one runtime: relaxed atomics on the hot path, a Stats snapshot
// for readers.
#pragma once

#include <hdsm/stats.hpp>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

namespace hdsm::obs {

struct RouteCounter {
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> transfers{0};
  void add(std::uint64_t n) {
    bytes.fetch_add(n, std::memory_order_relaxed);
    transfers.fetch_add(1, std::memory_order_relaxed);
  }
  RouteStats load() const {
    return {bytes.load(std::memory_order_relaxed), transfers.load(std::memory_order_relaxed)};
  }
  void reset() {
    bytes.store(0, std::memory_order_relaxed);
    transfers.store(0, std::memory_order_relaxed);
  }
};

struct DeviceCounters {
  explicit DeviceCounters(std::string n) : name(std::move(n)) {}
  std::string name;
  RouteCounter routes[kRouteCount];
  std::atomic<std::uint64_t> kernel_launches{0};
  std::atomic<std::uint64_t> kernel_ns{0};       // device time of kernels (sim, OpenCL); 0 where not measured
  std::atomic<std::uint64_t> transfer_ns{0};     // device time of copies (sim: modelled, OpenCL); 0 where not
  std::atomic<std::uint64_t> program_builds{0};  // kernel programs compiled from source
  std::atomic<std::uint64_t> program_cache_loads{0};  // kernel programs loaded from the on-disk cache
  RouteCounter& route(Route r) { return routes[static_cast<int>(r)]; }
};

class Counters {
 public:
  /// Counters for one more device; the reference stays valid for the life of this object.
  DeviceCounters& add_device(std::string name);
  std::atomic<std::uint64_t> read_faults{0};
  std::atomic<std::uint64_t> write_faults{0};
  std::atomic<std::uint64_t> sync_prefetches{0};
  std::atomic<std::uint64_t> kept_views{0};
  /// Counted only while time_faults is set (HDSM_STATS or a trace): two clock reads per fault
  /// would otherwise add a measurable share to the cheapest faults.
  std::atomic<std::uint64_t> fault_handler_ns{0};
  bool time_faults = false;
  /// Waits on contended enqueue locks (obs/lock_wait.hpp); uncontended acquisitions add nothing.
  std::atomic<std::uint64_t> lock_wait_ns{0};
  std::atomic<std::uint64_t> lock_waits{0};
  RouteCounter actions[kActionCount];
  RouteCounter& action(Action a) { return actions[static_cast<int>(a)]; }
  RouteCounter copies[kCopyRouteCount];
  RouteCounter& copy(CopyRoute r) { return copies[static_cast<int>(r)]; }

  Stats snapshot() const;
  void reset();

 private:
  mutable std::mutex mutex_;
  std::deque<DeviceCounters> devices_;
};

}  // namespace hdsm::obs
