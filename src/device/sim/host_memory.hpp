// Pinned host memory of the sim backend: page-aligned, pre-faulted mappings that the DMA engines
// read and write directly. Shared by every sim device of a runtime, as pinned memory is portable
// across CUDA devices, with the bus that all their transfers to and from host memory cross.
#pragma once

#include "device/sim/link_model.hpp"
#include "os/mapping.hpp"

#include <cstddef>
#include <map>
#include <shared_mutex>

namespace hdsm::sim {

class HostMemory {
 public:
  explicit HostMemory(double bus_gbps) : bus_(bus_gbps) {}
  void* alloc(std::size_t bytes);
  void free(void* pointer);
  /// True when [pointer, pointer+bytes) lies inside one pinned allocation.
  bool contains(const void* pointer, std::size_t bytes) const;
  HostBus& bus() { return bus_; }

 private:
  mutable std::shared_mutex mutex_;
  std::map<const std::byte*, os::Mapping> blocks_;  // by start address
  HostBus bus_;
};

}  // namespace hdsm::sim
