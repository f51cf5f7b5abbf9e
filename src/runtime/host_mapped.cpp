#include "runtime/host_mapped.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <utility>

namespace hdsm::detail {

HostMappedModel::HostMappedModel(std::vector<Device*> devices, std::size_t default_device,
                                 const Runtime* owner, bool fallback)
    : DirectModel(std::move(devices), default_device, "HDSM_PROTOCOL=host-mapped", owner),
      fallback_(fallback) {}

HostMappedModel::~HostMappedModel() { release_all(); }

HostMapping& HostMappedModel::mapping(unsigned device) const {
  auto* m = dynamic_cast<HostMapping*>(devices_.at(device));
  if (m == nullptr)
    throw Unsupported(fmt::format("host-mapped memory: device {} ({}, {}) cannot use host memory in place",
                                  device, devices_[device]->name(),
                                  to_string(devices_[device]->properties().backend)));
  return *m;
}

DirectModel::Object HostMappedModel::place(std::size_t bytes, unsigned device) {
  HostMapping& m = mapping(device);
  // The object is host memory, populated at once: one larger than the machine's memory would only
  // meet the OOM killer.
  if (const std::size_t ram = os::physical_memory_bytes(); ram != 0 && bytes >= ram)
    throw OutOfDeviceMemory(
        fmt::format("host memory, where {}'s host-mapped objects live", devices_[device]->name()), bytes, 0,
        ram);
  Object o;
  // One byte more, where no other object may start (place()'s gap), but only the object's own pages
  // populated: the gap costs a page of address space, not of memory.
  o.host = os::Mapping(bytes + 1, fmt::format("a host-mapped object of {} bytes", bytes));
  o.host.populate(bytes);
  o.start = o.host.data();
  o.bytes = bytes;
  o.mapping.assign(devices_.size(), 0);
  try {
    o.mapping[device] = m.map_host(o.start, bytes);
  } catch (const Error& e) {
    // This object is too large, or the device full: the next one may map (and auto maps on).
    if (e.code() == Errc::out_of_device_memory) throw;
    std::string what = fmt::format("{} refused to map {} bytes of host memory: {}", devices_[device]->name(),
                                   bytes, e.what());
    if (fallback_) throw MappingRefused(what);
    throw Unsupported(what);
  }
  return o;
}

void HostMappedModel::release(Object& object) {
  for (unsigned d = 0; d < object.mapping.size(); ++d)
    if (object.mapping[d] != 0) mapping(d).unmap_host(std::exchange(object.mapping[d], 0));
  object.host = os::Mapping();
}

KernelArg HostMappedModel::argument(unsigned device, Object& object, std::size_t offset) {
  HostMapping& m = mapping(device);
  if (object.mapping[device] == 0) object.mapping[device] = m.map_host(object.start, object.bytes);
  return m.host_argument(object.mapping[device], offset);
}

void HostMappedModel::before_launch(unsigned device, Object& object, Queue& queue) {
  mapping(device).hand_over(object.mapping[device], true, queue);
}

void HostMappedModel::after_calls(unsigned device, Object& object, Queue& queue) {
  mapping(device).hand_over(object.mapping[device], false, queue);
}

void* HostMappedModel::device_address(const void* p) const {
  const auto o = find(p);
  if (!o) throw InvalidArgument(not_found(p, "safe"));
  if (devices_[o->device]->properties().backend == Backend::opencl)
    throw Unsupported(
        fmt::format("safe({}): OpenCL kernels take buffers, not addresses: pass the object as a "
                    "kernel argument instead of storing its address in device data",
                    p));
  // sim kernels use host pointers; CUDA maps page-locked memory at the host's address under unified
  // addressing (every 64-bit platform CUDA supports), and pageable access uses it as it is.
  return const_cast<void*>(p);
}

}  // namespace hdsm::detail
