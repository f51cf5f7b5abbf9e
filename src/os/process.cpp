#include "os/process.hpp"

#include "os/errno_text.hpp"

#include <hdsm/error.hpp>

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace hdsm::os {

namespace thread_state {
constinit thread_local unsigned user_code_depth HDSM_FAST_TLS = 0;
constinit thread_local bool prepared_for_faults HDSM_FAST_TLS = false;
}  // namespace thread_state

namespace {

std::atomic<std::uint32_t> forks{0};

// In the child, which has one thread: nothing else runs.
void count_fork() noexcept { forks.fetch_add(1, std::memory_order_relaxed); }

// The handler's own frame and the signal frame (up to about 11 KiB with AMX state) take little,
// but a resolver may do real work; address space only (pages are committed when touched), with a
// guard page below so that an overflow of this stack too ends in a fault, not in another mapping.
constexpr std::size_t kSignalStack = std::size_t{1} << 20;

struct SignalStack {
  void* mapping = nullptr;
  std::size_t bytes = 0;
  // At the thread's end, or at exit() on the main thread, which may run on this very stack (a
  // handler that calls exit()): unmapped only once it is no longer the thread's, never under a
  // thread that runs on it, and never switching off a stack the program put in its place.
  ~SignalStack() {
    if (mapping == nullptr) return;
    stack_t current{};
    if (::sigaltstack(nullptr, &current) != 0) return;  // left to the process's end
    if (current.ss_sp != static_cast<char*>(mapping) + (bytes - kSignalStack)) {
      ::munmap(mapping, bytes);  // replaced by the program's own: this one is unused
      return;
    }
    if ((current.ss_flags & SS_ONSTACK) != 0) return;  // running on it: left to the process's end
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    if (::sigaltstack(&off, nullptr) == 0) ::munmap(mapping, bytes);
  }
};
thread_local SignalStack tl_signal_stack;
std::once_flag warned;

void warn_once(const char* call, int error) {
  std::call_once(warned, [&] {
    std::fprintf(stderr,
                 "hdsm: warning: %s for a kernel thread's signal stack failed (%s): a stack overflow in a "
                 "kernel may end the process without a message\n",
                 call, errno_text(error).c_str());
  });
}

}  // namespace

std::uint32_t fork_generation() noexcept { return forks.load(std::memory_order_relaxed); }

void watch_forks() {
  static const int rc = ::pthread_atfork(nullptr, nullptr, count_fork);
  if (rc != 0) throw SystemError("pthread_atfork", "hdsm's fork counter", rc);
}

void user_code_ended_its_thread(const char* what) noexcept {
  std::fprintf(
      stderr,
      "hdsm: %s ended its thread (pthread_exit or pthread_cancel), which hdsm waits for: the process "
      "cannot go on\n",
      what);
  std::fflush(stderr);
  std::abort();
}

Origin::Origin() noexcept : forks_(fork_generation()), in_user_code_(running_user_code()) {}
bool Origin::same_process() const noexcept { return forks_ == fork_generation(); }
bool Origin::may_tear_down() const noexcept {
  return same_process() && (!running_user_code() || in_user_code_);
}

SignalsBlockedForNewThreads::SignalsBlockedForNewThreads() noexcept {
  sigset_t asynchronous;
  sigfillset(&asynchronous);
  for (const int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS}) sigdelset(&asynchronous, sig);
  restore_ = ::pthread_sigmask(SIG_BLOCK, &asynchronous, &previous_) == 0;
}

SignalsBlockedForNewThreads::~SignalsBlockedForNewThreads() {
  if (restore_) ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

void prepare_thread_for_faults_once() noexcept {
  thread_state::prepared_for_faults = true;
  sigset_t faults;
  sigemptyset(&faults);
  sigaddset(&faults, SIGSEGV);
  sigaddset(&faults, SIGBUS);
  if (const int rc = ::pthread_sigmask(SIG_UNBLOCK, &faults, nullptr); rc != 0)
    warn_once("pthread_sigmask", rc);
  stack_t current{};
  if (::sigaltstack(nullptr, &current) != 0) {
    warn_once("sigaltstack", errno);
    return;
  }
  if ((current.ss_flags & SS_DISABLE) == 0) return;  // the program's (or a sanitizer's) own
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t bytes = kSignalStack + page;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) {
    warn_once("mmap", errno);
    return;
  }
  if (::mprotect(p, page, PROT_NONE) != 0) {
    warn_once("mprotect", errno);
    ::munmap(p, bytes);
    return;
  }
  stack_t stack{};
  stack.ss_sp = static_cast<char*>(p) + page;
  stack.ss_size = kSignalStack;
  if (::sigaltstack(&stack, nullptr) != 0) {
    warn_once("sigaltstack", errno);
    ::munmap(p, bytes);
    return;
  }
  tl_signal_stack.mapping = p;
  tl_signal_stack.bytes = bytes;
}

}  // namespace hdsm::os
