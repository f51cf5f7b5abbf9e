#include "device/sim/sim_device.hpp"

#include <hdsm/error.hpp>

#include "device/sim/sim_queue.hpp"
#include "obs/counters.hpp"
#include "obs/trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace hdsm::sim {
namespace {

// Handles carry the device index in their upper bits, so a buffer of another device is recognised
// as foreign instead of aliasing an allocation with the same number.
constexpr int kDeviceShift = 48;

constexpr unsigned char kPoison[4] = {0xDE, 0xAD, 0xBE, 0xEF};

}  // namespace

SimDevice::SimDevice(unsigned index, const SimOptions& options, HostMemory& host, DeviceServices services)
    : link_(options.link_gbps, options.latency_us),
      poison_(options.poison),
      host_(host),
      services_(services),
      counters_(services.counters.add_device(fmt::format("sim{}", index))),
      memory_(options.memory_bytes, fmt::format("memory of sim{}", index)),
      heap_(options.memory_bytes),
      next_id_((std::uint64_t{index} + 1) << kDeviceShift) {
  props_.name = fmt::format("sim{}", index);
  props_.backend = Backend::sim;
  props_.index = index;
  props_.memory_bytes = heap_.capacity();
  props_.copy_engines = 2;
  props_.peer_group = index < options.peer_groups.size() ? options.peer_groups[index] : -1;
  props_.link_gbps = options.link_gbps;
  props_.latency_us = options.latency_us;
  inbound_.lane = services_.tracer.lane(props_.name + " H2D engine");
  outbound_.lane = services_.tracer.lane(props_.name + " D2H engine");
  local_lane_ = services_.tracer.lane(props_.name + " D2D");
}

SimDevice::~SimDevice() = default;

const SimDevice::Allocation& SimDevice::find(DeviceBuffer buffer, const char* what) const {
  const auto it = allocations_.find(buffer.handle);
  if (it != allocations_.end()) return it->second;
  const std::uint64_t owner = buffer.handle >> kDeviceShift;
  if (buffer.handle == 0) throw InvalidPointer(fmt::format("{} on {}: null device buffer", what, props_.name));
  if (owner != props_.index + 1)
    throw InvalidPointer(fmt::format("{} on {}: buffer #{:x} was not allocated on this device", what, props_.name,
                                     buffer.handle));
  throw InvalidPointer(fmt::format("{} on {}: buffer #{:x} ({}) was already freed", what, props_.name,
                                   buffer.handle, format_bytes(buffer.bytes)));
}

DeviceBuffer SimDevice::alloc(std::size_t bytes) {
  if (bytes == 0) throw InvalidArgument(fmt::format("cannot allocate 0 bytes on {}", props_.name));
  std::byte* p = nullptr;
  DeviceBuffer b;
  {
    std::lock_guard lock(alloc_mutex_);
    const auto offset = bytes <= heap_.capacity() ? heap_.allocate(bytes) : std::nullopt;
    if (!offset) throw OutOfDeviceMemory(props_.name, bytes, heap_.used(), heap_.capacity());
    b = DeviceBuffer{next_id_++, bytes};
    allocations_.emplace(b.handle, Allocation{*offset, bytes});
    p = memory_.data() + *offset;
  }
  if (poison_) fill_poison(p, bytes);
  return b;
}

void SimDevice::free(DeviceBuffer buffer) {
  Allocation a{};
  {
    std::lock_guard lock(alloc_mutex_);
    a = find(buffer, "free");
    allocations_.erase(buffer.handle);
  }
  // Like cudaFree, wait for the work already queued on this device before the memory is reused.
  {
    std::lock_guard lock(queues_mutex_);
    for (SimQueue* q : queues_) q->drain();
  }
  if (poison_) fill_poison(memory_.data() + a.offset, a.bytes);
  else if (a.bytes >= (std::size_t{1} << 20)) memory_.release_pages(a.offset, a.bytes);
  std::lock_guard lock(alloc_mutex_);
  heap_.release(a.offset, a.bytes);
}

