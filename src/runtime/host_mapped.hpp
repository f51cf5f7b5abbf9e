// The host-mapped model (HDSM_PROTOCOL=host-mapped, and what auto gives devices that share host
// memory): a shared object is page-aligned host memory that the devices' kernels use in place,
// through the device's HostMapping (host_mapping.hpp), so nothing is ever copied and the host never
// faults. A call hands the objects it passes to its device first (the release: OpenCL unmaps
// them), and the sync hands them back once the calls are done (the acquire: OpenCL maps them). An
// object is mapped on the device it was allocated for at once, and on any other device the first
// time a call there passes it.
#pragma once

#include <hdsm/error.hpp>

#include "device/host_mapping.hpp"
#include "runtime/direct_model.hpp"

#include <cstddef>
#include <vector>

namespace hdsm::detail {

/// A device refused to map an object's host memory (the platform's error in the message): what auto's
/// fallback to copying catches (a program gets a plain Unsupported).
class MappingRefused : public Unsupported {
 public:
  using Unsupported::Unsupported;
};

class HostMappedModel final : public DirectModel {
 public:
  /// Calls without a shared-pointer argument run on `default_device`. `fallback`: a refused mapping
  /// is a MappingRefused, for the caller to copy instead (auto); else an Unsupported.
  HostMappedModel(std::vector<Device*> devices, std::size_t default_device, const Runtime* owner,
                  bool fallback = false);
  ~HostMappedModel() override;
  HostMappedModel(const HostMappedModel&) = delete;
  HostMappedModel& operator=(const HostMappedModel&) = delete;

  /// The address a kernel of the object's device sees (Unsupported on OpenCL, whose kernels take
  /// buffers, not addresses).
  void* device_address(const void* p) const override;

  /// The device's HostMapping; Unsupported, naming the device, when it has none.
  HostMapping& mapping(unsigned device) const;

 private:
  /// Zero-filled host memory mapped on `device`; MappingRefused (with fallback_) or Unsupported, with
  /// the device's error, when it refuses to map it.
  Object place(std::size_t bytes, unsigned device) override;
  void release(Object& object) override;
  KernelArg argument(unsigned device, Object& object, std::size_t offset) override;
  void before_launch(unsigned device, Object& object, Queue& queue) override;
  void after_calls(unsigned device, Object& object, Queue& queue) override;

  bool fallback_;
};

}  // namespace hdsm::detail
