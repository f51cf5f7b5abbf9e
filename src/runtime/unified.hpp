// The um protocol (HDSM_PROTOCOL=um): shared objects are the device's managed (unified) memory,
// which the platform migrates page by page as the CPU and the kernels touch it (CUDA unified
// memory), instead of objects in hdsm's arena kept coherent by hdsm. call launches with the object
// pointers as they are; with HDSM_UM_PREFETCH=1 the objects a call uses are prefetched to the
// device before it and back to the host at the sync; HDSM_UM_ADVICE sets their preferred location.
// It is the baseline hdsm's own protocols are measured against, in the same program and run. The
// objects are memory the host touches directly, so bulk memory and I/O on them are plain libc calls.
#pragma once

#include <hdsm/device.hpp>

#include "device/managed.hpp"
#include "runtime/memory_model.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace hdsm::detail {

class UnifiedModel final : public MemoryModel {
 public:
  /// Calls without a shared-pointer argument run on `default_device`.
  UnifiedModel(std::vector<Device*> devices, std::size_t default_device, bool prefetch, UmAdvice advice);
  ~UnifiedModel() override;
  UnifiedModel(const UnifiedModel&) = delete;
  UnifiedModel& operator=(const UnifiedModel&) = delete;

  /// Managed memory of `bytes` on `device`; Unsupported when the device has none (sim and CUDA do).
  void* alloc(std::size_t bytes, unsigned device) override;
  /// Frees an object after the calls in flight on its device; InvalidPointer unless p starts one.
  void free(void* p) override;
  /// Unified memory has one address for the CPU and the device.
  void* device_address(const void* p) const override;
  /// Launches with the pointers as they are, on the device of the first shared object.
  void call(const Kernel& kernel, const Launch& launch, std::span<const CallArg> args) override;
  /// Waits for every call (prefetching their objects back to the host first when asked); rethrows
  /// the first error.
  void sync() override;
  bool mediates(const void*) const override { return false; }
  void check(const void*, std::size_t, const char*) const override {}
  void copy(void* dst, const void* src, std::size_t n, std::vector<Event>* pending) override;
  void fill(void* dst, std::uint8_t value, std::size_t n) override;

  struct ManagedObject {
    std::byte* start;
    std::size_t bytes;
    unsigned device;
  };
  /// The object holding p, if any.
  std::optional<ManagedObject> find(const void* p) const;

  /// Waits for the calls in flight on one device.
  void sync_device(unsigned device);

 private:
  /// Launches on `device` (the objects in `used` prefetched there first when asked).
  void launch_on(unsigned device, const Kernel& kernel, const Launch& launch, std::span<const KernelArg> args,
                 const std::vector<ManagedObject>& used);
  ManagedMemory& managed(unsigned device) const;
  Queue& queue(unsigned device);  // caller holds mutex_

  std::vector<Device*> devices_;
  std::size_t default_device_;
  bool prefetch_;
  UmAdvice advice_;
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, ManagedObject> objects_;    // by start address
  std::vector<std::unique_ptr<Queue>> queues_;         // by device, created on first call
  std::vector<std::vector<ManagedObject>> in_flight_;  // by device: objects of calls since the sync
  std::vector<bool> busy_;                             // by device: calls since the sync
};

}  // namespace hdsm::detail
