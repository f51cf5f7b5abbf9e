// A SIGSEGV handler installed after hdsm's (LLVM's crash handler, which PoCL's compiler installs
// while it builds a kernel) is chained behind hdsm's instead of replacing it: shared memory's faults
// stay hdsm's, faults elsewhere reach the new handler, and sigaction() shows the program its own
// handlers. Before, the new handler took hdsm's faults: LLVM's removed the build's temporary files
// (every build failed while another thread faulted) and, with SA_RESETHAND, a fault in the window
// killed the process.
#include <hdsm/hdsm.hpp>

#include "support/death_style.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

extern "C" int __sigaction(int sig, const struct sigaction* act, struct sigaction* old) noexcept;

namespace {

std::atomic<int> crash_handler_runs{0};

void crash_handler(int, siginfo_t*, void*) {
  crash_handler_runs.fetch_add(1);
  std::_Exit(3);
}

// What LLVM installs: SA_SIGINFO | SA_RESETHAND | SA_NODEFER | SA_ONSTACK.
struct sigaction llvm_like() {
  struct sigaction a {};
  a.sa_sigaction = crash_handler;
  a.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&a.sa_mask);
  return a;
}

const hdsm::Kernel& add_one() {
  static const hdsm::Kernel k = hdsm::with_opencl(
      R"(__kernel void chain_add_one(__global int* x, ulong n) {
        const size_t i = get_global_id(0);
        if (i < n) x[i] += 1;
      })",
      hdsm::per_thread("chain_add_one", [](const hdsm::Thread& t, int* x, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) x[i] += 1;
      }));
  return k;
}

void skip_under_tsan() {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer keeps the process's signal handlers in a table of its own";
#endif
}

// An object of `rt` whose blocks are the device's after a call: the next host write faults.
int* on_the_device(hdsm::Runtime& rt) {
  int* x = rt.alloc<int>(1024);
  rt.call(add_one(), hdsm::cover(1024), hdsm::inout(x), std::uint64_t{1024});
  rt.sync();
  return x;
}

// The kernel's action for SIGSEGV (hdsm's handler, while it is installed).
struct sigaction kernels_action() {
  struct sigaction now {};
  EXPECT_EQ(::__sigaction(SIGSEGV, nullptr, &now), 0);
  return now;
}

// A write to x[i], on the device since on_the_device(), is a fault hdsm resolves, not the program's
// handler's, and hdsm's handler (`hdsms`) is still the kernel's action.
void expect_hdsm_keeps_its_fault(int* x, int i, const struct sigaction& hdsms) {
  x[i] = i + 2;
  EXPECT_EQ(x[i], i + 2);
  EXPECT_EQ(crash_handler_runs.load(), 0);
  EXPECT_EQ(kernels_action().sa_sigaction, hdsms.sa_sigaction) << "hdsm's handler was replaced";
}

TEST(SignalChain, AHandlerInstalledAfterHdsmsIsChainedBehindIt) {
  skip_under_tsan();
  if (::testing::Test::IsSkipped()) return;
  hdsm::Runtime rt(hdsm::test::fast_sim_config("rolling"));
  int* x = on_the_device(rt);
  const struct sigaction hdsms = kernels_action();
  const struct sigaction mine = llvm_like();
  struct sigaction before {};
  ASSERT_EQ(::sigaction(SIGSEGV, &mine, &before), 0);
  expect_hdsm_keeps_its_fault(x, 5, hdsms);
  struct sigaction shown {};
  ASSERT_EQ(::sigaction(SIGSEGV, nullptr, &shown), 0);
  EXPECT_EQ(shown.sa_sigaction, crash_handler) << "sigaction() does not show the program its handler";
  EXPECT_EQ(shown.sa_flags & SA_RESETHAND, SA_RESETHAND);
  // Put back, as LLVM does when the build ends: the handler before it is shown again, and hdsm's stays.
  ASSERT_EQ(::sigaction(SIGSEGV, &before, nullptr), 0);
  ASSERT_EQ(::sigaction(SIGSEGV, nullptr, &shown), 0);
  EXPECT_NE(shown.sa_sigaction, crash_handler);
  EXPECT_EQ(kernels_action().sa_sigaction, hdsms.sa_sigaction);
  rt.free(x);
}

// In a fresh process: `install` puts the program's SIGSEGV handler in after hdsm's, a fault of shared
// memory stays hdsm's, and the program's own wild write reaches the handler (which exits with its
// code).
[[noreturn]] void faults_inside_then_outside(void (*install)()) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config("rolling"));
  int* x = on_the_device(rt);
  install();
  x[1] = 2;  // hdsm's
  if (crash_handler_runs.load() != 0) std::_Exit(1);
  volatile std::uintptr_t wild = 0x10;
  *reinterpret_cast<volatile int*>(wild) = 1;  // the program's own crash: its handler's
  std::_Exit(0);
}

void install_llvm_like() {
  const struct sigaction mine = llvm_like();
  ::sigaction(SIGSEGV, &mine, nullptr);
}

TEST(SignalChainDeathTest, AFaultOutsideSharedMemoryReachesTheChainedHandler) {
  skip_under_tsan();
  if (::testing::Test::IsSkipped()) return;
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_EXIT(faults_inside_then_outside(install_llvm_like), ::testing::ExitedWithCode(3), "");
}

