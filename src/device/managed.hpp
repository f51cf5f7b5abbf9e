// Managed (unified) memory of a device: one allocation the CPU and the device's kernels both address,
// migrated by the platform (CUDA unified memory: cudaMallocManaged, page migration on touch). The
// um protocol (HDSM_PROTOCOL=um) puts shared objects here instead of in hdsm's arena, so one program
// can be measured with hdsm's protocols and with unified memory in the same run. A device that
// offers it implements this interface besides Device.
#pragma once

#include <hdsm/device.hpp>

#include <cstddef>

namespace hdsm {

/// Where managed memory should preferably live (cudaMemAdviseSetPreferredLocation).
enum class UmAdvice { none, device, host };

class ManagedMemory {
 public:
  /// Zero-filled memory of `bytes` (> 0) that the CPU and this device's kernels both use through the
  /// returned pointer; OutOfDeviceMemory when the platform refuses.
  virtual void* alloc_managed(std::size_t bytes) = 0;
  /// Frees an allocation of alloc_managed; InvalidPointer for anything else.
  virtual void free_managed(void* pointer) = 0;
  /// Enqueue on `queue` (a queue of this device) the migration of [pointer, pointer + bytes) to the
  /// device's memory or to the host's.
  virtual void prefetch(const void* pointer, std::size_t bytes, bool to_device, Queue& queue) = 0;
  /// Advise where [pointer, pointer + bytes) should live.
  virtual void advise(const void* pointer, std::size_t bytes, UmAdvice advice) = 0;

 protected:
  ~ManagedMemory() = default;
};

}  // namespace hdsm
