// Built instead of src/device/cuda/ when CMake found no CUDA toolkit.
#include <hdsm/error.hpp>

#include "device/backends.hpp"

namespace hdsm {

std::unique_ptr<DeviceBackend> open_cuda(DeviceServices, const CudaOptions&) {
  throw NoDevice(
      "no CUDA device: this libhdsm was built without the CUDA toolkit (CMake found none; install it, "
      "with nvcc on the PATH or in /usr/local/cuda, and rebuild)");
}

}  // namespace hdsm
