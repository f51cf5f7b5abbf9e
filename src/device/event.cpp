#include <hdsm/device.hpp>

#include "device/event_state.hpp"

namespace hdsm {

std::string_view to_string(Backend backend) {
  switch (backend) {
    case Backend::sim:
      return "sim";
    case Backend::opencl:
      return "opencl";
    case Backend::cuda:
      return "cuda";
  }
  return "?";
}

bool Event::query() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mutex);
  return state_->done;
}

void Event::wait() const {
  if (!state_) return;
  std::unique_lock lock(state_->mutex);
  state_->done_cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

}  // namespace hdsm
