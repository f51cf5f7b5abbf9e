#include "obs/lock_wait.hpp"

namespace hdsm::obs {

void count_wait(const LockWaitSink& sink, Clock::time_point begin, Clock::time_point end) {
  if (sink.counters != nullptr) {
    sink.counters->lock_wait_ns.fetch_add(
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(end - begin).count()),
        std::memory_order_relaxed);
    sink.counters->lock_waits.fetch_add(1, std::memory_order_relaxed);
  }
  if (sink.tracer != nullptr) sink.tracer->span(sink.tracer->host_thread_lane(), sink.what, begin, end);
}

}  // namespace hdsm::obs
