// Backends other than sim, opened by the runtime when the configuration asks for them. Each one
// owns its devices; a backend that is not built into this libhdsm (no OpenCL headers or CUDA
// toolkit at build time, say) throws NoDevice saying so.
#pragma once

#include <hdsm/device.hpp>

#include "device/services.hpp"

#include <memory>
#include <string>
#include <vector>

namespace hdsm {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::vector<Device*> devices() const = 0;
};

/// A backend whose devices are all of one type, owned in the order they are listed.
template <class D>
class BackendOf : public DeviceBackend {
 public:
  std::vector<Device*> devices() const override {
    std::vector<Device*> out;
    for (const auto& d : devices_) out.push_back(d.get());
    return out;
  }

 protected:
  std::vector<std::unique_ptr<D>> devices_;
};

struct OpenclOptions {
  unsigned first_index = 0;      // DeviceProperties::index of the first device
  bool poison = false;           // discarded and new buffers are filled with DE AD BE EF
  std::size_t memory_bytes = 0;  // capacity offered per device; 0: the device's global memory
  std::string cache_dir;  // compiled programs (HDSM_CACHE_DIR): "off", empty for the default, or a path
};

/// Every device of every OpenCL platform (ICD) on this machine; none is not an error (an empty
/// backend), a missing ICD loader or a failing platform is NoDevice with the OpenCL error.
std::unique_ptr<DeviceBackend> open_opencl(DeviceServices services, const OpenclOptions& options);

struct CudaOptions {
  unsigned first_index = 0;  // DeviceProperties::index of the first device
  bool poison = false;       // discarded and new buffers are filled with the byte 0xDE (else new ones with 0)
  std::size_t memory_bytes = 0;  // capacity offered per device; 0: the device's global memory
};

/// Every device the CUDA runtime reports. No driver, or no device, is NoDevice saying "no CUDA
/// device" with cudaGetDeviceCount's error.
std::unique_ptr<DeviceBackend> open_cuda(DeviceServices services, const CudaOptions& options);

}  // namespace hdsm
