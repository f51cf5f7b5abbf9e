// The link model of sim devices: a transfer of n bytes takes latency + n / bandwidth.
#pragma once

#include <chrono>
#include <cstddef>

namespace hdsm::sim {

using Clock = std::chrono::steady_clock;

class LinkModel {
 public:
  LinkModel(double gbps, double latency_us);
  /// Modelled duration of one transfer of `bytes` (zero when unthrottled).
  Clock::duration duration(std::size_t bytes) const;
  bool throttled() const { return bytes_per_ns_ > 0 || latency_.count() > 0; }

 private:
  double bytes_per_ns_;  // 0: unlimited bandwidth
  std::chrono::nanoseconds latency_;
};

/// Wait until `deadline` with microsecond precision: sleep while far, then spin.
void hold_until(Clock::time_point deadline);

/// Make sleeps of the calling thread precise (no timer slack); used by DMA-engine threads.
void precise_timers_for_this_thread();

}  // namespace hdsm::sim
