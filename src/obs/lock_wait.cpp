#include "obs/lock_wait.hpp"

namespace hdsm::obs {

std::unique_lock<std::mutex> lock_counting_wait(std::mutex& mutex, const LockWaitSink& sink) {
  std::unique_lock lock(mutex, std::try_to_lock);
  if (lock.owns_lock()) return lock;
  const auto begin = Clock::now();
  lock.lock();
  const auto end = Clock::now();
  if (sink.counters != nullptr) {
    sink.counters->lock_wait_ns.fetch_add(
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(end - begin).count()),
        std::memory_order_relaxed);
    sink.counters->lock_waits.fetch_add(1, std::memory_order_relaxed);
  }
  if (sink.tracer != nullptr) sink.tracer->span(sink.tracer->host_thread_lane(), sink.what, begin, end);
  return lock;
}

}  // namespace hdsm::obs
