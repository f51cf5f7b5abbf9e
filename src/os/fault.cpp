#include "os/fault.hpp"
#include "os/fault_path.hpp"

#include "os/process.hpp"
#include "os/signal_safe_io.hpp"

#include <hdsm/error.hpp>

#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

// libc's sigaction under its other name, which no interposer (libhdsm's, a sanitizer's) replaces.
extern "C" int __sigaction(int sig, const struct sigaction* act,  // NOLINT(bugprone-reserved-identifier)
                           struct sigaction* old) noexcept;

namespace hdsm::os {

namespace {

// A slot is read by the signal handler without locks. Writers (under `registry_mutex`) fill the
// fields of a free slot and then publish it with a release store of `active`; the handler announces
// itself in `inflight` before it trusts `active`, and unregistering waits for `inflight` to drain,
// so a resolver never runs with a context that its owner has already freed.
struct FaultRangeSlot {
  std::atomic<bool> active{false};
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
  std::atomic<FaultResolver> resolver{nullptr};
  std::atomic<void*> context{nullptr};
  std::atomic<unsigned> inflight{0};
  int generation = 0;  // only under registry_mutex
};

FaultRangeSlot slots[kMaxFaultRanges];
std::mutex registry_mutex;

// A child of fork() starts with no range: the parent's resolvers and threads are not there, nor
// hdsm's shared views (MADV_DONTFORK), and the child's own mappings may land where they were. The
// parent's ranges are kept apart, for the message of a fault there only.
struct InheritedRange {
  std::uintptr_t begin = 0, end = 0;
};
InheritedRange inherited_ranges[kMaxFaultRanges];

void before_fork() noexcept { registry_mutex.lock(); }
void after_fork_in_parent() noexcept { registry_mutex.unlock(); }
void after_fork_in_child() noexcept {
  for (int i = 0; i < kMaxFaultRanges; ++i) {
    FaultRangeSlot& s = slots[i];
    // Ranges of a parent's parent stay listed unless a range of the parent replaced them.
    if (s.active.load(std::memory_order_relaxed))
      inherited_ranges[i] = {s.begin.load(std::memory_order_relaxed), s.end.load(std::memory_order_relaxed)};
    s.active.store(false, std::memory_order_relaxed);
    s.inflight.store(0, std::memory_order_relaxed);  // a thread that was in a resolver is not here
  }
  registry_mutex.unlock();
}

bool in_inherited_range(std::uintptr_t a) noexcept {
  for (const InheritedRange& r : inherited_ranges)
    if (a >= r.begin && a < r.end) return true;
  return false;
}

struct Previous {
  struct sigaction segv {};
  struct sigaction bus {};
  // A previous handler with SA_RESETHAND that ran once: its slot has the default action from then on
  // (hdsm's handler stays installed for the shared ranges).
  std::atomic<bool> segv_reset{false};
  std::atomic<bool> bus_reset{false};
};
Previous previous;
// Odd while chain_fault_signal() writes `previous` (the handler reads it without a lock); writers
// hold chain_mutex with every signal blocked.
std::atomic<unsigned> previous_seq{0};
std::mutex chain_mutex;
std::atomic<bool> installed{false};

// The seqlock's fences. ThreadSanitizer has none (GCC refuses them); there chain_fault_signal()
// never writes, as its table, not the kernel, holds hdsm's handler.
inline void seq_fence([[maybe_unused]] std::memory_order order) noexcept {
#if !defined(__SANITIZE_THREAD__)
  std::atomic_thread_fence(order);
#endif
}

// The handler hdsm passes `sig`'s foreign faults to, as chain_fault_signal() last set it.
struct sigaction previous_of(int sig) noexcept {
  const struct sigaction& slot = sig == SIGBUS ? previous.bus : previous.segv;
  struct sigaction copy {};
  for (;;) {
    const unsigned before = previous_seq.load(std::memory_order_acquire);
    if ((before & 1) != 0) continue;
    std::memcpy(&copy, &slot, sizeof copy);
    seq_fence(std::memory_order_acquire);
    if (previous_seq.load(std::memory_order_relaxed) == before) return copy;
  }
}

std::atomic<std::uint64_t> resolved_reads{0}, resolved_writes{0}, resolved_unknown{0};

std::atomic<bool> unknown_access{false};

FaultAccess decode_access([[maybe_unused]] const void* ucontext) noexcept {
  if (unknown_access.load(std::memory_order_relaxed)) return FaultAccess::unknown;
#if defined(__x86_64__)
  // The page-fault error code the kernel saves: bit 1 is set when the access was a write.
  const auto* uc = static_cast<const ucontext_t*>(ucontext);
  return (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0 ? FaultAccess::write : FaultAccess::read;
#else
  return FaultAccess::unknown;
#endif
}

// Returns true when a registered range owned the address and its resolver made the access legal.
bool dispatch(void* address, FaultAccess access) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  for (FaultRangeSlot& s : slots) {
    if (!s.active.load(std::memory_order_acquire)) continue;
    if (a < s.begin.load(std::memory_order_relaxed) || a >= s.end.load(std::memory_order_relaxed)) continue;
    s.inflight.fetch_add(1, std::memory_order_seq_cst);
    bool resolved = false;
    // Re-read under the inflight announcement: the slot may have been unregistered (and even reused)
    // between the scan above and the increment.
    if (s.active.load(std::memory_order_seq_cst) && a >= s.begin.load(std::memory_order_relaxed) &&
        a < s.end.load(std::memory_order_relaxed)) {
      const FaultResolver resolver = s.resolver.load(std::memory_order_relaxed);
      void* const context = s.context.load(std::memory_order_relaxed);
      resolved = resolver(context, address, access);
    }
    s.inflight.fetch_sub(1, std::memory_order_release);
    return resolved;  // ranges do not overlap: no other slot can own the address
  }
  return false;
}

// Where a fault no range resolved happened, for its message.
enum class Where : std::uint8_t { outside, refused, inherited };

// The interrupted code's stack pointer, or 0 where it is not known.
std::uintptr_t stack_pointer([[maybe_unused]] const void* ucontext) noexcept {
#if defined(__x86_64__)
  return static_cast<std::uintptr_t>(static_cast<const ucontext_t*>(ucontext)->uc_mcontext.gregs[REG_RSP]);
#else
  return 0;
#endif
}

// Set when a fault of a memory access went to the handler the program had before hdsm: a crash
// handler (Open MPI's, say) that ends by raising the signal again, with its own slot reset, comes
// back here with a signal this process sent itself, which is that same fault, reported already.
std::atomic<bool> forwarded_a_fault{false};

// A fault no range resolved: hand it to whatever handled the signal before hdsm, and with no such
// handler die of the signal, as the process would have without hdsm.
void forward(int sig, siginfo_t* info, void* ucontext, Where where) noexcept {
  const struct sigaction prev = previous_of(sig);
  std::atomic<bool>& reset = sig == SIGBUS ? previous.bus_reset : previous.segv_reset;
  // SIG_DFL and SIG_IGN first, whatever the flags: {SIG_IGN, SA_SIGINFO} reads back with
  // sa_sigaction == (void*)1, which is no function. SIG_IGN is treated as SIG_DFL: ignoring a fault
  // would re-run the faulting instruction forever (and the kernel kills with the signal anyway).
  // SA_RESETHAND: the first thread here takes the handler's one run (an exchange: two threads
  // faulting at once must not both run it); later ones find the default action.
  const bool no_handler =
      prev.sa_handler == SIG_DFL || prev.sa_handler == SIG_IGN ||
      ((prev.sa_flags & SA_RESETHAND) != 0 ? reset.exchange(true, std::memory_order_acq_rel)
                                           : reset.load(std::memory_order_acquire));
  if (!no_handler) {
    // The mask the previous handler would have run with, not hdsm's (every signal): the interrupted
    // code's, its own sa_mask, and the signal unless SA_NODEFER. A handler that leaves by longjmp
    // keeps it, as it would without hdsm.
    sigset_t mask = static_cast<const ucontext_t*>(ucontext)->uc_sigmask;
    sigorset(&mask, &mask, &prev.sa_mask);
    if ((prev.sa_flags & SA_NODEFER) == 0) sigaddset(&mask, sig);
    // SA_RESETHAND, as the kernel would have done on delivery (the exchange above): that handler's
    // slot has the default action from now on, so that a handler which raises the signal again (a
    // crash reporter's way to end with it) dies of it instead of running again. Only its slot: the
    // process's action stays hdsm's, whose shared memory goes on faulting (before, the whole action
    // was reset, and the next touch of shared memory killed the process).
    ::pthread_sigmask(SIG_SETMASK, &mask, nullptr);
    if (info->si_code > 0) forwarded_a_fault.store(true, std::memory_order_release);
    if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
      prev.sa_sigaction(sig, info, ucontext);
      return;
    }
    if ((prev.sa_flags & SA_SIGINFO) == 0) {
      prev.sa_handler(sig);
      return;
    }
  }
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  const bool raised_again = (info->si_code == SI_USER || info->si_code == SI_TKILL) &&
                            info->si_pid == ::getpid() && forwarded_a_fault.load(std::memory_order_acquire);
  if (!raised_again && claim_fatal_report()) {
    signal_safe::Line line;
    if (info->si_code == SI_USER || info->si_code == SI_TKILL || info->si_code == SI_QUEUE) {
      // Sent by kill, raise or sigqueue: si_addr is no address then (it holds the sender's pid).
      line.str(sig == SIGBUS ? "hdsm: SIGBUS sent by process " : "hdsm: SIGSEGV sent by process ")
          .decimal(static_cast<std::uint64_t>(info->si_pid))
          .str(" (kill, raise or sigqueue), not raised by a memory access\n");
    } else if (info->si_code <= 0) {
      // A timer, asynchronous I/O or SIGIO (si_pid means nothing there).
      line.str(sig == SIGBUS ? "hdsm: SIGBUS sent with si_code -" : "hdsm: SIGSEGV sent with si_code -")
          .decimal(static_cast<std::uint64_t>(-static_cast<std::int64_t>(info->si_code)))
          .str(", not raised by a memory access\n");
    } else {
      line.str(sig == SIGBUS ? "hdsm: bus error at " : "hdsm: segmentation fault at ").hex(address);
      const std::uintptr_t sp = stack_pointer(ucontext);
      // As far as the largest fiber guard (1 MiB): a frame larger than its stack faults where its
      // first touched byte lies, which may be that far from the stack pointer.
      constexpr std::uintptr_t kNear = std::uintptr_t{1} << 20;
      if (where == Where::inherited)
        line.str(
            " (memory hdsm shares in the parent of this child of fork(), which has none of it: copy what the "
            "child needs to ordinary memory before fork(), or exec)\n");
      else if (where == Where::refused)
        line.str(sig == SIGBUS
                     ? " (in shared memory: its backing is gone, or the kernel could not supply it)\n"
                     : " (refused by the resolver of its registered range)\n");
      else if (sp != 0 && address + kNear >= sp && address <= sp + kNear)
        line.str(
            " (next to the stack pointer: a stack overflow? A cooperative kernel's threads have "
            "HDSM_FIBER_STACK bytes of stack, 64 KiB by default; per_thread and per_block kernels and crc "
            "tasks run on their thread's own stack)\n");
      else
        line.str(" (not in shared memory)\n");
    }
    line.write();
    end_fatal_report();
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::__sigaction(sig, &dfl, nullptr);  // libc's own: the interposed sigaction would chain it
  // A fault raised by the hardware repeats when the instruction is retried and then kills the process;
  // one sent by kill/raise/tgkill (si_code <= 0) has no instruction to retry, so send it again. It
  // stays pending (the signal is blocked in this handler) and kills the process on return.
  if (info->si_code <= 0) ::raise(sig);
}

HDSM_FAULT_PATH void on_fault(int sig, siginfo_t* info, void* ucontext) {
  const int saved_errno = errno;
  Where where = Where::outside;
  // si_code <= 0: sent by kill/raise/tgkill, not raised by an access, so there is nothing to resolve.
  // SIGBUS never reaches a resolver: it is no protection fault (a truncated memfd, a page the kernel
  // could not charge, poisoned memory), which a resolver would take for a spurious one and retry
  // forever.
  if (info->si_code > 0 && installed.load(std::memory_order_acquire)) {
    const FaultAccess access = decode_access(ucontext);
    if (sig == SIGSEGV && dispatch(info->si_addr, access)) {
      auto& counter = access == FaultAccess::read    ? resolved_reads
                      : access == FaultAccess::write ? resolved_writes
                                                     : resolved_unknown;
      counter.fetch_add(1, std::memory_order_relaxed);
      errno = saved_errno;
      return;
    }
    // Distinguish "no range" from "the range's resolver said no" in the message.
    const auto a = reinterpret_cast<std::uintptr_t>(info->si_addr);
    for (const FaultRangeSlot& s : slots)
      if (s.active.load(std::memory_order_acquire) && a >= s.begin.load(std::memory_order_relaxed) &&
          a < s.end.load(std::memory_order_relaxed))
        where = Where::refused;
    if (where == Where::outside && in_inherited_range(a)) where = Where::inherited;
  }
  errno = saved_errno;
  forward(sig, info, ucontext, where);
  errno = saved_errno;
}

}  // namespace

void report_unknown_access(bool on) noexcept { unknown_access.store(on, std::memory_order_relaxed); }

namespace {
std::atomic<pid_t> fatal_reporter{0};
std::atomic<bool> fatal_report_ended{false};
}  // namespace

bool claim_fatal_report() noexcept {
  const auto self = static_cast<pid_t>(::syscall(SYS_gettid));
  pid_t owner = 0;
  if (fatal_reporter.compare_exchange_strong(owner, self, std::memory_order_acq_rel) || owner == self)
    return true;
  // Another thread reports: wait for its message, so that this thread's death (the default action
  // once this handler returns) does not end the process before it is written.
  timespec tick{0, 1'000'000};
  for (int i = 0; i < 2000 && !fatal_report_ended.load(std::memory_order_acquire); ++i)
    ::nanosleep(&tick, nullptr);
  return false;
}

void end_fatal_report() noexcept { fatal_report_ended.store(true, std::memory_order_release); }

const char* to_string(FaultAccess access) noexcept {
  switch (access) {
    case FaultAccess::read:
      return "read";
    case FaultAccess::write:
      return "write";
    case FaultAccess::unknown:
      return "unknown";
  }
  return "?";
}

void install_fault_handler() {
  if (installed.load(std::memory_order_acquire)) return;
  const std::lock_guard lock(registry_mutex);
  if (installed.load(std::memory_order_relaxed)) return;
  // The registry's mutex is held across fork(), and a child starts with no range.
  if (const int rc = ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); rc != 0)
    throw SystemError("pthread_atfork", "the fault dispatcher's ranges", rc);
  watch_forks();  // for the objects that note their fork generation
  struct sigaction action {};
  action.sa_sigaction = on_fault;
  // SA_ONSTACK: a thread that set up an alternate stack (sigaltstack) gets its faults handled there,
  // so a stack overflow still reaches the previous handler or the message. No SA_NODEFER: a fault
  // inside a resolver is a bug, and with the signal blocked the kernel kills the process with it at
  // once instead of recursing into the dispatcher. Every other signal is blocked too, so no handler
  // of the application runs (and touches shared memory) halfway through a resolver.
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigfillset(&action.sa_mask);
  // The previous handlers are saved before ours can run; `installed` publishes them to the handler.
  if (::sigaction(SIGSEGV, nullptr, &previous.segv) != 0 || ::sigaction(SIGBUS, nullptr, &previous.bus) != 0)
    throw SystemError("sigaction", "previous SIGSEGV/SIGBUS handlers", errno);
  installed.store(true, std::memory_order_release);
  if (::sigaction(SIGSEGV, &action, nullptr) != 0) {
    const int err = errno;
    installed.store(false, std::memory_order_relaxed);
    throw SystemError("sigaction", "SIGSEGV fault handler", err);
  }
  if (::sigaction(SIGBUS, &action, nullptr) != 0) {
    const int err = errno;
    ::__sigaction(SIGSEGV, &previous.segv, nullptr);  // not chained: hdsm's is being taken back
    installed.store(false, std::memory_order_relaxed);
    throw SystemError("sigaction", "SIGBUS fault handler", err);
  }
}

