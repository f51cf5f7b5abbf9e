// Device sharing between host threads (seed 003 §4.1): several threads calling kernels on one device
// and on different devices, each checking its data; sync acquiring the calling thread's calls only;
// the lock wait counter (Stats::lock_wait_ns) growing under forced contention and staying zero
// without it.
#include "support/test_support.hpp"

#include "runtime/adsm_model.hpp"
#include "runtime/runtime_impl.hpp"

#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace {

// x[i] += v for i < n.
const hdsm::Kernel& add() {
  static const hdsm::Kernel k =
      hdsm::per_thread("threads_add", [](const hdsm::Thread& t, int* x, std::uint64_t n, int v) {
        if (const auto i = t.global_x(); i < n) x[i] += v;
      });
  return k;
}

// x[i] = y[i] + 1 for i < n.
const hdsm::Kernel& from_plus_one() {
  static const hdsm::Kernel k = hdsm::per_thread(
      "threads_from_plus_one", [](const hdsm::Thread& t, int* x, const int* y, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) x[i] = y[i] + 1;
      });
  return k;
}

std::atomic<bool> gate_open{false};

// Waits for gate_open, then x[0] = v.
const hdsm::Kernel& gated_store() {
  static const hdsm::Kernel k =
      hdsm::per_thread("threads_gated_store", [](const hdsm::Thread& t, int* x, int v) {
        if (t.global_x() != 0) return;
        while (!gate_open.load()) std::this_thread::yield();
        x[0] = v;
      });
  return k;
}

hdsm::Config config(const std::string& protocol, unsigned devices) {
  return hdsm::test::fast_sim_config(protocol)
      .set("HDSM_SIM_DEVICES", std::to_string(devices))
      .set("HDSM_THREADS", "2");
}

constexpr std::size_t n = 3000;

// One thread's work on its own object x: written by the CPU, incremented by kernels (annotated or
// not) on the object's device, checked after every sync.
void work(hdsm::Runtime& rt, int* x, int id, bool annotate, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t i = 0; i < n; i += 7) x[i] = id * 100000 + static_cast<int>(i) + r;
    if (annotate)
      rt.call(add(), hdsm::cover(n), hdsm::inout(x), std::uint64_t{n}, 3);
    else
      rt.call(add(), hdsm::cover(n), x, std::uint64_t{n}, 3);
    rt.call(add(), hdsm::cover(n), hdsm::inout(x), std::uint64_t{n}, 2);
    rt.sync();
    for (std::size_t i = 0; i < n; i += 7)
      ASSERT_EQ(x[i], id * 100000 + static_cast<int>(i) + r + 5) << "thread " << id;
    for (std::size_t i = 1; i < n; i += 7) {
      // Elements the CPU never wrote gain 5 per round.
      ASSERT_EQ(x[i], 5 * (r + 1)) << "thread " << id << " element " << i;
    }
  }
}

// `threads` threads, thread t working on its object on device t % devices; the objects are
// allocated before the threads start and freed after they end (free looks at every device's calls).
void run_threads(hdsm::Runtime& rt, int threads, int devices, bool (*annotate)(int)) {
  std::vector<int*> objects;
  for (int t = 0; t < threads; ++t) objects.push_back(rt.alloc<int>(n, t % devices));
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) running.emplace_back([&, t] { work(rt, objects[t], t, annotate(t), 8); });
  for (auto& th : running) th.join();
  for (int* x : objects) rt.free(x);
}

class AdsmThreads : public ::testing::TestWithParam<std::string> {};

TEST_P(AdsmThreads, ThreadsShareOneDevice) {
  hdsm::Runtime rt(config(GetParam(), 1));
  run_threads(rt, 4, 1, [](int) { return true; });
  EXPECT_EQ(rt.stats().kernel_launches, 4u * 8u * 2u);
}

TEST_P(AdsmThreads, ThreadsOnDifferentDevicesNeverWaitForEachOther) {
  hdsm::Runtime rt(config(GetParam(), 3));
  run_threads(rt, 3, 3, [](int t) { return t % 2 == 0; });
  // Each device has one thread: no call lock was ever contended.
  EXPECT_EQ(rt.stats().lock_waits, 0u);
  EXPECT_EQ(rt.stats().lock_wait_ns, 0u);
}

