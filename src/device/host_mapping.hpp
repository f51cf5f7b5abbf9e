// Host-mapped memory of a device: host memory its kernels use in place, with no copy. Where a
// device shares memory with the host (CPU OpenCL devices, integrated GPUs, APUs, coherent
// superchips), copying data to it only costs time; the host-mapped memory model
// (HDSM_PROTOCOL=host-mapped, and auto on such devices) keeps shared objects in host memory and
// hands them to the device through this interface. A device that offers it implements it besides
// Device: sim (its kernels run on the CPU), OpenCL (CL_MEM_USE_HOST_PTR buffers), CUDA (mapped
// page-locked memory, or plain pointers where the device walks the host's page tables).
#pragma once

#include <hdsm/device.hpp>
#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace hdsm {

class HostMapping {
 public:
  /// Lets this device's kernels use [pointer, pointer + bytes) of page-aligned host memory in place,
  /// and returns the handle that names the mapping below (never 0). Throws an hdsm::Error naming the
  /// platform call and the device where the platform refuses, or would copy instead of mapping.
  virtual std::uint64_t map_host(void* pointer, std::size_t bytes) = 0;
  /// Ends a mapping once no kernel uses it any more; InvalidPointer for an unknown handle.
  virtual void unmap_host(std::uint64_t mapping) = 0;
  /// The argument by which a kernel of this device reaches byte `offset` of a mapping.
  virtual KernelArg host_argument(std::uint64_t mapping, std::size_t offset) = 0;
  /// Enqueue on `queue` (a queue of this device) the hand-over of a mapping to the device, before
  /// kernels use it (the release), or back to the host, after them (the acquire): OpenCL's unmap and
  /// map. Nothing where host and device see one coherent memory (sim, CUDA), and nothing when the
  /// mapping is already on that side.
  virtual void hand_over(std::uint64_t mapping, bool to_device, Queue& queue) = 0;

 protected:
  ~HostMapping() = default;
};

/// The entry of `mappings` (a backend's table by handle, whose entries have `bytes`) for a
/// host_argument at `offset`: InvalidPointer naming `device` for an unknown handle, InvalidArgument
/// for an offset past the mapping's end. The caller holds the table's lock.
template <class Table>
auto& host_mapping_at(Table& mappings, std::uint64_t mapping, std::size_t offset, const std::string& device) {
  const auto it = mappings.find(mapping);
  if (it == mappings.end())
    throw InvalidPointer(fmt::format("host_argument({:#x}) on {}: no such host mapping", mapping, device));
  if (offset > it->second.bytes)
    throw InvalidArgument(fmt::format("host_argument on {}: offset {} past the end of a mapping of {} bytes",
                                      device, offset, it->second.bytes));
  return it->second;
}

}  // namespace hdsm