void plain_crash_handler(int) {
  crash_handler_runs.fetch_add(1);
  std::_Exit(4);
}

// signal(), which glibc implements with its own sigaction, past the program's: a handler installed
// through it took shared memory's faults (the first one ended the program in it, exit code 4).
TEST(SignalChain, AHandlerInstalledWithSignalIsChainedToo) {
  skip_under_tsan();
  if (::testing::Test::IsSkipped()) return;
  hdsm::Runtime rt(hdsm::test::fast_sim_config("rolling"));
  int* x = on_the_device(rt);
  const struct sigaction hdsms = kernels_action();
  const sighandler_t before = std::signal(SIGSEGV, plain_crash_handler);
  ASSERT_NE(before, SIG_ERR);
  expect_hdsm_keeps_its_fault(x, 5, hdsms);
  // What the program installed is what it is shown, with signal()'s BSD flags.
  struct sigaction shown {};
  ASSERT_EQ(::sigaction(SIGSEGV, nullptr, &shown), 0);
  EXPECT_EQ(shown.sa_handler, plain_crash_handler);
  EXPECT_EQ(shown.sa_flags & (SA_RESTART | SA_RESETHAND), SA_RESTART);
  EXPECT_EQ(sigismember(&shown.sa_mask, SIGSEGV), 1);
  // System V's flavour: once, and the handler it replaced comes back.
  EXPECT_EQ(::sysv_signal(SIGSEGV, plain_crash_handler), plain_crash_handler);
  ASSERT_EQ(::sigaction(SIGSEGV, nullptr, &shown), 0);
  EXPECT_EQ(shown.sa_flags & SA_RESETHAND, SA_RESETHAND);
  expect_hdsm_keeps_its_fault(x, 6, hdsms);
  EXPECT_EQ(std::signal(SIGSEGV, before), plain_crash_handler);
  // Other signals are libc's as ever.
  const sighandler_t usr = std::signal(SIGUSR2, SIG_IGN);
  EXPECT_EQ(std::signal(SIGUSR2, usr), SIG_IGN);
  errno = 0;
  EXPECT_EQ(std::signal(-1, SIG_IGN), SIG_ERR);
  EXPECT_EQ(errno, EINVAL);
  rt.free(x);
}

void install_with_signal() { std::signal(SIGSEGV, plain_crash_handler); }

TEST(SignalChainDeathTest, AFaultOutsideSharedMemoryReachesASignalHandler) {
  skip_under_tsan();
  if (::testing::Test::IsSkipped()) return;
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_EXIT(faults_inside_then_outside(install_with_signal), ::testing::ExitedWithCode(4), "");
}

// The first call of a kernel whose source PoCL has not seen (no cache) builds it with LLVM while
// another thread takes hdsm's page faults on a rolling object.
TEST(SignalChain, AnOpenclBuildWhileAnotherThreadFaultsSucceeds_opencl) {
  skip_under_tsan();
  if (::testing::Test::IsSkipped()) return;
  if (hdsm::test::opencl_only_without_lsan())
    GTEST_SKIP() << "OpenCL under ASan runs in runtime.opencl_without_lsan";
  std::unique_ptr<hdsm::Runtime> rt;
  try {
    rt = std::make_unique<hdsm::Runtime>(
        hdsm::test::fast_sim_config("rolling").set("HDSM_OPENCL", "on").set("HDSM_CACHE_DIR", "off"));
  } catch (const hdsm::NoDevice& e) {
    GTEST_SKIP() << "no OpenCL device: " << e.what();
  }
  unsigned ocl = 0;
  bool found = false;
  for (unsigned d = 0; d < rt->devices().size(); ++d)
    if (rt->device(d).properties().backend == hdsm::Backend::opencl) {
      ocl = d;
      found = true;
    }
  if (!found) GTEST_SKIP() << "no OpenCL device";
  constexpr std::size_t kBytes = std::size_t{16} << 20;
  auto* big = static_cast<unsigned char*>(rt->alloc(kBytes, 0));  // sim0: host writes fault
  const auto touch =
      hdsm::per_thread("chain_touch", [](const hdsm::Thread& t, unsigned char* y, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) y[i * 4096] += 1;
      });
  std::atomic<bool> stop{false}, faulted{false};
  std::thread faulter([&] {
    while (!stop.load()) {
      rt->call(touch, hdsm::cover(kBytes / 4096), hdsm::inout(big), std::uint64_t{kBytes / 4096});
      rt->sync();
      for (std::size_t i = 0; i < kBytes && !stop.load(); i += 4096) big[i] += 1;
      faulted = true;
    }
  });
  while (!faulted.load()) std::this_thread::yield();
  int* x = rt->alloc<int>(4096, ocl);
  for (int round = 0; round < 2; ++round) {
    hdsm::Kernel k = add_one();
    k.opencl_source =
        "// " + std::to_string(::getpid()) + " round " + std::to_string(round) + "\n" + k.opencl_source;
    x[0] = 1;
    EXPECT_NO_THROW({
      rt->call(k, hdsm::cover(4096), hdsm::inout(x), std::uint64_t{4096});
      rt->sync();
    }) << "round "
       << round;
    EXPECT_EQ(x[0], 2) << "round " << round;
  }
  stop = true;
  faulter.join();
  rt->free(x);
  rt->free(big);
}

}  // namespace
