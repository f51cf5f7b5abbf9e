// Built instead of src/device/cuda/ when CMake found no CUDA toolkit: the backend is registered, and
// opening it says why there is none.
#include <hdsm/error.hpp>

#include "device/backends.hpp"

namespace hdsm {
namespace {

std::unique_ptr<DeviceBackend> open_cuda(DeviceServices, const Config&, unsigned) {
  throw NoDevice(
      "no CUDA device: this libhdsm was built without the CUDA toolkit (CMake found none; install it, "
      "with nvcc on the PATH or in /usr/local/cuda, and rebuild)");
}

const bool registered = register_backend(
    {"cuda", 2, [](const Config& c) { return switched_on(c, "HDSM_CUDA", "cuda"); }, open_cuda});

}  // namespace
}  // namespace hdsm
