// The host-side state behind hdsm::Event, shared by every backend.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

namespace hdsm::detail {

struct EventState {
  EventState() = default;
  EventState(const EventState&) = delete;
  EventState& operator=(const EventState&) = delete;
  /// Virtual so that a backend can keep more per event (the CUDA backend its cudaEvent, which its
  /// queues wait for on the device) and recognise its own events with dynamic_cast.
  virtual ~EventState() = default;

  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::exception_ptr error;
  /// Run once the event completes (a backend's queue waiting for another backend's event).
  std::vector<std::function<void(std::exception_ptr)>> continuations;

  void complete(std::exception_ptr e = nullptr) {
    std::vector<std::function<void(std::exception_ptr)>> then;
    {
      std::lock_guard lock(mutex);
      done = true;
      error = e;
      then.swap(continuations);
    }
    done_cv.notify_all();
    for (auto& f : then) f(e);
  }

  /// Calls f(error) when the event completes; at once (on this thread) if it has.
  void then(std::function<void(std::exception_ptr)> f) {
    std::exception_ptr e;
    {
      std::lock_guard lock(mutex);
      if (!done) {
        continuations.push_back(std::move(f));
        return;
      }
      e = error;
    }
    f(e);
  }
};

}  // namespace hdsm::detail
