// Pinned host memory of the sim backend: page-aligned, pre-faulted mappings that the DMA engines
// read and write directly. Shared by every sim device of a runtime, as pinned memory is portable
// across CUDA devices.
#pragma once

#include "os/mapping.hpp"

#include <cstddef>
#include <map>
#include <shared_mutex>

namespace hdsm::sim {

class HostMemory {
 public:
  void* alloc(std::size_t bytes);
  void free(void* pointer);
  /// True when [pointer, pointer+bytes) lies inside one pinned allocation.
  bool contains(const void* pointer, std::size_t bytes) const;

 private:
  mutable std::shared_mutex mutex_;
  std::map<const std::byte*, os::Mapping> blocks_;  // by start address
};

}  // namespace hdsm::sim
