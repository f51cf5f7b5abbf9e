// Kernels at the edges of the process's own machinery: stacks that overflow, threads that a kernel
// ends, and programs that block every signal before hdsm makes its threads.
#include "exec/executor.hpp"
#include "os/fault.hpp"
#include "os/mapping.hpp"
#include "support/death_style.hpp"

#include "exec_test_kernels.hpp"
#include "support/test_support.hpp"

#include <hdsm/kernel.hpp>

#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace hdsm::exec {
namespace {

using testing::run;

class ProcessEdgesDeathTest : public ::testing::Test {
 protected:
  hdsm::test::DeathTestStyle style_{"threadsafe"};
};

// The sanitizers keep stack frames and stacks of their own (fake frames, shadow stacks, alternate
// signal stacks of their size), and end threads their own way: what is checked is what a plain
// build does.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HDSM_SKIP_UNDER_SANITIZERS() GTEST_SKIP() << "checked in plain builds"
#else
#define HDSM_SKIP_UNDER_SANITIZERS() (void)0
#endif

// Sanitizers install their own SIGSEGV handler at start-up, which hdsm would chain to: start the
// child from the default disposition, as a plain process does.
void from_default_disposition() {
  hdsm::test::default_fault_disposition();
  hdsm::os::install_fault_handler();
}

// A cooperative thread whose frame (an 80 KiB array, on a 64 KiB fiber stack) reaches below its
// stack. With a one-page guard the array's first bytes landed in the stack of the fiber below,
// whose frames it overwrote without a fault; the guard is as large as the stack now, and the fault
// is handled on the thread's signal stack, with a message.
void run_big_frame() {
  from_default_disposition();
  Executor ex{ExecutorOptions{2, std::size_t{64} << 10}};
  const Kernel big = cooperative("big_frame", [](ThreadCtx& t, int* out) {
    volatile char frame[80 << 10];
    for (std::size_t i = 0; i < 256; ++i) frame[i] = static_cast<char>(i);
    t.sync();
    out[t.idx.x] = frame[t.idx.x];
  });
  std::vector<int> out(4);
  run(big, ex, Launch{Dim3{1}, Dim3{4}, 0}, out.data());
}

TEST_F(ProcessEdgesDeathTest, AFrameLargerThanItsFiberStackFaultsWithAMessage) {
  HDSM_SKIP_UNDER_SANITIZERS();
  EXPECT_DEATH(run_big_frame(), "stack overflow");
}

void run_deep_recursion() {
  from_default_disposition();
  Executor ex{ExecutorOptions{2}};
  const Kernel deep = per_block("deep", [](Block& b, int* out) {
    if (b.index().x == 1)
      out[0] = hdsm::test::recurse_deeply(0);  // block 1: on the second worker, or the first
  });
  std::vector<int> out(1);
  run(deep, ex, Launch{Dim3{2}, Dim3{1}, 0}, out.data());
}

// Deep recursion in a block on an executor thread: the thread's guard page, handled on its signal
// stack (before, the kernel found no stack to deliver SIGSEGV on, and the process died silently).
TEST_F(ProcessEdgesDeathTest, DeepRecursionInABlockFaultsWithAMessage) {
  HDSM_SKIP_UNDER_SANITIZERS();
  EXPECT_DEATH(run_deep_recursion(), "stack overflow");
}

// The same in a process that never installed the fault dispatcher (no shared memory, queues or
// kernels alone): the executor installs it, so the overflow is named there too (the process died
// of a bare SIGSEGV before).
void run_deep_recursion_on_a_fresh_executor() {
  hdsm::test::default_fault_disposition();  // what a plain process starts with; no install
  Executor ex{ExecutorOptions{2}};
  const Kernel deep = per_block("deep", [](Block&, int* out) { out[0] = hdsm::test::recurse_deeply(0); });
  std::vector<int> out(1);
  run(deep, ex, Launch{Dim3{1}, Dim3{1}, 0}, out.data());
}

TEST_F(ProcessEdgesDeathTest, AnExecutorAloneNamesAStackOverflow) {
  HDSM_SKIP_UNDER_SANITIZERS();
  EXPECT_DEATH(run_deep_recursion_on_a_fresh_executor(), "stack overflow");
}

void run_thread_ender(bool coop) {
  Executor ex{ExecutorOptions{2}};
  const Kernel plain = per_thread("ends_thread", [](const Thread&, int*) { ::pthread_exit(nullptr); });
  const Kernel fiber = cooperative("ends_fiber", [](ThreadCtx&, int*) { ::pthread_exit(nullptr); });
  std::vector<int> out(1);
  run(coop ? fiber : plain, ex, Launch{Dim3{2}, Dim3{2}, 0}, out.data());
}

// pthread_exit in a block: glibc's forced unwind may be neither swallowed (it aborts with "exception
// not rethrown") nor let end a thread the launch waits for.
TEST_F(ProcessEdgesDeathTest, AKernelThatEndsItsThreadIsNamed) {
  // The sanitizers' own pthread_exit ends the thread without the forced unwind (no message then).
  HDSM_SKIP_UNDER_SANITIZERS();
  EXPECT_DEATH(run_thread_ender(false), "a kernel's block ended its thread");
  EXPECT_DEATH(run_thread_ender(true), "a cooperative kernel's thread ended its thread");
}

void exit_2(int) { std::exit(2); }

void crash_into_an_exiting_handler() {
  struct sigaction action {};
  action.sa_handler = exit_2;
  action.sa_flags = SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGSEGV, &action, nullptr);
  hdsm::os::install_fault_handler();
  Executor ex{ExecutorOptions{2}};
  std::vector<int> out(1);
  run(testing::vector_add(), ex, Launch{Dim3{1}, Dim3{1}, 0}, out.data(), out.data(), out.data(),
      std::uint64_t{0});  // this thread now has hdsm's signal stack
  // Not null itself, which UBSan would catch before the hardware does.
  volatile std::uintptr_t wild = 0x10;
  *reinterpret_cast<volatile int*>(wild) = 1;
}

