// Waiting for a nonblocking MPI request with a limit, for the runtimes whose collectives must not
// hang on a rank that is elsewhere (crc's engine, the cluster's transport).
#pragma once

#include "mpi/check.hpp"

#include <dlfcn.h>
#include <mpi.h>
#include <sched.h>
#include <time.h>

#include <chrono>

namespace hdsm::mpi_detail {

/// libhdsm_mpi's progress call where the program loaded that library, else null. Its pending
/// operations (a receive the program posted before a cluster or crc call) are matched only when
/// something drives them: a rank that waits here without doing so can hang the rank that sent.
inline void (*interposed_progress())() {
  static void (*const progress)() =
      reinterpret_cast<void (*)()>(::dlsym(RTLD_DEFAULT, "hdsm_mpi_progress"));  // NOLINT
  return progress;
}

/// Tests `request` until it completes (true) or `limit` passes (false: the request stays pending,
/// and the caller waits on it again or ends the job; a second collective would not match it);
/// milliseconds::max() waits for good. `what` names the request in an MPI error.
///
/// Polled as os::spin_until_for spins: a yield every 64 polls (a few microseconds), so a rank's wait
/// never keeps the threads of another rank on the same cores from running (ranks and their threads
/// often oversubscribe a node: a millisecond of polling without yields at every kernel boundary made a
/// scan of many small kernels on 2 ranks x 2 threads on 2 cores 100x slower), while an agreement of
/// ranks that are all there (a microsecond or two) sees no yield; after 20 ms, sleeps of 50 us, so
/// that a rank that waits long leaves its core. The ranks that wait drive the request only when they
/// poll: longer sleeps (0.5 ms) made the last rank to come wait for them, 0.1-0.7 ms in every call of
/// a loop with uneven host work.
inline bool wait_within(MPI_Request& request, std::chrono::milliseconds limit, const CallCheck& check,
                        const char* what) {
  const auto start = std::chrono::steady_clock::now();
  const bool forever = limit == std::chrono::milliseconds::max();
  const auto deadline = start + (forever ? std::chrono::milliseconds(0) : limit);
  for (unsigned polls = 1;; ++polls) {
    int done = 0;
    check(PMPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test", what);
    if (done != 0) return true;
    if (polls % 64 != 0) continue;  // the clock is read every 64 polls
    if (void (*progress)() = interposed_progress(); progress != nullptr) progress();
    const auto now = std::chrono::steady_clock::now();
    if (!forever && now >= deadline) return false;
    if (now - start < std::chrono::milliseconds(20)) {
      ::sched_yield();
      continue;
    }
    const timespec pause{0, 50'000};
    ::nanosleep(&pause, nullptr);
  }
}

/// MPI_Comm_dup of `comm` into `out` for a runtime's own messages, as MPI_Comm_idup waited for with
/// wait_within: a rank that waits in a blocking duplicate drives nothing, and a receive the program
/// posted before it, which another rank's send needs matched before that rank can come, would hang
/// both. `what` names the duplicate in an MPI error.
inline void duplicate(MPI_Comm comm, MPI_Comm* out, const CallCheck& check, const char* what) {
  MPI_Request request = MPI_REQUEST_NULL;
  check(PMPI_Comm_idup(comm, out, &request), "MPI_Comm_idup", what);
  wait_within(request, std::chrono::milliseconds::max(), check, what);
}

}  // namespace hdsm::mpi_detail