bool chain_fault_signal(int sig, const struct sigaction* act, struct sigaction* old) noexcept {
  if ((sig != SIGSEGV && sig != SIGBUS) || !installed.load(std::memory_order_acquire)) return false;
  struct sigaction current {};
  if (::__sigaction(sig, nullptr, &current) != 0 || (current.sa_flags & SA_SIGINFO) == 0 ||
      current.sa_sigaction != on_fault)
    return false;  // not hdsm's (a sanitizer's, whose table has hdsm's handler): libc's to change
  // Every signal blocked: a handler that calls sigaction must not find this thread inside.
  sigset_t all, mask;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &mask);
  {
    const std::lock_guard lock(chain_mutex);
    std::atomic<bool>& reset = sig == SIGBUS ? previous.bus_reset : previous.segv_reset;
    if (old != nullptr) {
      *old = previous_of(sig);
      if (reset.load(std::memory_order_acquire)) {  // SA_RESETHAND ran it: the default, as the kernel says
        *old = {};
        old->sa_handler = SIG_DFL;
      }
    }
    if (act != nullptr) {
      struct sigaction& slot = sig == SIGBUS ? previous.bus : previous.segv;
      previous_seq.fetch_add(1, std::memory_order_relaxed);
      seq_fence(std::memory_order_release);
      std::memcpy(&slot, act, sizeof slot);
      reset.store(false, std::memory_order_relaxed);
      previous_seq.fetch_add(1, std::memory_order_release);
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &mask, nullptr);
  return true;
}

