// The um protocol (HDSM_PROTOCOL=um): shared objects are the device's managed (unified) memory,
// which the platform migrates page by page as the CPU and the kernels touch it (CUDA unified
// memory), instead of objects in hdsm's arena kept coherent by hdsm. call launches with the object
// pointers as they are; with HDSM_UM_PREFETCH=1 the objects a call uses are prefetched to the
// device before it and back to the host at the sync; HDSM_UM_ADVICE sets their preferred location.
// It is the baseline hdsm's own protocols are measured against, in the same program and run.
#pragma once

#include "device/managed.hpp"
#include "runtime/direct_model.hpp"

#include <cstddef>
#include <vector>

namespace hdsm::detail {

class UnifiedModel final : public DirectModel {
 public:
  /// Calls without a shared-pointer argument run on `default_device`.
  UnifiedModel(std::vector<Device*> devices, std::size_t default_device, bool prefetch, UmAdvice advice,
               const Runtime* owner);
  ~UnifiedModel() override;
  UnifiedModel(const UnifiedModel&) = delete;
  UnifiedModel& operator=(const UnifiedModel&) = delete;

  /// Unified memory has one address for the CPU and the device.
  void* device_address(const void* p) const override;

 private:
  /// Managed memory of `bytes` on `device`; Unsupported when the device has none (sim and CUDA do).
  Object place(std::size_t bytes, unsigned device) override;
  void release(Object& object) override;
  KernelArg argument(unsigned, Object& object, std::size_t offset) override {
    return KernelArg::value(static_cast<void*>(object.start + offset));
  }
  void before_launch(unsigned device, Object& object, Queue& queue) override;
  void after_calls(unsigned device, Object& object, Queue& queue) override;
  ManagedMemory& managed(unsigned device) const;

  bool prefetch_;
  UmAdvice advice_;
};

}  // namespace hdsm::detail