TEST_P(AdsmThreads, SyncAcquiresTheCallingThreadsCallsOnly) {
  hdsm::Runtime rt(config(GetParam(), 1));
  gate_open = false;
  int* x = rt.alloc<int>(1024);
  int* y = rt.alloc<int>(1024);
  rt.call(gated_store(), hdsm::cover(1), hdsm::inout(x), 7);  // blocked until the gate opens
  // Another thread's sync has no call of its own to wait for: it returns while the kernel still runs.
  std::thread other([&] {
    auto done = std::async(std::launch::async, [&] { rt.sync(); });
    EXPECT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready)
        << "a thread's sync waited for another thread's call";
    gate_open = true;
    done.wait();
    // Its own calls it does acquire.
    rt.call(add(), hdsm::cover(1024), hdsm::inout(y), std::uint64_t{1024}, 4);
    rt.sync();
    EXPECT_EQ(y[1023], 4);
  });
  other.join();
  rt.sync();
  EXPECT_EQ(x[0], 7);
  rt.free(x);
  rt.free(y);
}

TEST_P(AdsmThreads, FreeWaitsForAnotherThreadsCallAndItsSyncSkipsTheObject) {
  hdsm::Runtime rt(config(GetParam(), 1));
  gate_open = false;
  int* x = rt.alloc<int>(1024);
  std::atomic<bool> called{false};
  std::thread caller([&] {
    rt.call(gated_store(), hdsm::cover(1), hdsm::inout(x), 9);
    called = true;
    while (!gate_open.load()) std::this_thread::yield();
    // The object is gone by now (freed by the main thread); the sync still completes.
    while (called.load()) std::this_thread::yield();
    EXPECT_NO_THROW(rt.sync());
  });
  while (!called.load()) std::this_thread::yield();
  std::thread opener([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate_open = true;
  });
  rt.free(x);  // waits for the gated kernel
  called = false;
  opener.join();
  caller.join();
}

// An unannotated call releases every object of its device, and its sync acquires those, not objects
// allocated since: no kernel of the call can have used them, and acquiring them made the device's
// zeros replace what the host wrote (another thread's new object, or the calling thread's own).
// An unannotated call's sync acquires every object its release saw, other threads' too, which they
// may free meanwhile: such an object is skipped, not copied from its freed buffer into its freed
// view (a crash or heap corruption in 2 of 6 runs of this test before).
TEST_P(AdsmThreads, AnotherThreadsFreeDuringAnUnannotatedCallsSyncIsSkipped) {
  hdsm::Runtime rt(config(GetParam(), 1));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        const std::uint64_t count = 100000 + 1000 * t + round;
        int* a = rt.alloc<int>(count);
        for (std::uint64_t i = 0; i < count; ++i) a[i] = 1;
        rt.call(add(), hdsm::cover(count), a, count, 2);  // unannotated
        rt.sync();  // a's content is not checked: another thread's unannotated call may take it over
        rt.free(a);
      }
    });
  for (auto& thread : threads) thread.join();
}

