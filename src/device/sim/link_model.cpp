#include "device/sim/link_model.hpp"

#include <sys/prctl.h>
#include <thread>

namespace hdsm::sim {

LinkModel::LinkModel(double gbps, double latency_us)
    : bytes_per_ns_(gbps > 0 ? gbps : 0), latency_(static_cast<std::int64_t>(latency_us * 1000.0)) {}

Clock::duration LinkModel::duration(std::size_t bytes) const {
  std::chrono::nanoseconds wire{0};
  if (bytes_per_ns_ > 0) wire = std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(bytes) / bytes_per_ns_));
  return latency_ + wire;
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