int register_fault_range(void* begin, std::size_t bytes, FaultResolver resolver, void* context) {
  if (bytes == 0 || begin == nullptr || resolver == nullptr)
    throw InvalidArgument("fault range needs a non-null address, a non-zero size and a resolver (got " +
                          format_bytes(bytes) + ")");
  const auto b = reinterpret_cast<std::uintptr_t>(begin);
  if (bytes > UINTPTR_MAX - b)
    throw InvalidArgument("fault range of " + format_bytes(bytes) + " wraps around");
  const std::uintptr_t e = b + bytes;
  install_fault_handler();
  const std::lock_guard lock(registry_mutex);
  int free_index = -1;
  for (int i = 0; i < kMaxFaultRanges; ++i) {
    FaultRangeSlot& s = slots[i];
    if (!s.active.load(std::memory_order_relaxed)) {
      if (free_index < 0) free_index = i;
      continue;
    }
    if (b < s.end.load(std::memory_order_relaxed) && s.begin.load(std::memory_order_relaxed) < e)
      throw InvalidArgument("fault range of " + format_bytes(bytes) + " overlaps a registered range");
  }
  if (free_index < 0)
    throw Unsupported("all " + std::to_string(kMaxFaultRanges) +
                      " fault ranges are registered; unregister one first");
  FaultRangeSlot& s = slots[free_index];
  // A handler that saw the previous registration of this slot may still be leaving; wait so that it
  // never reads a half-written range.
  while (s.inflight.load(std::memory_order_acquire) != 0) ::sched_yield();
  s.begin.store(b, std::memory_order_relaxed);
  s.end.store(e, std::memory_order_relaxed);
  s.resolver.store(resolver, std::memory_order_relaxed);
  s.context.store(context, std::memory_order_relaxed);
  s.generation = (s.generation + 1) % (INT32_MAX / kMaxFaultRanges);
  s.active.store(true, std::memory_order_release);
  return s.generation * kMaxFaultRanges + free_index;
}

