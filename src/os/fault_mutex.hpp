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

#include <atomic>

namespace hdsm::os {

class FaultMutex {
 public:
  FaultMutex() = default;
  FaultMutex(const FaultMutex&) = delete;
  FaultMutex& operator=(const FaultMutex&) = delete;

  bool try_lock() noexcept {
    int expected = 0;
    return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }

  void lock() noexcept {
    int seen = 0;
    if (state_.compare_exchange_strong(seen, 1, std::memory_order_acquire, std::memory_order_relaxed)) return;
    // Announce a waiter (2) with every attempt, so the holder's unlock wakes one.
    if (seen != 2) seen = state_.exchange(2, std::memory_order_acquire);
    while (seen != 0) {
      state_.wait(2, std::memory_order_relaxed);
      seen = state_.exchange(2, std::memory_order_acquire);
    }
  }

  void unlock() noexcept {
    if (state_.exchange(0, std::memory_order_release) == 2) state_.notify_one();
  }

 private:
  std::atomic<int> state_{0};
};

}  // namespace hdsm::os
