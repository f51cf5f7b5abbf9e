#include "runtime/unified.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

namespace hdsm::detail {

UnifiedModel::UnifiedModel(std::vector<Device*> devices, std::size_t default_device, bool prefetch,
                           UmAdvice advice, const Runtime* owner)
    : DirectModel(std::move(devices), default_device, "HDSM_PROTOCOL=um", owner),
      prefetch_(prefetch),
      advice_(advice) {}

UnifiedModel::~UnifiedModel() { release_all(); }

ManagedMemory& UnifiedModel::managed(unsigned device) const {
  auto* m = dynamic_cast<ManagedMemory*>(devices_.at(device));
  if (m == nullptr)
    throw Unsupported(
        fmt::format("HDSM_PROTOCOL=um: device {} ({}, {}) has no unified memory; um runs on CUDA "
                    "devices (and on sim, as an integrated GPU would)",
                    device, devices_[device]->name(), to_string(devices_[device]->properties().backend)));
  return *m;
}

DirectModel::Object UnifiedModel::place(std::size_t bytes, unsigned device) {
  ManagedMemory& m = managed(device);
  Object o;
  o.start = static_cast<std::byte*>(m.alloc_managed(bytes + 1));  // the gap place() promises
  o.bytes = bytes;
  try {
    m.advise(o.start, bytes, advice_);
  } catch (...) {
    m.free_managed(o.start);
    throw;
  }
  return o;
}

void UnifiedModel::release(Object& object) { managed(object.device).free_managed(object.start); }

void* UnifiedModel::device_address(const void* p) const {
  if (!find(p)) throw InvalidArgument(not_found(p, "safe"));
  return const_cast<void*>(p);
}

void UnifiedModel::before_launch(unsigned device, Object& object, Queue& queue) {
  if (prefetch_) managed(device).prefetch(object.start, object.bytes, true, queue);
}

void UnifiedModel::after_calls(unsigned device, Object& object, Queue& queue) {
  if (prefetch_) managed(device).prefetch(object.start, object.bytes, false, queue);
}

}  // namespace hdsm::detail
