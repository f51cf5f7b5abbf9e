#include "runtime/unified.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <exception>

namespace hdsm::detail {

UnifiedModel::UnifiedModel(std::vector<Device*> devices, std::size_t default_device, bool prefetch,
                           UmAdvice advice)
    : devices_(std::move(devices)),
      default_device_(default_device),
      prefetch_(prefetch),
      advice_(advice),
      queues_(devices_.size()),
      in_flight_(devices_.size()),
      busy_(devices_.size(), false) {}

UnifiedModel::~UnifiedModel() {
  try {
    sync();
  } catch (...) {  // a kernel's error nobody synced for: the objects still go
  }
  for (auto& [start, o] : objects_) {
    try {
      managed(o.device).free_managed(o.start);
    } catch (...) {
    }
  }
}

ManagedMemory& UnifiedModel::managed(unsigned device) const {
  auto* m = dynamic_cast<ManagedMemory*>(devices_.at(device));
  if (m == nullptr)
    throw Unsupported(
        fmt::format("HDSM_PROTOCOL=um: device {} ({}, {}) has no unified memory; um runs on CUDA "
                    "devices (and on sim, as an integrated GPU would)",
                    device, devices_[device]->name(), to_string(devices_[device]->properties().backend)));
  return *m;
}

Queue& UnifiedModel::queue(unsigned device) {
  if (!queues_[device]) queues_[device] = devices_[device]->create_queue();
  return *queues_[device];
}

void* UnifiedModel::alloc(std::size_t bytes, unsigned device) {
  if (bytes == 0) throw InvalidArgument("alloc(0): a shared object needs at least one byte");
  ManagedMemory& m = managed(device);
  auto* p = static_cast<std::byte*>(m.alloc_managed(bytes));
  try {
    m.advise(p, bytes, advice_);
    std::lock_guard lock(mutex_);
    objects_.emplace(reinterpret_cast<std::uintptr_t>(p), ManagedObject{p, bytes, device});
  } catch (...) {
    m.free_managed(p);
    throw;
  }
  return p;
}

std::optional<UnifiedModel::ManagedObject> UnifiedModel::find(const void* p) const {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(mutex_);
  auto it = objects_.upper_bound(at);
  if (it == objects_.begin()) return std::nullopt;
  --it;
  if (at - it->first >= it->second.bytes) return std::nullopt;
  return it->second;
}

void UnifiedModel::free(void* p) {
  std::optional<ManagedObject> o;
  {
    std::lock_guard lock(mutex_);
    const auto it = objects_.find(reinterpret_cast<std::uintptr_t>(p));
    if (it != objects_.end()) o = it->second;
  }
  if (!o) {
    const std::optional<ManagedObject> inside = find(p);
    throw InvalidPointer(
        inside ? fmt::format("free({}): not the start of a shared object (it lies {} bytes into "
                             "the object at {})",
                             p, static_cast<const std::byte*>(p) - inside->start,
                             static_cast<void*>(inside->start))
               : fmt::format("free({}): not a shared object of this runtime (freed already?)", p));
  }
  sync_device(o->device);  // a kernel may still use it
  {
    std::lock_guard lock(mutex_);
    objects_.erase(reinterpret_cast<std::uintptr_t>(p));
  }
  managed(o->device).free_managed(p);
}

void* UnifiedModel::device_address(const void* p) const {
  if (!find(p)) throw InvalidArgument(fmt::format("safe({}): not in a shared object of this runtime", p));
  return const_cast<void*>(p);
}

void UnifiedModel::call(const Kernel& kernel, const Launch& launch, std::span<const CallArg> args) {
  using Kind = CallArg::Kind;
  std::vector<KernelArg> kernel_args;
  std::vector<ManagedObject> used;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const CallArg& a = args[i];
    kernel_args.push_back(a.kind == Kind::annotated ? KernelArg::value(a.pointer) : a.value);
    if (a.kind == Kind::value) continue;
    if (const auto o = find(a.pointer))
      used.push_back(*o);
    else if (a.kind == Kind::annotated)
      throw InvalidArgument(fmt::format("call({}): annotated argument {} ({}) is not a shared object",
                                        kernel.name, i, a.pointer));
  }
  // Managed memory is reachable from every device: the call runs on its first object's.
  const unsigned device = used.empty() ? static_cast<unsigned>(default_device_) : used.front().device;
  launch_on(device, kernel, launch, kernel_args, used);
}

void UnifiedModel::copy(void* dst, const void* src, std::size_t n, std::vector<Event>*) {
  std::memmove(dst, src, n);
}

void UnifiedModel::fill(void* dst, std::uint8_t value, std::size_t n) { std::memset(dst, value, n); }

void UnifiedModel::launch_on(unsigned device, const Kernel& kernel, const Launch& launch,
                             std::span<const KernelArg> args, const std::vector<ManagedObject>& used) {
  ManagedMemory& m = managed(device);
  std::lock_guard lock(mutex_);
  Queue& q = queue(device);
  if (prefetch_)
    for (const ManagedObject& o : used) m.prefetch(o.start, o.bytes, true, q);
  q.launch(kernel, launch, args);
  busy_[device] = true;
  in_flight_[device].insert(in_flight_[device].end(), used.begin(), used.end());
}

void UnifiedModel::sync_device(unsigned device) {
  std::unique_lock lock(mutex_);
  if (!busy_[device]) return;
  Queue& q = *queues_[device];
  std::vector<ManagedObject> used;
  used.swap(in_flight_[device]);
  busy_[device] = false;
  if (prefetch_) {
    std::sort(used.begin(), used.end(),
              [](const ManagedObject& a, const ManagedObject& b) { return a.start < b.start; });
    used.erase(std::unique(used.begin(), used.end(),
                           [](const ManagedObject& a, const ManagedObject& b) { return a.start == b.start; }),
               used.end());
    for (const ManagedObject& o : used) managed(device).prefetch(o.start, o.bytes, false, q);
  }
  lock.unlock();
  q.synchronize();
}

void UnifiedModel::sync() {
  std::exception_ptr first;
  for (unsigned d = 0; d < devices_.size(); ++d) {
    try {
      sync_device(d);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace hdsm::detail
