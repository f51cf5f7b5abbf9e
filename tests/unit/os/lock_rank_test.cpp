// Lock ranks (src/os/lock_rank.hpp): debug builds abort on a lock taken against the order, release
// builds keep the bare mutex.
#include "os/lock_rank.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <mutex>

namespace {

using hdsm::os::FaultMutex;
using hdsm::os::LockRank;
using hdsm::os::RankedMutex;

TEST(LockRank, LocksInRankAndDeviceOrderAreFine) {
  RankedMutex<std::mutex> call0(LockRank::call, 0), call1(LockRank::call, 1);
  RankedMutex<FaultMutex> entry(LockRank::entry), window(LockRank::window);
  RankedMutex<std::mutex> objects(LockRank::objects);
  std::scoped_lock a(call0);
  std::scoped_lock b(call1);
  std::scoped_lock c(entry);
  std::scoped_lock d(window);
  std::scoped_lock e(objects);
  SUCCEED();
}

TEST(LockRank, AReleasedLockNoLongerCounts) {
  RankedMutex<std::mutex> objects(LockRank::objects);
  RankedMutex<FaultMutex> entry(LockRank::entry);
  { std::scoped_lock a(objects); }
  std::scoped_lock b(entry);  // objects was released: entry may be taken
  std::scoped_lock c(objects);
}

#ifndef NDEBUG
using LockRankDeathTest = ::testing::Test;

TEST_F(LockRankDeathTest, ALockAgainstTheOrderAborts) {
  hdsm::test::default_disposition_under_sanitizers();
  EXPECT_DEATH(
      {
        RankedMutex<std::mutex> objects(LockRank::objects);
        RankedMutex<FaultMutex> entry(LockRank::entry);
        std::scoped_lock a(objects);
        std::scoped_lock b(entry);
      },
      "lock ranks broken: taking the shared object lock .* while holding the object table lock");
}

TEST_F(LockRankDeathTest, DeviceLocksOfOneRankGoInIndexOrder) {
  EXPECT_DEATH(
      {
        RankedMutex<std::mutex> call0(LockRank::call, 0);
        RankedMutex<std::mutex> call1(LockRank::call, 1);
        std::scoped_lock a(call1);
        std::scoped_lock b(call0);
      },
      "taking the call lock \\(order 0\\) while holding the call lock \\(order 1\\)");
}

TEST_F(LockRankDeathTest, ATryLockAgainstTheOrderAbortsToo) {
  EXPECT_DEATH(
      {
        RankedMutex<std::mutex> engine(LockRank::engine);
        RankedMutex<std::mutex> call(LockRank::call);
        std::scoped_lock a(engine);
        (void)call.try_lock();
      },
      "taking the call lock");
}
#endif

TEST(LockRank, AFaultHandlersTryLockIsNotChecked) {
  // A handler must not touch thread-local state: its try_lock is neither checked nor recorded.
  RankedMutex<std::mutex> objects(LockRank::objects);
  RankedMutex<FaultMutex> entry(LockRank::entry);
  std::scoped_lock a(objects);
  ASSERT_TRUE(entry.try_lock());
  entry.unlock();
}

}  // namespace
