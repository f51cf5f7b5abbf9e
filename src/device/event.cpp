#include <hdsm/device.hpp>

#include "device/event_state.hpp"
#include "exec/executor.hpp"

#include <hdsm/error.hpp>

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
  // Kernel code that waits for device work (an hdsm::sync, a queue's synchronize or an event inside a
  // sim kernel) would wait for good where that work needs the executor this block holds: refused, as
  // CUDA has no host calls in device code.
  if (exec::inside_a_block() && !state_->completed())
    throw InvalidArgument(
        "a wait for device work from inside a kernel: kernel code may not wait for device work (the "
        "sim devices' kernels run on the executor whose worker runs this block, so the wait would never "
        "end); launch it and wait from host code");
  if (std::exception_ptr error = state_->wait()) std::rethrow_exception(error);
}

}  // namespace hdsm
