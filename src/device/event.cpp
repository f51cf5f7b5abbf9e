#include <hdsm/device.hpp>

#include "device/checks.hpp"
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

bool Event::query() const { return !state_ || state_->completed(); }

void Event::wait() const {
  if (!state_) return;
  // An hdsm::sync or an event's wait in kernel code (a finished event is no wait).
  if (!state_->completed()) require_outside_a_kernel("a wait for device work");
  if (std::exception_ptr error = state_->wait()) std::rethrow_exception(error);
}

}  // namespace hdsm