std::size_t SimDevice::memory_used() const {
  std::lock_guard lock(alloc_mutex_);
  return heap_.used();
}

void SimDevice::discard(DeviceBuffer buffer, std::size_t offset, std::size_t bytes) {
  std::byte* p = resolve(buffer, offset, bytes, "discard");
  if (poison_) fill_poison(p, bytes);
}

std::byte* SimDevice::resolve(DeviceBuffer buffer, std::size_t offset, std::size_t bytes, const char* what) const {
  std::lock_guard lock(alloc_mutex_);
  const Allocation& a = find(buffer, what);
  if (offset > a.bytes || bytes > a.bytes - offset)
    throw InvalidArgument(fmt::format("{} of {} at offset {} runs past the end of {} buffer #{:x} ({} bytes)", what,
                                      format_bytes(bytes), offset, props_.name, buffer.handle, a.bytes));
  return memory_.data() + a.offset + offset;
}

bool SimDevice::can_access_peer(const Device& other) const {
  const auto* o = dynamic_cast<const SimDevice*>(&other);
  return o != nullptr && o != this && &o->host_ == &host_ && props_.peer_group >= 0 &&
         props_.peer_group == o->props_.peer_group;
}

void SimDevice::link_copy(Route route, Engine& first, Engine* second, void* dst, const void* src, std::size_t n) {
  auto copy = [&] {
    const auto begin = Clock::now();
    std::memcpy(dst, src, n);
    hold_until(begin + link_.duration(n));
    return begin;
  };
  Clock::time_point begin;
  if (second != nullptr) {
    std::scoped_lock lock(first.busy, second->busy);
    begin = copy();
  } else {
    std::lock_guard lock(first.busy);
    begin = copy();
  }
  const auto end = Clock::now();
  counters_.route(route).add(n);
  auto& tracer = services_.tracer;
  if (tracer.enabled()) {
    const std::string label = fmt::format("{} {}", to_string(route), format_bytes(n));
    tracer.span(first.lane, label, begin, end, n);
    if (second != nullptr) tracer.span(second->lane, label, begin, end, n);
  }
}

void SimDevice::local_copy(void* dst, const void* src, std::size_t n) {
  const auto begin = Clock::now();
  std::memmove(dst, src, n);
  counters_.route(Route::d2d).add(n);
  if (services_.tracer.enabled())
    services_.tracer.span(local_lane_, fmt::format("D2D {}", format_bytes(n)), begin, Clock::now(), n);
}

void SimDevice::fill_poison(std::byte* p, std::size_t n) {
  std::size_t done = std::min(n, sizeof kPoison);
  std::memcpy(p, kPoison, done);
  while (done < n) {  // double the filled prefix each step
    const std::size_t chunk = std::min(done, n - done);
    std::memcpy(p + done, p, chunk);
    done += chunk;
  }
}

std::unique_ptr<Queue> SimDevice::create_queue() {
  unsigned id = 0;
  {
    std::lock_guard lock(queues_mutex_);
    id = queues_created_++;
  }
  return std::make_unique<SimQueue>(*this, id);
}

void SimDevice::register_queue(SimQueue* q) {
  std::lock_guard lock(queues_mutex_);
  queues_.push_back(q);
}

void SimDevice::unregister_queue(SimQueue* q) {
  std::lock_guard lock(queues_mutex_);
  queues_.erase(std::remove(queues_.begin(), queues_.end(), q), queues_.end());
}

SimBackend::SimBackend(const SimOptions& options, DeviceServices services) {
  for (unsigned i = 0; i < options.devices; ++i)
    devices_.push_back(std::make_unique<SimDevice>(i, options, host_, services));
}

SimBackend::~SimBackend() = default;

std::vector<Device*> SimBackend::devices() const {
  std::vector<Device*> out;
  for (const auto& d : devices_) out.push_back(d.get());
  return out;
}

}  // namespace hdsm::sim
