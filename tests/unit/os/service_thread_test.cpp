// hdsm's service threads (the fault service, the device queues, page servers) start with the
// program's asynchronous signals blocked, whatever the mask of the thread that starts them: a
// program's handler that touches shared memory must never run on the thread that resolves its
// faults. The faults a thread's own instructions raise stay unblocked there, and the caller's mask
// is as it was.
#include "os/process.hpp"

#include <gtest/gtest.h>

#include <csignal>

namespace {

sigset_t mask_of_this_thread() {
  sigset_t now;
  ::pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return now;
}

TEST(ServiceThread, StartsWithTheProgramsAsynchronousSignalsBlocked) {
  const sigset_t before = mask_of_this_thread();
  ASSERT_EQ(sigismember(&before, SIGUSR1), 0) << "the test needs SIGUSR1 unblocked here";
  sigset_t seen{};
  hdsm::os::service_thread([&] { seen = mask_of_this_thread(); }).join();
  for (const int sig : {SIGUSR1, SIGALRM, SIGTERM, SIGINT, SIGPROF, SIGCHLD, SIGRTMIN})
    EXPECT_EQ(sigismember(&seen, sig), 1) << "signal " << sig;
  for (const int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS})
    EXPECT_EQ(sigismember(&seen, sig), 0) << "signal " << sig << " is raised by the thread's own instruction";
  const sigset_t after = mask_of_this_thread();
  EXPECT_EQ(sigismember(&after, SIGUSR1), 0) << "the caller's mask changed";
}

}  // namespace
