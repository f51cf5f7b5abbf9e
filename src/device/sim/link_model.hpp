// The link model of sim devices: a transfer of n bytes takes latency + n / bandwidth; transfers that
// cross host memory also share one host bus.
#pragma once

#include <hdsm/export.h>

#include <chrono>
#include <cstddef>
#include <mutex>

HDSM_VISIBLE_BEGIN
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

/// The host memory bus that every sim device of a runtime crosses for H2D and D2H transfers (peer
/// copies and copies inside a device do not). Each transfer of n bytes needs n / rate of bus time;
/// the bus keeps a modelled timeline like an engine's, the time its backlog is carried (`free_at`), so
/// a transfer's bus time starts at its own start or when the bus is through with the transfers
/// before it. Overlapping transfers thus share the rate: together they never move more than the
/// rate, while one that finds the bus idle is limited by its link alone.
class HostBus {
 public:
  explicit HostBus(double gbps);  // 0: unlimited
  /// Takes the bus time of a transfer of `bytes` that starts at `start` in the model and returns
  /// the earliest modelled end the bus allows (`start` when unlimited).
  Clock::time_point carry(Clock::time_point start, std::size_t bytes);
  bool limited() const { return bytes_per_ns_ > 0; }

 private:
  double bytes_per_ns_;
  std::mutex mutex_;
  Clock::time_point free_at_{};  // under mutex_: when the bus has carried every transfer so far
};

/// Wait until `deadline` with microsecond precision: sleep while far, then spin.
void hold_until(Clock::time_point deadline);

/// Make sleeps of the calling thread precise (no timer slack); used by DMA-engine threads.
void precise_timers_for_this_thread();

}  // namespace hdsm::sim

HDSM_VISIBLE_END
