// Built instead of src/device/opencl/ when CMake found no OpenCL headers and ICD loader.
#include <hdsm/error.hpp>

#include "device/backends.hpp"

namespace hdsm {

std::unique_ptr<DeviceBackend> open_opencl(DeviceServices, const OpenclOptions&) {
  throw NoDevice(
      "this libhdsm was built without OpenCL (CMake found no OpenCL headers and ICD loader; on Debian "
      "install "
      "ocl-icd-opencl-dev and opencl-c-headers, plus a platform such as pocl-opencl-icd, and rebuild)");
}

}  // namespace hdsm
