// Skeleton calls are asynchronous on devices and synchronize implicitly: a call returns before its
// work runs; a call that reads what another wrote waits for it; host accesses wait only for the calls
// they conflict with; an independent call does not wait for another; a reduction's Future
// waits when read; a failure in a call's work reaches the program at the next access of what it
// wrote (or the Future's get), naming the kernel and its user function. Shown without timing: the
// user functions below (host and sim only) hold their thread at a gate the test opens, and give up
// after 10 s with a marker value, so a call that waited where it must not computes the marker.
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

constexpr long kTimedOut = -1'000'000;

std::atomic<int> g_arrived{0};
std::atomic<bool> g_open{false};

// Arrives, then waits until the gate opens and `arrivals` threads arrived; false after 10 s.
bool wait_at_gate(int arrivals) {
  g_arrived.fetch_add(1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!g_open.load() || g_arrived.load() < arrivals) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

void reset_gate() {
  g_arrived = 0;
  g_open = false;
}

long gated(long x) { return wait_at_gate(1) ? x : kTimedOut; }
// Passes only once two threads are at the gate at the same time.
long gated_pair(long x) { return wait_at_gate(2) ? x : kTimedOut; }
long explode(long x) {
  if (x == 7) throw std::runtime_error("seven is not allowed");
  return x;
}

HDSM_USER_FUNCTION(as_gated, long, (long x), { return gated(x); })
HDSM_USER_FUNCTION(as_plus_one, long, (long x), { return x + 1; })
HDSM_USER_FUNCTION(as_gated_pair, long, (long x), { return gated_pair(x); })
HDSM_USER_FUNCTION(as_gated_add, long, (long a, long b), { return gated(a) + b; })
HDSM_USER_FUNCTION(as_boom, long, (long x), { return explode(x); })

class Async : public ::testing::Test {
 protected:
  void SetUp() override { reset_gate(); }
  void TearDown() override { g_open = true; }
  hdsm::Runtime rt{hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2")};
  hdsm::ContainerOptions o{&rt};
};

TEST_F(Async, ACallReturnsBeforeItsWorkRuns) {
  hdsm::Vector<long> a(1, 5L, o), b(1, o);
  hdsm::Map<as_gated> map;
  map.devices({0})(b, a);
  g_open = true;  // only now can the kernel finish
  EXPECT_EQ(b[0], 5) << "the call waited for its kernel";
}

TEST_F(Async, ACallThatReadsWhatAnotherWritesWaitsForIt) {
  hdsm::Vector<long> a(1, 5L, o), b(1, 0L, o), c(1, o);
  hdsm::Map<as_gated> first;
  hdsm::Map<as_plus_one> second;
  first.devices({0})(b, a);   // writes b on device 0, held at the gate
  second.devices({1})(c, b);  // reads b on device 1: after the first call
  g_open = true;
  EXPECT_EQ(c[0], 6) << "the second call read b before the first wrote it";
  EXPECT_EQ(b[0], 5);
}

TEST_F(Async, HostAccessesWaitOnlyForTheCallsTheyConflictWith) {
  hdsm::Vector<long> a(1, 5L, o), b(1, o), other(1, 42L, o);
  hdsm::Map<as_gated> map;
  map.devices({0})(b, a);   // reads a, writes b; held at the gate
  EXPECT_EQ(other[0], 42);  // another container: no wait
  EXPECT_EQ(a[0], 5);       // a read of what the call only reads: no wait
  g_open = true;
  EXPECT_EQ(b[0], 5) << "a host access waited for a call it does not conflict with";
}

// The second call uses none of the first's containers: it is enqueued while the first's kernel is
// held (no false dependency). Sim devices on the host's executor (HDSM_SIM_THREADS=0, the default)
// then run their kernels one at a time; with executors of their own they run them at once
// (IndependentCallsOnTwoDevicesRunAtOnce), as real devices do.
TEST_F(Async, AnIndependentCallDoesNotWaitForAnother) {
  hdsm::Vector<long> a(1, 3L, o), b(1, 4L, o), c(1, o), d(1, o);
  hdsm::Map<as_gated> held;
  hdsm::Map<as_plus_one> free;
  held.devices({0})(c, a);
  free.devices({1})(d, b);
  free.devices({0})(b, a);  // reads what the held call reads, on its device: no wait either
  g_open = true;
  EXPECT_EQ(c[0], 3) << "an independent call waited for the held one";
  EXPECT_EQ(d[0], 5);
  EXPECT_EQ(b[0], 4);
}

// Each call's kernel passes the gate only while the other's is at it too: with one kernel at a time
// both would give up after 10 s and compute the marker.
TEST(AsyncOverlap, IndependentCallsOnTwoDevicesRunAtOnce) {
  reset_gate();
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2").set("HDSM_SIM_THREADS", "1"));
  const hdsm::ContainerOptions o{&rt};
  hdsm::Vector<long> a(1, 3L, o), b(1, 4L, o), c(1, o), d(1, o);
  hdsm::Map<as_gated_pair> map;
  map.devices({0})(c, a);
  map.devices({1})(d, b);
  g_open = true;
  EXPECT_EQ(c[0], 3) << "the kernels of the two devices did not run at the same time";
  EXPECT_EQ(d[0], 4);
  EXPECT_EQ(g_arrived.load(), 2);
}

TEST_F(Async, AReductionsFutureWaitsWhenRead) {
  hdsm::Vector<long> a(2, 7L, o);
  hdsm::Reduce<as_gated_add> sum;
  hdsm::Future<long> result = sum.devices({0}).async(a);
  EXPECT_FALSE(result.ready());
  g_open = true;
  EXPECT_EQ(result.get(), 14) << "async waited for its kernel";
  EXPECT_TRUE(result.ready());
  hdsm::MapReduce<as_plus_one, as_gated_add> mr;
  reset_gate();
  hdsm::Future<long> mapped = mr.devices({0, 1}).chunks(1).async(a);
  g_open = true;
  EXPECT_EQ(mapped.get(), 16);
  EXPECT_EQ(sum.backend(hdsm::SkeletonBackend::host).async(a).get(), 14);
}

TEST_F(Async, AFailureReachesTheNextAccessOfWhatTheCallWrote) {
  hdsm::Vector<long> a(100, o), b(100, o);
  for (std::size_t i = 0; i < 100; ++i) a(i) = static_cast<long>(i);
  hdsm::Map<as_boom> map;
  map.devices({0, 1})(b, a);  // element 7 fails, on device 0
  try {
    const long v = b[3];
    FAIL() << "the failure was not reported; read " << v;
  } catch (const hdsm::KernelFailure& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("hdsm_map_as_boom"), std::string::npos) << what;
    EXPECT_NE(what.find("seven is not allowed"), std::string::npos) << what;
  }
  EXPECT_THROW(map.backend(hdsm::SkeletonBackend::host)(b, a), std::runtime_error) << "host: at the call";
}

// The same after the failed call completed and another access pruned the container's finished work:
// the failed work is kept until an access reports it (before, the prune dropped it, and the read of
// b went unreported, since a device reports a failure once).
TEST_F(Async, AFailureSurvivesThePruneOfFinishedWork) {
  hdsm::Vector<long> a(100, o), b(100, o);
  for (std::size_t i = 0; i < 100; ++i) a(i) = static_cast<long>(i);
  hdsm::Map<as_boom> map;
  map.devices({0, 1})(b, a);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));           // the kernels have finished
  EXPECT_EQ(static_cast<long>(b[99]), 99) << "device 1's part is fine";  // prunes b's finished work
  EXPECT_THROW((void)static_cast<long>(b[3]), hdsm::KernelFailure);
  EXPECT_NO_THROW((void)static_cast<long>(b[3])) << "reported once";
}

