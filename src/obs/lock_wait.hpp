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

/// Adds one wait of the time from `begin` to `end` to the sink.
void count_wait(const LockWaitSink& sink, Clock::time_point begin, Clock::time_point end);

/// Locks `mutex` (any Lockable), counting the wait when another thread holds it.
template <class Mutex>
std::unique_lock<Mutex> lock_counting_wait(Mutex& mutex, const LockWaitSink& sink) {
  std::unique_lock lock(mutex, std::try_to_lock);
  if (lock.owns_lock()) return lock;
  const auto begin = Clock::now();
  lock.lock();
  count_wait(sink, begin, Clock::now());
  return lock;
}

}  // namespace hdsm::obs
