// A mutex for locks that a fault handler takes. The handler resolves a fault in a few hundred
// instructions beside a syscall, and std::mutex's try_lock and unlock (calls into libpthread that
// check the mutex kind and the owner first) were a third of them. Here try_lock is one
// compare-exchange and unlock one exchange, both inline; a waiter sleeps on the word (futex on
// Linux) instead of spinning. The three states are those of Drepper's "Futexes Are Tricky" mutex:
// 0 free, 1 held, 2 held with possible waiters, so an unlock that saw no waiter never wakes anyone.
//
// Meets Lockable, so std::lock_guard, std::unique_lock and std::scoped_lock take it. Not recursive,
// no owner check; std::condition_variable_any waits on it where needed.
#pragma once

#include "os/futex.hpp"

#include <atomic>
#include <cstdint>

namespace hdsm::os {

class FaultMutex {
 public:
  FaultMutex() = default;
  FaultMutex(const FaultMutex&) = delete;
  FaultMutex& operator=(const FaultMutex&) = delete;

  bool try_lock() noexcept {
    std::uint32_t expected = 0;
    return state().compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }

  void lock() noexcept {
    std::uint32_t seen = 0;
    if (state().compare_exchange_strong(seen, 1, std::memory_order_acquire, std::memory_order_relaxed))
      return;
    // Announce a waiter (2) with every attempt, so the holder's unlock wakes one.
    if (seen != 2) seen = state().exchange(2, std::memory_order_acquire);
    while (seen != 0) {
      futex_wait(word_, 2);
      seen = state().exchange(2, std::memory_order_acquire);
    }
  }

  void unlock() noexcept {
    if (state().exchange(0, std::memory_order_release) == 2) futex_wake(word_);
  }

 private:
  std::atomic_ref<std::uint32_t> state() noexcept { return std::atomic_ref<std::uint32_t>(word_); }

  // The futex word, through std::atomic_ref: the waits and wakes are plain system calls, which a
  // fault handler may make.
  alignas(4) std::uint32_t word_ = 0;
};

}  // namespace hdsm::os
