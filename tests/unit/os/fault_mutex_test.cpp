// FaultMutex, the lock the fault handler takes: exclusion under contention, try_lock, and waiters
// woken by unlock (a lost wake-up hangs the test until ctest's timeout).
#include "os/fault_mutex.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace {

using hdsm::os::FaultMutex;

TEST(FaultMutex, TryLockFailsWhileHeldAndSucceedsAfterUnlock) {
  FaultMutex m;
  ASSERT_TRUE(m.try_lock());
  EXPECT_FALSE(m.try_lock());
  std::thread other([&] { EXPECT_FALSE(m.try_lock()); });
  other.join();
  m.unlock();
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

// A non-atomic read-modify-write under the lock loses increments unless the lock excludes.
TEST(FaultMutex, ExcludesUnderContention) {
  FaultMutex m;
  std::uint64_t counter = 0;
  constexpr int kThreads = 4, kRounds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        if ((i + t) % 3 == 0) {
          while (!m.try_lock()) std::this_thread::yield();
        } else {
          m.lock();
        }
        const std::uint64_t seen = counter;
        if (i % 64 == 0) std::this_thread::yield();  // widen the window for a second owner
        counter = seen + 1;
        m.unlock();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, std::uint64_t{kThreads} * kRounds);
}

// Threads that sleep on the lock are woken one by one as each owner unlocks.
TEST(FaultMutex, UnlockWakesSleepingWaiters) {
  FaultMutex m;
  m.lock();
  std::atomic<int> done{0};
  std::vector<std::thread> waiters;
  for (int t = 0; t < 3; ++t)
    waiters.emplace_back([&] {
      const std::lock_guard lock(m);
      done.fetch_add(1);
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let them block
  EXPECT_EQ(done.load(), 0);
  m.unlock();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(done.load(), 3);
}

}  // namespace
