// Device backends and their registry. Each backend's translation unit registers itself when
// libhdsm loads (a namespace-scope `const bool registered = register_backend(...)`); the runtime
// opens, in their order, the registered backends the configuration asks for, and names none of them.
// A backend owns its devices; one that is not built into this libhdsm (no OpenCL headers or CUDA
// toolkit at build time, say) registers an opener that throws NoDevice saying so.
#pragma once

#include <hdsm/config.hpp>
#include <hdsm/device.hpp>

#include "device/services.hpp"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hdsm {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::vector<Device*> devices() const = 0;
};

struct BackendRegistration {
  std::string_view name;  // as HDSM_DEVICE names its devices ("sim", "opencl", "cuda")
  int order;              // backends open in ascending order, so device indices follow it
  /// Whether the configuration asks for the backend.
  bool (*wanted)(const Config& config);
  /// Opens the backend's devices; `first_index` is the DeviceProperties::index of its first one.
  std::unique_ptr<DeviceBackend> (*open)(DeviceServices services, const Config& config, unsigned first_index);
};

/// Adds a backend to the registry (at load time); returns true.
bool register_backend(const BackendRegistration& backend);
/// Every registered backend, in ascending order.
std::vector<BackendRegistration> registered_backends();
/// The rule of the optional backends' switches (HDSM_OPENCL, HDSM_CUDA): `knob` is on, or auto and
/// HDSM_DEVICE names the backend `name`.
bool switched_on(const Config& config, std::string_view knob, std::string_view name);

/// A backend whose devices are all of one type, owned in the order they are listed.
template <class D>
class BackendOf : public DeviceBackend {
 public:
  std::vector<Device*> devices() const override {
    std::vector<Device*> out;
    out.reserve(devices_.size());
    for (const auto& d : devices_) out.push_back(d.get());
    return out;
  }

 protected:
  std::vector<std::unique_ptr<D>> devices_;
};

}  // namespace hdsm