// A program's crash handler that calls exit() runs on the signal stack hdsm gave the thread; exit()
// then runs the thread's destructors there, and the stack must outlive them (before, it was unmapped
// under the running handler, which died of SIGSEGV instead of exiting with 2).
TEST_F(ProcessEdgesDeathTest, AHandlerThatExitsOnTheSignalStackExits) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "exit() while the executor's threads live: ThreadSanitizer reports the teardown's races";
#endif
  EXPECT_EXIT(crash_into_an_exiting_handler(), ::testing::ExitedWithCode(2), "");
}

bool resolve_read_write(void*, void* address, hdsm::os::FaultAccess) {
  const std::size_t page = hdsm::os::page_size();
  const auto p = reinterpret_cast<std::uintptr_t>(address) & ~(page - 1);
  return ::mprotect(reinterpret_cast<void*>(p), page, PROT_READ | PROT_WRITE) == 0;
}

void touch_with_every_signal_blocked() {
  sigset_t all;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
  const std::size_t page = hdsm::os::page_size();
  hdsm::os::Mapping region(8 * page, "blocked-signal pages");
  ::mprotect(region.data(), region.size(), PROT_NONE);
  const int id = hdsm::os::register_fault_range(region.data(), region.size(), resolve_read_write, nullptr);
  Executor ex{ExecutorOptions{2}};
  const Kernel touch = per_block(
      "touch_pages", [](Block& b, char* p, std::uint64_t page_bytes) { p[b.index().x * page_bytes] = 1; });
  run(touch, ex, Launch{Dim3{8}, Dim3{1}, 0}, reinterpret_cast<char*>(region.data()),
      static_cast<std::uint64_t>(page));
  hdsm::os::unregister_fault_range(id);
  std::_Exit(0);
}

// A program that blocks every signal before hdsm makes its threads (a signal-handling thread with
// sigwait is the common case): the executor's workers inherit the mask, and a blocked SIGSEGV of a
// fault hdsm would resolve killed the process. Its threads unblock SIGSEGV and SIGBUS now.
TEST_F(ProcessEdgesDeathTest, WorkersResolveFaultsInAProgramThatBlocksEverySignal) {
  EXPECT_EXIT(touch_with_every_signal_blocked(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace hdsm::exec