// A failure is reported by what the call wrote, not also by what it only read: an input's next
// access neither throws it again nor is lost. Before, a host write of the input after the caught
// failure threw the same KernelFailure, and the write did not happen.
TEST_F(Async, AFailureIsNotReportedAgainByTheCallsInputs) {
  hdsm::Vector<long> a(100, o), b(100, o);
  for (std::size_t i = 0; i < 100; ++i) a(i) = static_cast<long>(i);
  hdsm::Map<as_boom> map;
  map.devices({0, 1})(b, a);
  EXPECT_THROW((void)static_cast<long>(b[3]), hdsm::KernelFailure);
  EXPECT_NO_THROW(a[7] = 70);  // a write waits for the call's reads of a
  EXPECT_EQ(static_cast<long>(a[7]), 70);
  g_open = true;
  a[7] = 7;
  EXPECT_THROW((void)(hdsm::MapReduce<as_boom, as_gated_add>{}.devices({1})(a)), hdsm::KernelFailure);
  EXPECT_NO_THROW(a[5] = 1);
  EXPECT_EQ(static_cast<long>(a[5]), 1);
  EXPECT_NO_THROW(a.wait());
}

TEST_F(Async, AFailedReductionThrowsFromGet) {
  hdsm::Vector<long> a(10, 7L, o);
  hdsm::MapReduce<as_boom, as_gated_add> mr;
  g_open = true;
  hdsm::Future<long> result = mr.devices({1}).async(a);
  EXPECT_THROW(result.get(), hdsm::KernelFailure);
  // Every later get() too: before, the second combined what the failed call left and returned it.
  EXPECT_THROW(result.get(), hdsm::KernelFailure);
  EXPECT_FALSE(result.ready());
}

}  // namespace
