// Built instead of src/device/opencl/ when CMake found no OpenCL headers and ICD loader: the backend
// is registered, and opening it says why there is none.
#include <hdsm/error.hpp>

#include "device/backends.hpp"

namespace hdsm {
namespace {

std::unique_ptr<DeviceBackend> open_opencl(DeviceServices, const Config&, unsigned) {
  throw NoDevice(
      "this libhdsm was built without OpenCL (CMake found no OpenCL headers and ICD loader; on Debian "
      "install ocl-icd-opencl-dev and opencl-c-headers, plus a platform such as pocl-opencl-icd, and "
      "rebuild)");
}

const bool registered = register_backend(
    {"opencl", 1, [](const Config& c) { return switched_on(c, "HDSM_OPENCL", "opencl"); }, open_opencl});

}  // namespace
}  // namespace hdsm
