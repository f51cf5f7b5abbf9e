// The host-side state behind hdsm::Event, shared by every backend.
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>

namespace hdsm::detail {

struct EventState {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::exception_ptr error;

  void complete(std::exception_ptr e = nullptr) {
    {
      std::lock_guard lock(mutex);
      done = true;
      error = std::move(e);
    }
    done_cv.notify_all();
  }
};

}  // namespace hdsm::detail
