// Futex waits and wakes as plain system calls, on a 32-bit word reached through std::atomic_ref.
// A fault handler may make them (a system call is async-signal-safe); std::atomic::wait goes through
// the C++ library's table of waiters, which the standard does not promise safe in a signal handler.
#pragma once

#include <cerrno>
#include <cstdint>
#include <ctime>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace hdsm::os {

/// Sleeps while `word` holds `expected`: returns at once when it does not, and on any wake (spurious
/// ones included), so the caller checks its condition again.
inline void futex_wait(std::uint32_t& word, std::uint32_t expected) noexcept {
  ::syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

/// futex_wait for at most `seconds`; false when the time ran out (the word may still be `expected`).
inline bool futex_wait_for(std::uint32_t& word, std::uint32_t expected, long seconds) noexcept {
  const struct timespec limit { seconds, 0 };
  return ::syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, expected, &limit, nullptr, 0) == 0 ||
         errno != ETIMEDOUT;
}

/// Wakes up to `count` threads sleeping on `word`.
inline void futex_wake(std::uint32_t& word, int count = 1) noexcept {
  ::syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, count, nullptr, nullptr, 0);
}

}  // namespace hdsm::os
