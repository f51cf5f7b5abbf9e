// Locks whose contention hdsm measures (seed 003 Fig. 8: the time host threads wait to enqueue on a
// device): the runtime's per-device call locks and the copy engine's per-device enqueue locks. An
// uncontended acquisition costs one try_lock and no clock read; only a thread that finds the lock
// taken reads the clock, blocks, and adds its wait to Counters::lock_wait_ns (and, when tracing, a
// "lock wait" span on its lane).
#pragma once

#include "obs/counters.hpp"
#include "obs/trace.hpp"

#include <mutex>

namespace hdsm::obs {

/// Where the waits on a lock are counted (either may be null).
struct LockWaitSink {
  Counters* counters = nullptr;
  Tracer* tracer = nullptr;   // enabled tracers only
  const char* what = "lock";  // names the lock in trace spans
};

/// Locks `mutex`, counting the wait when another thread holds it.
std::unique_lock<std::mutex> lock_counting_wait(std::mutex& mutex, const LockWaitSink& sink);

}  // namespace hdsm::obs
