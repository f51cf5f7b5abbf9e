#include "device/sim/link_model.hpp"

#include <sys/prctl.h>
#include <algorithm>
#include <thread>

namespace hdsm::sim {
namespace {

std::chrono::nanoseconds wire_time(std::size_t bytes, double bytes_per_ns) {
  if (bytes_per_ns <= 0) return std::chrono::nanoseconds{0};
  // Saturated: a time past the int64 range is no conversion (undefined), and a year is forever here.
  constexpr double kLongest = 365.0 * 24 * 3600 * 1e9;
  return std::chrono::nanoseconds(
      static_cast<std::int64_t>(std::min(static_cast<double>(bytes) / bytes_per_ns, kLongest)));
}

}  // namespace

LinkModel::LinkModel(double gbps, double latency_us)
    : bytes_per_ns_(gbps > 0 ? gbps : 0), latency_(static_cast<std::int64_t>(latency_us * 1000.0)) {}

Clock::duration LinkModel::duration(std::size_t bytes) const {
  return latency_ + wire_time(bytes, bytes_per_ns_);
}

HostBus::HostBus(double gbps) : bytes_per_ns_(gbps > 0 ? gbps : 0) {}

Clock::time_point HostBus::carry(Clock::time_point start, std::size_t bytes) {
  if (bytes_per_ns_ <= 0) return start;
  std::lock_guard lock(mutex_);
  free_at_ = std::max(free_at_, start) + wire_time(bytes, bytes_per_ns_);
  return free_at_;
}

void hold_until(Clock::time_point deadline) {
  // Sleeping overshoots by tens of microseconds, so sleep only while the deadline is far and spin
  // (yielding the core) for the rest.
  constexpr auto kSpin = std::chrono::microseconds(80);
  auto now = Clock::now();
  if (deadline - now > kSpin) std::this_thread::sleep_until(deadline - kSpin);
  while (Clock::now() < deadline) std::this_thread::yield();
}

void precise_timers_for_this_thread() {
  // Best effort: without it sleeps are only less precise, so a failure is not an error.
  (void)::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
}

}  // namespace hdsm::sim