// An annotated input another thread frees while the caller syncs: the sync skips it, as the free
// promises (before, the acquire refused it: "... which another thread is freeing").
TEST_P(AdsmThreads, AnInputFreedDuringTheCallersSyncIsSkipped) {
  hdsm::Runtime rt(config(GetParam(), 2));
  constexpr std::uint64_t kCount = 1 << 18;
  int failures = 0;
  for (int round = 0; round < 40; ++round) {
    int* a = rt.alloc<int>(kCount, 0);
    int* b = rt.alloc<int>(kCount, 1);
    std::atomic<bool> called{false};
    std::thread caller([&] {
      try {
        rt.call(from_plus_one(), hdsm::cover(kCount), hdsm::out(a), hdsm::in(b), kCount);
        called = true;
        rt.sync();
      } catch (const std::exception& e) {
        called = true;
        ++failures;
        ADD_FAILURE() << "round " << round << ": " << e.what();
      }
    });
    while (!called) std::this_thread::yield();
    rt.free(b);
    caller.join();
    EXPECT_EQ(a[kCount - 1], 1);
    rt.free(a);
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(AdsmThreads, AnUnannotatedCallsSyncLeavesObjectsMadeAfterTheCall) {
  hdsm::Runtime rt(config(GetParam(), 1));
  gate_open = false;
  int* x = rt.alloc<int>(1024);
  rt.call(gated_store(), hdsm::cover(1), x, 7);  // unannotated, blocked until the gate opens
  int* mine = rt.alloc<int>(1024);
  mine[5] = 42;
  int* theirs = nullptr;
  std::thread other([&] {
    theirs = rt.alloc<int>(1024);
    theirs[9] = 43;
  });
  other.join();
  gate_open = true;
  rt.sync();
  EXPECT_EQ(x[0], 7);
  EXPECT_EQ(mine[5], 42) << "the calling thread's object made after the call";
  EXPECT_EQ(theirs[9], 43) << "another thread's object made after the call";
  // The next unannotated call uses them, and its sync acquires them.
  rt.call(add(), hdsm::cover(1024), mine, std::uint64_t{1024}, 1);
  rt.sync();
  EXPECT_EQ(mine[5], 43);
  rt.free(x);
  rt.free(mine);
  rt.free(theirs);
}

// Another thread's call on a device where an unannotated call is in flight shares every object with
// it (each release uploads the other's objects, each sync acquires them): said once, on stderr.
// Threads whose calls are all annotated, or that use different devices, hear nothing.
TEST_P(AdsmThreads, AnUnannotatedCallBesideAnotherThreadsCallIsWarnedOnce) {
  hdsm::Runtime rt(config(GetParam(), 2));
  int* x = rt.alloc<int>(1024, 0);
  int* y = rt.alloc<int>(1024, 0);
  int* z = rt.alloc<int>(1024, 1);
  // Another thread calls while the main thread's gated call is in flight (unsynced), then the gate
  // opens (the device runs one kernel at a time) and it syncs.
  const auto other_thread = [&](int* p, bool annotate) {
    std::atomic<bool> called{false};
    std::thread t([&] {
      if (annotate)
        rt.call(add(), hdsm::cover(1024), hdsm::inout(p), std::uint64_t{1024}, 1);
      else
        rt.call(add(), hdsm::cover(1024), p, std::uint64_t{1024}, 1);
      called = true;
      rt.sync();
    });
    while (!called.load()) std::this_thread::yield();
    gate_open = true;
    t.join();
  };
  testing::internal::CaptureStderr();
  gate_open = false;
  rt.call(gated_store(), hdsm::cover(1), hdsm::inout(x), 7);
  other_thread(y, true);   // both annotated: quiet
  other_thread(z, false);  // unannotated on the other device: quiet
  rt.sync();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  testing::internal::CaptureStderr();
  gate_open = false;
  rt.call(gated_store(), hdsm::cover(1), x, 7);  // unannotated
  other_thread(y, true);
  other_thread(y, true);  // the main thread's call is still in flight: it has not synced
  rt.sync();
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(
      said.find("hdsm: warning: kernel 'threads_add' is called on device 0 while another thread's call"),
      std::string::npos)
      << said;
  EXPECT_EQ(said.find("warning", said.find("warning") + 1), std::string::npos) << "said once: " << said;
  rt.free(x);
  rt.free(y);
  rt.free(z);
}

// A thread that ends with calls it never synced syncs them as it ends: whoever joins it reads the
// results (under batch the host kept its old copy for good before), and a failure goes to stderr.
TEST_P(AdsmThreads, AThreadThatEndsWithoutSyncingHasItsCallsAcquired) {
  hdsm::Runtime rt(config(GetParam(), 1));
  int* x = rt.alloc<int>(1024);
  x[3] = 1;
  std::thread([&] { rt.call(add(), hdsm::cover(1024), hdsm::inout(x), std::uint64_t{1024}, 2); }).join();
  EXPECT_EQ(x[3], 3) << "the ended thread's kernel result";
  std::thread([&] { rt.call(add(), hdsm::cover(1024), x, std::uint64_t{1024}, 4); }).join();
  EXPECT_EQ(x[3], 7) << "an unannotated call's";
  static const hdsm::Kernel boom = hdsm::per_thread("threads_boom", [](const hdsm::Thread&, int*) {
    throw std::runtime_error("boom in a thread that never synced");
  });
  testing::internal::CaptureStderr();
  std::thread([&] { rt.call(boom, hdsm::cover(1), hdsm::inout(x)); }).join();
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(
      said.find("hdsm: a thread ended with calls it never synced, and one failed: kernel 'threads_boom'"),
      std::string::npos)
      << said;
  rt.free(x);
}

// A child of fork() that exits leaves its parent's calls alone: its copy of the forking thread's
// notes names calls on threads the child does not have (syncing them hung the child in exit()).
TEST_P(AdsmThreads, AForkedChildThatExitsDoesNotSyncItsParentsCalls) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizers' own exit handlers in the child: LeakSanitizer reports the parent's live runtime
  // as leaked (the child exits without tearing it down, by design) and fails the exit status, or
  // hangs in its check of a process forked from busy threads (both seen in the ASan run). The plain
  // build runs it.
  GTEST_SKIP() << "exit() in a forked child is the sanitizers' business there";
#endif
  hdsm::Runtime rt(config(GetParam(), 1));
  gate_open = false;
  int* x = rt.alloc<int>(1024);
  rt.call(gated_store(), hdsm::cover(1), hdsm::inout(x), 42);  // in flight until the gate opens
  const pid_t child = ::fork();
  ASSERT_NE(child, -1);
  if (child == 0) std::exit(0);  // runs the main thread's thread_local destructors
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 2000 && done == 0; ++i) {
    done = ::waitpid(child, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done == 0) ::kill(child, SIGKILL);
  EXPECT_EQ(done, child) << "the child hung in exit()";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  gate_open = true;
  rt.sync();
  EXPECT_EQ(x[0], 42);
  rt.free(x);
}

TEST_P(AdsmThreads, LockWaitCounterGrowsUnderContentionOnly) {
  hdsm::Runtime rt(config(GetParam(), 2));
  int* x = rt.alloc<int>(1024, 0);
  // Uncontended: one thread calling and syncing takes the locks without a wait.
  for (int r = 0; r < 5; ++r) {
    rt.call(add(), hdsm::cover(1024), hdsm::inout(x), std::uint64_t{1024}, 1);
    rt.sync();
  }
  EXPECT_EQ(rt.stats().lock_waits, 0u);
  EXPECT_EQ(rt.stats().lock_wait_ns, 0u);
  // Forced: device 0's call lock is held while another thread calls there.
  std::atomic<bool> calling{false};
  std::thread t;
  {
    std::lock_guard hold(
        dynamic_cast<hdsm::detail::AdsmModel&>(*hdsm::detail::impl_of(rt).model).call_lock(0));
    t = std::thread([&] {
      calling = true;
      rt.call(add(), hdsm::cover(1024), hdsm::inout(x), std::uint64_t{1024}, 1);
      rt.sync();
    });
    while (!calling.load()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  t.join();
  const hdsm::Stats s = rt.stats();
  EXPECT_GE(s.lock_waits, 1u);
  EXPECT_GE(s.lock_wait_ns, 100'000'000u) << "the wait of about 200 ms was not counted";
  EXPECT_NE(s.to_string().find("enqueue lock waits: 1 contended"), std::string::npos) << s.to_string();
  EXPECT_EQ(x[0], 6);
  rt.free(x);
}

TEST(AdsmThreadsCopyEngine, CopiesBetweenTheSameDevicesContendCopiesBetweenOthersDoNot) {
  // Four devices without peer access: device-to-device copies are staged and enqueue under the
  // copy engine's per-device locks.
  auto c = config("rolling", 4).set("HDSM_SIM_PEER", "none");
  hdsm::Runtime rt(c);
  constexpr std::size_t n = std::size_t{1} << 20;
  std::vector<unsigned char*> objects;
  for (int d = 0; d < 4; ++d) {
    objects.push_back(rt.alloc<unsigned char>(n, d));
    rt.memset(objects.back(), d + 1, n);
  }
  // 0 -> 1 and 2 -> 3 at once, from two threads: disjoint devices, no lock is shared.
  {
    std::thread a([&] {
      for (int r = 0; r < 20; ++r) rt.memcpy(objects[1], objects[0], n);
    });
    std::thread b([&] {
      for (int r = 0; r < 20; ++r) rt.memcpy(objects[3], objects[2], n);
    });
    a.join();
    b.join();
  }
  EXPECT_EQ(rt.stats().lock_waits, 0u);
  EXPECT_EQ(objects[1][n - 1], 1);
  EXPECT_EQ(objects[3][n - 1], 3);
  // A held lock of device 1 makes a copy into it wait, and the wait is counted.
  {
    std::unique_lock hold(hdsm::detail::impl_of(rt).shared_space().copy_engine().device_lock(1));
    std::atomic<bool> copying{false};
    std::thread a([&] {
      copying = true;
      rt.memcpy(objects[1], objects[2], n);
    });
    while (!copying.load()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    hold.unlock();
    a.join();
  }
  EXPECT_GE(rt.stats().lock_waits, 1u);
  EXPECT_GE(rt.stats().lock_wait_ns, 100'000'000u);
  EXPECT_EQ(objects[1][0], 3);
  for (auto* p : objects) rt.free(p);
}

INSTANTIATE_TEST_SUITE_P(Protocols, AdsmThreads, ::testing::Values("batch", "lazy", "rolling"));

}  // namespace
