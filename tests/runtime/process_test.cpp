// The ADSM runtime and the process around it: a child of fork(), and exit() from a kernel.
#include "support/death_style.hpp"
#include "support/test_support.hpp"

#include <hdsm/crc.hpp>
#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace {

const hdsm::Kernel& fill() {
  static const hdsm::Kernel k =
      hdsm::per_thread("fill", [](const hdsm::Thread& t, int* x, std::uint64_t n, int v) {
        if (t.global_x() < n) x[t.global_x()] = v;
      });
  return k;
}

bool died(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// A sanitizer's SIGSEGV handler, installed before hdsm's, reports the fault in its own words.
constexpr const char* kChildFaultMessage = "";
#else
constexpr const char* kChildFaultMessage = "child of fork\\(\\), which has none of it";
#endif

// The shared objects are memfd views, shared with a child of fork(): the child's stores landed in
// the parent's objects, behind the parent's protocol. The child has none of them now (a fault that
// says why), and cannot use the parent's runtime, whose threads it lacks: its calls are refused, and
// its exit does not wait for them (before, it hung in the runtime's destructor).
TEST(RuntimeForkDeathTest, AChildOfForkHasNeitherTheObjectsNorTheRuntime) {
  const hdsm::test::DeathTestStyle style("fast");  // a plain fork() of this process, runtime and all
  int* x = hdsm::alloc<int>(1024);
  hdsm::call(fill(), hdsm::cover(1024), x, std::uint64_t{1024}, 5);
  hdsm::sync();
  ASSERT_EQ(x[7], 5);
  EXPECT_EXIT(
      {
        x[7] = -1;
        std::_Exit(0);
      },
      died, kChildFaultMessage);
  EXPECT_EQ(x[7], 5);
  EXPECT_EXIT(
      {
        try {
          (void)hdsm::alloc<int>(16);
        } catch (const hdsm::Unsupported& e) {
          std::fputs(e.what(), stderr);
          std::exit(0);  // the static destructors run: the default runtime's must not wait
        }
        std::_Exit(1);
      },
      ::testing::ExitedWithCode(0), "hdsm's runtime was made before this process was forked");
  hdsm::free(x);
}

// A runtime the child makes itself works as in any process: the parent's fault ranges and arenas are
// not the child's (before, its arena could land where the parent's was, and its registration then
// found the parent's range there).
TEST(RuntimeForkDeathTest, AChildOfForkMakesARuntimeOfItsOwn) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer ends a child of a threaded fork() that starts threads (die_after_fork)";
#endif
#if defined(__SANITIZE_ADDRESS__)
  // The child's new threads allocate in ASan's allocator, whose lock a parent thread may have held at
  // fork(): 2 of 10 runs hung there (seen in gdb: every child thread in SizeClassAllocator64's lock).
  GTEST_SKIP() << "AddressSanitizer's allocator lock may be held across a threaded fork()";
#endif
  const hdsm::test::DeathTestStyle style("fast");
  auto parent = std::make_unique<hdsm::Runtime>(hdsm::test::fast_sim_config());
  int* x = parent->alloc<int>(1024);
  EXPECT_EXIT(
      {
        for (int round = 0; round < 20; ++round) {  // more runtimes than the 16 fault ranges
          hdsm::Runtime own(hdsm::test::fast_sim_config());
          int* y = own.alloc<int>(1024);
          own.call(fill(), hdsm::cover(1024), y, std::uint64_t{1024}, round);
          own.sync();
          if (y[1023] != round) std::_Exit(1);
          own.free(y);
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  parent->free(x);
}

// An explicit runtime the child destroys: its threads are the parent's, and joining them waited
// forever.
TEST(RuntimeForkDeathTest, AChildOfForkDestroysItsParentsRuntimeWithoutWaiting) {
  const hdsm::test::DeathTestStyle style("fast");
  auto rt = std::make_unique<hdsm::Runtime>(hdsm::test::fast_sim_config());
  int* x = rt->alloc<int>(1024);
  rt->call(fill(), hdsm::cover(1024), x, std::uint64_t{1024}, 5);
  rt->sync();
  EXPECT_EXIT(
      {
        rt.reset();
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EQ(x[3], 5);
  rt->free(x);
}

// A runtime that a task makes and destroys is its own: it is torn down there as anywhere (only what
// was made outside the program's code is left alone from inside it, for exit() in a kernel).
// Leaked, each would keep its fault range, and the 17th would find none free.
TEST(RuntimeInUserCode, ARuntimeMadeAndDestroyedInATaskIsTornDown) {
  hdsm::crc::Options o;
  o.workers = 1;
  o.shared_bytes = 16 << 20;
  hdsm::crc::Runtime crc(o);
  crc.run([] {
    for (int round = 0; round < 20; ++round) {
      hdsm::Runtime own(hdsm::test::fast_sim_config());
      int* y = own.alloc<int>(1024);
      y[0] = round;
      own.free(y);
    }
  });
}

// exit() in a kernel runs the static destructors on the thread that runs the kernel: the default
// runtime's teardown waited for its device queue, which that very thread was busy with, forever.
TEST(RuntimeExitDeathTest, ExitFromAKernelEndsTheProcessWithItsCode) {
#if defined(__SANITIZE_THREAD__)
  // exit() on one thread while others still run the kernel races by nature (the static destructors
  // against the running blocks): ThreadSanitizer says so and exits with its own code.
  GTEST_SKIP() << "exit() from a running kernel races with its other threads by nature";
#endif
  const hdsm::test::DeathTestStyle style("threadsafe");
  const auto run = [] {
    static const hdsm::Kernel exits = hdsm::per_thread("exits", [](const hdsm::Thread& t, int*) {
      if (t.global_x() == 0) std::exit(3);
    });
    int* x = hdsm::alloc<int>(64);
    hdsm::call(exits, hdsm::cover(64), x);
    hdsm::sync();
    std::_Exit(0);
  };
  EXPECT_EXIT(run(), ::testing::ExitedWithCode(3), "");
}

}  // namespace
