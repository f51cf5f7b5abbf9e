// What hdsm's threads and objects need to know about the process around them: that it may be a
// child of fork() (where the threads of objects made before the fork do not exist), that a thread
// may be running a program's code for hdsm (a kernel's block, a crc task: an exit() there must not
// wait for that thread), and that a thread which runs kernels needs somewhere to handle faults when
// its own stack overflowed.
#pragma once

#include <signal.h>

#include <hdsm/export.h>

#include <cstdint>
#include <thread>
#include <utility>

HDSM_VISIBLE_BEGIN
namespace hdsm::os {

/// How many forks separate this process from the one hdsm started in: 0 there, one more in each
/// child of fork() (counted by a pthread_atfork handler that watch_forks installs). An object that
/// owns threads or shared mappings notes it when it is made; where the count differs later, the
/// object is its parent's copy, whose threads are not in this process.
std::uint32_t fork_generation() noexcept;
/// Installs the fork counter once per process; SystemError naming pthread_atfork when it fails.
void watch_forks();

// The calling thread's state, read and written inline on every launch: initial-exec TLS (one
// instruction, no __tls_get_addr), constinit (no initialisation wrapper call).
#define HDSM_FAST_TLS __attribute__((tls_model("initial-exec")))
namespace thread_state {
extern constinit thread_local unsigned user_code_depth HDSM_FAST_TLS;
extern constinit thread_local bool prepared_for_faults HDSM_FAST_TLS;
}  // namespace thread_state

/// While one lives, the calling thread runs a program's code for hdsm (a block of a kernel, a crc
/// task). Nests.
class RunningUserCode {
 public:
  RunningUserCode() noexcept { ++thread_state::user_code_depth; }
  ~RunningUserCode() { --thread_state::user_code_depth; }
  RunningUserCode(const RunningUserCode&) = delete;
  RunningUserCode& operator=(const RunningUserCode&) = delete;
};
inline bool running_user_code() noexcept { return thread_state::user_code_depth != 0; }

/// What an object that owns threads notes when it is made (a runtime, a crc runtime, a cluster
/// session), to know later whether it may use and stop them.
class Origin {
 public:
  Origin() noexcept;
  /// Not in a child of fork(), where the object is its parent's copy, without its threads.
  bool same_process() const noexcept;
  /// Whether the object may stop its threads and free its memory now. Not in a child of fork()
  /// (joining the parent's threads would wait forever), nor from a program's code on one of hdsm's
  /// threads when the object was made outside it (exit() in a kernel runs the static destructors
  /// there, and the default runtime's teardown would wait for the very thread that runs it). An
  /// object made by a kernel or task is its own, and is torn down there as anywhere. What is not
  /// torn down is left to the process's end.
  bool may_tear_down() const noexcept;

 private:
  std::uint32_t forks_;
  bool in_user_code_;
};

/// Prepares the calling thread to run kernels: an alternate signal stack, so that a fault (a stack
/// overflow included, which leaves no room on the thread's own stack for the handler) is handled
/// there; and SIGSEGV and SIGBUS unblocked, so that hdsm's own faults reach its handler in a
/// program that blocked every signal before it made threads. Once per thread; an alternate stack
/// the program set up is kept. Where the stack cannot be mapped, it says so once and goes on.
void prepare_thread_for_faults_once() noexcept;
inline void prepare_thread_for_faults() noexcept {
  if (!thread_state::prepared_for_faults) prepare_thread_for_faults_once();
}

/// Blocks the program's asynchronous signals (everything but the ones a thread's own instruction
/// raises: SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS) in the calling thread while alive, so
/// that the threads it starts inherit that mask: hdsm's service threads (the fault service, device
/// queues, page servers) never run the program's handlers. A handler that touches shared memory would
/// otherwise fault on the very thread that must resolve the fault, and wait for itself. Not for
/// threads that run the program's code (kernels, tasks): profilers' SIGPROF and the program's own
/// signals reach them, and a SIGTERM with its default action ends the process through them. One
/// thread is both: a sim device's queue runs its kernels' first worker's share of blocks itself, with
/// the queue's mask, since a handler there would wait for that queue as well (the executor's other
/// workers keep the program's mask).
class SignalsBlockedForNewThreads {
 public:
  SignalsBlockedForNewThreads() noexcept;
  ~SignalsBlockedForNewThreads();
  SignalsBlockedForNewThreads(const SignalsBlockedForNewThreads&) = delete;
  SignalsBlockedForNewThreads& operator=(const SignalsBlockedForNewThreads&) = delete;

 private:
  sigset_t previous_;
  bool restore_ = false;
};

/// std::thread(f) started with the program's asynchronous signals blocked (a service thread).
template <class F>
std::thread service_thread(F&& f) {
  const SignalsBlockedForNewThreads quiet;
  return std::thread(std::forward<F>(f));
}

/// For a `catch (abi::__forced_unwind&)` before a `catch (...)` around a program's code on a thread
/// hdsm waits for: pthread_exit or pthread_cancel there unwinds with a forced unwind, which may not
/// be swallowed (glibc aborts with "exception not rethrown"), and which, let go, would end a thread
/// that hdsm then waits for forever. Says so, naming `what` ("a kernel's block"), and aborts.
[[noreturn]] void user_code_ended_its_thread(const char* what) noexcept;

}  // namespace hdsm::os
HDSM_VISIBLE_END