int free_fault_ranges() {
  const std::lock_guard lock(registry_mutex);
  int count = 0;
  for (const FaultRangeSlot& s : slots) count += s.active.load(std::memory_order_relaxed) ? 0 : 1;
  return count;
}

void unregister_fault_range(int id) {
  const std::lock_guard lock(registry_mutex);
  FaultRangeSlot& s = slots[id < 0 ? 0 : id % kMaxFaultRanges];
  if (id < 0 || !s.active.load(std::memory_order_relaxed) || s.generation != id / kMaxFaultRanges)
    throw InvalidPointer("fault range id " + std::to_string(id) + " is not registered");
  s.active.store(false, std::memory_order_seq_cst);
  while (s.inflight.load(std::memory_order_seq_cst) != 0) ::sched_yield();
}

FaultStats fault_stats() noexcept {
  FaultStats stats;
  stats.reads = resolved_reads.load(std::memory_order_relaxed);
  stats.writes = resolved_writes.load(std::memory_order_relaxed);
  stats.unknown = resolved_unknown.load(std::memory_order_relaxed);
  return stats;
}

void reset_fault_stats() noexcept {
  resolved_reads.store(0, std::memory_order_relaxed);
  resolved_writes.store(0, std::memory_order_relaxed);
  resolved_unknown.store(0, std::memory_order_relaxed);
}

}  // namespace hdsm::os
