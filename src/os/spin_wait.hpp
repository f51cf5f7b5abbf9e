// Spin-then-block waiting. On a virtual machine, waking a thread that sleeps on a futex costs tens
// of microseconds, while handing off to a thread that spins costs about one. So every hand-off that
// a round trip waits for (an event, a queue's next operation, a fault's answer, the executor's next
// job) first spins for a short budget and sleeps only after it, as CUDA's cudaDeviceScheduleAuto and
// OpenMP's OMP_WAIT_POLICY do. The policy is process-wide (HDSM_WAIT_POLICY, HDSM_WAIT_SPIN_US; the
// runtime sets it when it starts). Everything here is async-signal-safe.
#pragma once

#include <hdsm/export.h>

#include <atomic>
#include <cstdint>
#include <ctime>

#include <sched.h>

namespace hdsm::os {

/// automatic: spin for the budget, then sleep; spin: never sleep (for dedicated cores: idle helper
/// threads keep theirs busy); block: sleep at once.
enum class WaitPolicy : std::uint8_t { automatic, spin, block };

namespace detail {
/// Nanoseconds a wait spins before it sleeps: 0 under block, all ones under spin. One variable for
/// the process, defined in libhdsm and exported: an inline variable would be a hidden copy in each
/// library built with hidden visibility, and set_wait_policy would set libhdsm's alone.
extern HDSM_API std::atomic<std::uint64_t> spin_budget_ns;
}  // namespace detail

/// Sets the process-wide policy; `spin_us` is the budget of automatic.
void set_wait_policy(WaitPolicy policy, std::uint32_t spin_us) noexcept;

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

inline std::uint64_t monotonic_ns() noexcept {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(t.tv_nsec);
}

/// The policy's budget: nanoseconds a wait spins before it sleeps (0 under block, all ones under
/// spin).
inline std::uint64_t spin_budget() noexcept { return detail::spin_budget_ns.load(std::memory_order_relaxed); }

/// Spins until ready() holds or `budget` nanoseconds are spent (all ones: never gives up); returns
/// ready(). The caller then sleeps the usual way (futex, condition variable) where it returned false.
/// Every few microseconds the spinning thread yields its core, so spinners never keep a thread that
/// has work from running. A thread whose partner has a core of its own passes `quiet` to spin that
/// many nanoseconds without yielding first: a `sched_yield` costs about half a microsecond on a
/// virtual machine, so a spinner is inside one a quarter of its time, and of many threads released
/// together one nearly always notices late.
template <class Ready>
bool spin_until_for(std::uint64_t budget, Ready&& ready, std::uint64_t quiet = 0) {
  if (ready()) return true;
  if (budget == 0) return false;
  const std::uint64_t start = monotonic_ns();
  for (unsigned i = 1;; ++i) {
    cpu_relax();
    if (ready()) return true;
    if (i % 64 == 0) {
      const std::uint64_t spent = monotonic_ns() - start;
      if (spent >= budget) return ready();
      if (spent >= quiet) ::sched_yield();
    }
  }
}

/// Spins until ready() holds or the policy's budget is spent; returns ready().
template <class Ready>
bool spin_until(Ready&& ready) {
  return spin_until_for(spin_budget(), ready);
}

}  // namespace hdsm::os
