// The host-side state behind hdsm::Event, shared by every backend.
#pragma once

#include "os/spin_wait.hpp"

#include <atomic>
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

  /// True where the backend can tell that the work before the event finished without error before
  /// complete() has run (CUDA: the cudaEvent has completed; its stream callback, which completes the
  /// state, comes later). Waiters poll it while they spin.
  virtual bool finished_early() const noexcept { return false; }

  std::mutex mutex;
  std::condition_variable done_cv;
  std::atomic<bool> done{false};  // set under mutex, read without it while spinning
  std::exception_ptr error;       // written before done, read after it
  /// Run once the event completes (a backend's queue waiting for another backend's event).
  std::vector<std::function<void(std::exception_ptr)>> continuations;

  void complete(const std::exception_ptr& e = nullptr) {
    std::vector<std::function<void(std::exception_ptr)>> then;
    {
      std::lock_guard lock(mutex);
      error = e;
      done.store(true, std::memory_order_release);
      then.swap(continuations);
    }
    done_cv.notify_all();
    for (auto& f : then) f(e);
  }

  /// Whether the event has completed (finished_early counts, as success).
  bool completed() const noexcept { return done.load(std::memory_order_acquire) || finished_early(); }

  /// Waits until the event completes, spinning first (os::spin_until), and returns its error (null
  /// where it succeeded).
  std::exception_ptr wait() {
    if (!os::spin_until([&] { return completed(); })) {
      std::unique_lock lock(mutex);
      done_cv.wait(lock, [&] { return done.load(std::memory_order_relaxed); });
    }
    if (!done.load(std::memory_order_acquire)) return nullptr;  // finished early: no error
    std::lock_guard lock(mutex);
    return error;
  }

  /// Calls f(error) when the event completes; at once (on this thread) if it has.
  void then(std::function<void(std::exception_ptr)> f) {
    std::exception_ptr e;
    {
      std::lock_guard lock(mutex);
      if (!done.load(std::memory_order_relaxed)) {
        continuations.push_back(std::move(f));
        return;
      }
      e = error;
    }
    f(e);
  }
};

}  // namespace hdsm::detail
