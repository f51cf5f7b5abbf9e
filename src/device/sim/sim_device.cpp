#include "device/sim/sim_device.hpp"

#include "device/sim/peer_groups.hpp"

#include <hdsm/error.hpp>

#include "device/sim/sim_queue.hpp"
#include "obs/counters.hpp"
#include "obs/trace.hpp"
#include "os/signal_safe_io.hpp"

#include <fmt/format.h>

#include <sys/mman.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace hdsm::sim {
namespace {

// Handles carry the device index in their upper bits, so a buffer of another device is recognised
// as foreign instead of aliasing an allocation with the same number.
constexpr int kDeviceShift = 48;

constexpr unsigned char kPoison[4] = {0xDE, 0xAD, 0xBE, 0xEF};

// Bounds checking. Each allocation takes [guard page][padding][object][guard page] from the heap,
// the object's end rounded up to kGuardAlign placed against the back guard: overruns fault at once
// (up to the rounding, which keeps 64-byte alignment for vector loads), underruns once they leave the
// padding (at once for objects whose rounded size is a page multiple). The heap spans more address
// space than the device offers (kGuardSlack, untouched and not committed) so that the guards never
// reduce the capacity programs see; memory_used() counts the objects alone.
constexpr std::size_t kGuardAlign = 64;
constexpr std::size_t kGuardSlack = std::size_t{4} << 30;
// Dispatcher slots a device leaves free for the ranges that cannot work without one (the shared
// spaces of runtimes); the guard messages are only a diagnostic.
constexpr int kSpareFaultRanges = 8;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

std::size_t heap_bytes(const SimOptions& options) {
  return options.bounds_check ? 2 * options.memory_bytes + kGuardSlack : options.memory_bytes;
}

// A guard page's entry in guard_owners_: the owning object's size and which side of it the page is
// on; 0 for every other page. One word, so that the fault handler reads it without a lock.
constexpr std::uint64_t guard_entry(std::size_t bytes, bool front) {
  return std::uint64_t{bytes} << 1 | (front ? 1 : 0);
}

}  // namespace

SimDevice::SimDevice(unsigned index, const SimOptions& options, HostMemory& host, DeviceServices services)
    : link_(options.link_gbps, options.latency_us),
      poison_(options.poison),
      host_(host),
      own_executor_(options.threads > 0 ? std::make_unique<exec::Executor>(exec::ExecutorOptions{
                                              options.threads, options.fiber_stack_bytes})
                                        : nullptr),
      services_{services.counters, services.tracer, own_executor_ ? *own_executor_ : services.executor},
      counters_(services.counters.add_device(fmt::format("sim{}", index))),
      memory_(heap_bytes(options), fmt::format("memory of sim{}", index)),
      bounds_check_(options.bounds_check),
      page_(os::page_size()),
      capacity_(options.memory_bytes / os::OffsetHeap::kDefaultAlignment * os::OffsetHeap::kDefaultAlignment),
      heap_(heap_bytes(options), bounds_check_ ? page_ : os::OffsetHeap::kDefaultAlignment),
      next_id_((std::uint64_t{index} + 1) << kDeviceShift) {
  props_.name = fmt::format("sim{}", index);
  props_.backend = Backend::sim;
  props_.index = index;
  props_.memory_bytes = capacity_;
  props_.copy_engines = 2;
  props_.peer_group = index < options.peer_groups.size() ? options.peer_groups[index] : -1;
  props_.link_gbps = options.link_gbps;
  props_.latency_us = options.latency_us;
  props_.shares_host_memory = options.kind != SimKind::discrete;
  if (props_.shares_host_memory)
    props_.host_memory_source = options.kind == SimKind::integrated ? "HDSM_SIM_KIND=integrated"
                                                                    : "HDSM_SIM_KIND=integrated-unmappable";
  unmappable_ = options.kind == SimKind::integrated_unmappable;
  inbound_.lane = services_.tracer.lane(props_.name + " H2D engine");
  outbound_.lane = services_.tracer.lane(props_.name + " D2H engine");
  local_lane_ = services_.tracer.lane(props_.name + " D2D");
  if (bounds_check_) {
    guard_owners_ = os::Mapping(round_up(memory_.size() / page_ * sizeof(std::uint64_t), page_),
                                fmt::format("guard page table of {}", props_.name));
    // With few slots left (many devices or runtimes) the guard pages still fault, only the message
    // names the bare address instead of the kernel and the buffer.
    if (os::free_fault_ranges() > kSpareFaultRanges) {
      try {
        fault_range_ =
            os::register_fault_range(memory_.data(), memory_.size(), &SimDevice::on_guard_fault, this);
      } catch (const Unsupported&) {
        // Taken by another thread since the check: the same fallback.
      }
    }
  }
}

SimDevice::~SimDevice() {
  if (fault_range_ >= 0) os::unregister_fault_range(fault_range_);
}

const SimDevice::Allocation& SimDevice::find(DeviceBuffer buffer, const char* what) const {
  const auto it = allocations_.find(buffer.handle);
  if (it != allocations_.end()) return it->second;
  const std::uint64_t owner = buffer.handle >> kDeviceShift;
  if (buffer.handle == 0)
    throw InvalidPointer(fmt::format("{} on {}: null device buffer", what, props_.name));
  if (owner != props_.index + 1)
    throw InvalidPointer(fmt::format("{} on {}: buffer #{:x} was not allocated on this device", what,
                                     props_.name, buffer.handle));
  throw InvalidPointer(fmt::format("{} on {}: buffer #{:x} ({}) was already freed", what, props_.name,
                                   buffer.handle, format_bytes(buffer.bytes)));
}

DeviceBuffer SimDevice::alloc(std::size_t bytes) {
  if (bytes == 0) throw InvalidArgument(fmt::format("cannot allocate 0 bytes on {}", props_.name));
  if (bounds_check_) return alloc_guarded(bytes);
  std::byte* p = nullptr;
  DeviceBuffer b;
  {
    std::lock_guard lock(alloc_mutex_);
    const auto offset = bytes <= heap_.capacity() ? heap_.allocate(bytes) : std::nullopt;
    if (!offset) {
      const std::string scattered = heap_.scattered_note(bytes);
      throw OutOfDeviceMemory(
          props_.name + (scattered.empty() ? " (HDSM_SIM_MEMORY sets its capacity)" : scattered), bytes,
          heap_.used(), heap_.capacity());
    }
    b = DeviceBuffer{next_id_++, bytes};
    allocations_.emplace(b.handle, Allocation{*offset, bytes, *offset, bytes});
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
  if (poison_)
    fill_poison(memory_.data() + a.offset, a.bytes);
  else if (a.bytes >= (std::size_t{1} << 20))
    memory_.release_pages(a.offset, a.bytes);
  if (bounds_check_) return release_guarded(a);
  std::lock_guard lock(alloc_mutex_);
  heap_.release(a.offset, a.bytes);
}

std::size_t SimDevice::memory_used() const {
  std::lock_guard lock(alloc_mutex_);
  return bounds_check_ ? guarded_used_ : heap_.used();
}

DeviceBuffer SimDevice::alloc_guarded(std::size_t bytes) {
  const std::size_t body = round_up(bytes, kGuardAlign);
  const std::size_t span = page_ + round_up(body, page_) + page_;
  std::unique_lock lock(alloc_mutex_);
  // Charged as the plain heap would charge it, so memory_used() reads the same with and without.
  const std::size_t charge = bytes <= capacity_ ? round_up(bytes, os::OffsetHeap::kDefaultAlignment) : 0;
  if (charge == 0 || charge > capacity_ - guarded_used_)
    throw OutOfDeviceMemory(props_.name + " (HDSM_SIM_MEMORY sets its capacity)", bytes, guarded_used_,
                            capacity_);
  const auto base = heap_.allocate(span);
  if (!base)
    throw OutOfDeviceMemory(
        props_.name + fmt::format(" (address space for the guard pages of HDSM_SIM_BOUNDS_CHECK "
                                  "is exhausted: {} buffers are live)",
                                  allocations_.size()),
        bytes, guarded_used_, capacity_);
  const std::size_t front = *base;
  const std::size_t back = *base + span - page_;
  const DeviceBuffer b{next_id_, bytes};
  try {
    set_guard(front, guard_entry(bytes, true), b);
    try {
      set_guard(back, guard_entry(bytes, false), b);
    } catch (...) {
      set_guard(front, 0, b);
      throw;
    }
  } catch (...) {
    heap_.release(*base, span);
    throw;
  }
  ++next_id_;
  allocations_.emplace(b.handle, Allocation{back - body, bytes, *base, span});
  guarded_used_ += charge;
  lock.unlock();
  if (poison_) fill_poison(memory_.data() + (back - body), bytes);
  return b;
}

void SimDevice::release_guarded(const Allocation& a) {
  const DeviceBuffer b{0, a.bytes};
  set_guard(a.heap_offset, 0, b);
  set_guard(a.heap_offset + a.heap_bytes - page_, 0, b);
  std::lock_guard lock(alloc_mutex_);
  heap_.release(a.heap_offset, a.heap_bytes);
  guarded_used_ -= round_up(a.bytes, os::OffsetHeap::kDefaultAlignment);
}

// owner != 0: make the page a guard of a `buffer` of that entry; 0: an ordinary page again.
void SimDevice::set_guard(std::size_t page_offset, std::uint64_t owner, DeviceBuffer buffer) {
  std::uint64_t& entry = reinterpret_cast<std::uint64_t*>(guard_owners_.data())[page_offset / page_];
  if (owner == 0) std::atomic_ref(entry).store(0, std::memory_order_release);
  if (::mprotect(memory_.data() + page_offset, page_, owner != 0 ? PROT_NONE : PROT_READ | PROT_WRITE) != 0)
    throw SystemError(owner != 0 ? "mprotect(PROT_NONE)" : "mprotect(PROT_READ|PROT_WRITE)",
                      fmt::format("guard page at offset {:#x} of the memory of {} ({}-byte buffer)",
                                  page_offset, props_.name, buffer.bytes),
                      errno);
  if (owner != 0) std::atomic_ref(entry).store(owner, std::memory_order_release);
}

// Runs inside the SIGSEGV handler: atomics and write(2) only. Never resolves the fault; it only says
// which kernel left which buffer before the process dies of the signal.
bool SimDevice::on_guard_fault(void* context, void* address, os::FaultAccess access) noexcept {
  namespace io = os::signal_safe;
  const auto* d = static_cast<const SimDevice*>(context);
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  const std::size_t offset = a - reinterpret_cast<std::uintptr_t>(d->memory_.data());
  const std::size_t page_offset = offset - offset % d->page_;
  std::uint64_t& slot = reinterpret_cast<std::uint64_t*>(d->guard_owners_.data())[offset / d->page_];
  const std::uint64_t entry = std::atomic_ref(slot).load(std::memory_order_acquire);
  if (entry == 0) return false;  // not a guard page: the dispatcher's own message names the address
  const std::size_t bytes = entry >> 1;
  const std::size_t body = round_up(bytes, kGuardAlign);
  // The object's first byte, from the guard page: the back guard starts where the rounded body ends.
  const std::size_t start =
      (entry & 1) != 0 ? page_offset + d->page_ + round_up(body, d->page_) - body : page_offset - body;
  const char* kernel = d->running_kernel_.load(std::memory_order_acquire);
  // Two of a kernel's threads can leave their buffer at once: one message (the dispatcher's follows).
  if (!os::claim_fatal_report()) return false;
  io::Line line;
  if (kernel != nullptr)
    line.str("hdsm: kernel '").str(kernel).str("' on ");
  else
    line.str("hdsm: code outside any kernel on ");
  line.str(d->props_.name.c_str())
      .str(access == os::FaultAccess::write  ? " wrote"
           : access == os::FaultAccess::read ? " read"
                                             : " accessed")
      .str(" device address ")
      .hex(a)
      .str(": offset ");
  if (offset < start)
    line.str("-").decimal(start - offset);
  else
    line.decimal(offset - start);
  line.str(" of a ")
      .decimal(bytes)
      .str(offset < start ? "-byte buffer, before the start" : "-byte buffer, past the end")
      .str(" (HDSM_SIM_BOUNDS_CHECK)\n")
      .write();
  return false;
}

void SimDevice::discard(DeviceBuffer buffer, std::size_t offset, std::size_t bytes) {
  std::byte* p = resolve(buffer, offset, bytes, "discard");
  if (poison_) fill_poison(p, bytes);
}

std::uint64_t SimDevice::address(DeviceBuffer buffer, std::size_t offset) const {
  // The same translation as a kernel's buffer arguments (SimQueue::launch).
  return reinterpret_cast<std::uintptr_t>(resolve(buffer, offset, 0, "address"));
}

std::byte* SimDevice::resolve(DeviceBuffer buffer, std::size_t offset, std::size_t bytes,
                              const char* what) const {
  if (std::byte* p = try_resolve(buffer, offset, bytes)) return p;
  // The slow path, for the message (the buffer may have come or gone since: look again).
  std::lock_guard lock(alloc_mutex_);
  const Allocation& a = find(buffer, what);
  if (offset > a.bytes || bytes > a.bytes - offset)
    throw InvalidArgument(fmt::format("{} of {} at offset {} runs past the end of {} buffer #{:x} ({} bytes)",
                                      what, format_bytes(bytes), offset, props_.name, buffer.handle,
                                      a.bytes));
  return memory_.data() + a.offset + offset;
}

std::byte* SimDevice::try_resolve(DeviceBuffer buffer, std::size_t offset, std::size_t bytes) const {
  std::lock_guard lock(alloc_mutex_);
  const auto it = allocations_.find(buffer.handle);
  if (it == allocations_.end() || offset > it->second.bytes || bytes > it->second.bytes - offset)
    return nullptr;
  return memory_.data() + it->second.offset + offset;
}

void* SimDevice::alloc_managed(std::size_t bytes) {
  if (bytes == 0) throw InvalidArgument(fmt::format("alloc_managed(0) on {}", name()));
  os::Mapping mapping;
  try {
    mapping = os::Mapping(bytes, fmt::format("managed memory of {}", name()));
  } catch (const SystemError& e) {
    // More address space than the process may have (alloc(SIZE_MAX - 1)): out of memory, as
    // cudaMallocManaged says and as every other memory model does.
    if (e.error_number() != ENOMEM) throw;
    throw OutOfDeviceMemory(fmt::format("{} (managed memory: {})", name(), e.what()), bytes, 0,
                            props_.memory_bytes);
  }
  void* p = mapping.data();
  std::lock_guard lock(alloc_mutex_);
  managed_.emplace(p, std::move(mapping));
  return p;
}

void SimDevice::free_managed(void* pointer) {
  os::Mapping gone;  // unmapped after the lock is released
  std::lock_guard lock(alloc_mutex_);
  const auto it = managed_.find(pointer);
  if (it == managed_.end())
    throw InvalidPointer(
        fmt::format("free_managed({}) on {}: not managed memory of this device", pointer, name()));
  gone = std::move(it->second);
  managed_.erase(it);
}

void SimDevice::prefetch(const void*, std::size_t, bool, Queue& queue) {
  if (&queue.device() != this)
    throw InvalidArgument(fmt::format("prefetch on {}: the queue is not one of this device", name()));
}

std::uint64_t SimDevice::map_host(void* pointer, std::size_t bytes) {
  if (bytes == 0)
    throw InvalidArgument(fmt::format("map_host({}, 0) on {}: nothing to map", pointer, name()));
  if (unmappable_)
    throw Unsupported(
        fmt::format("map_host({}, {} bytes) on {}: the device refuses host mappings "
                    "(HDSM_SIM_KIND=integrated-unmappable)",
                    pointer, bytes, name()));
  std::lock_guard lock(alloc_mutex_);
  const std::uint64_t handle = next_host_mapping_++;
  host_mapped_.emplace(handle, HostRange{static_cast<std::byte*>(pointer), bytes});
  return handle;
}

void SimDevice::unmap_host(std::uint64_t mapping) {
  std::lock_guard lock(alloc_mutex_);
  if (host_mapped_.erase(mapping) == 0)
    throw InvalidPointer(fmt::format("unmap_host({}) on {}: no such host mapping", mapping, name()));
}

KernelArg SimDevice::host_argument(std::uint64_t mapping, std::size_t offset) {
  std::lock_guard lock(alloc_mutex_);
  const auto& m = host_mapping_at(host_mapped_, mapping, offset, name());
  return KernelArg::value(static_cast<void*>(m.start + offset));
}

void SimDevice::hand_over(std::uint64_t, bool, Queue& queue) {
  if (&queue.device() != this)
    throw InvalidArgument(fmt::format("hand_over on {}: the queue is not one of this device", name()));
}

bool SimDevice::can_access_peer(const Device& other) const {
  const auto* o = dynamic_cast<const SimDevice*>(&other);
  return o != nullptr && o != this && &o->host_ == &host_ && props_.peer_group >= 0 &&
         props_.peer_group == o->props_.peer_group;
}

std::optional<KernelArg> SimDevice::peer_argument(const Device& home, DeviceBuffer buffer,
                                                  std::size_t offset) {
  if (!can_access_peer(home)) return std::nullopt;
  // Peers of one host share its address space: the kernel receives the pointer into home's memory.
  return KernelArg::value(home.address(buffer, offset));
}

Clock::time_point SimDevice::link_copy(Route route, DmaEngine& first, DmaEngine* second, void* dst,
                                       const void* src, std::size_t n, Clock::time_point ready) {
  Clock::time_point begin, end;
  auto copy = [&](Clock::time_point engines_free) {
    begin = Clock::now();
    std::memcpy(dst, src, n);
    const auto start = std::max(ready, engines_free);
    end = start + link_.duration(n);
    if (route != Route::peer) end = std::max(end, host_.bus().carry(start, n));
    hold_until(end);
    first.free_at = end;
    if (second != nullptr) second->free_at = end;
  };
  if (second != nullptr) {
    std::scoped_lock lock(first.busy, second->busy);
    copy(std::max(first.free_at, second->free_at));
  } else {
    std::lock_guard lock(first.busy);
    copy(first.free_at);
  }
  counters_.route(route).add(n);
  counters_.transfer_ns.fetch_add(
      static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(link_.duration(n)).count()),
      std::memory_order_relaxed);
  auto& tracer = services_.tracer;
  if (tracer.enabled()) {
    const auto done = Clock::now();
    const std::string label = fmt::format("{} {}", to_string(route), format_bytes(n));
    tracer.span(first.lane, label, begin, done, n);
    if (second != nullptr) tracer.span(second->lane, label, begin, done, n);
  }
  return end;
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

SimBackend::SimBackend(const SimOptions& options, DeviceServices services) : host_(options.host_bus_gbps) {
  for (unsigned i = 0; i < options.devices; ++i)
    devices_.push_back(std::make_unique<SimDevice>(i, options, host_, services));
}

SimBackend::~SimBackend() = default;

std::vector<Device*> SimBackend::devices() const {
  std::vector<Device*> out;
  out.reserve(devices_.size());
  for (const auto& d : devices_) out.push_back(d.get());
  return out;
}

SimOptions sim_options(const Config& config) {
  SimOptions o;
  o.devices = static_cast<unsigned>(config.integer("HDSM_SIM_DEVICES"));
  o.memory_bytes = config.size("HDSM_SIM_MEMORY");
  o.link_gbps = config.real("HDSM_SIM_LINK_GBPS");
  o.host_bus_gbps = config.real("HDSM_SIM_HOST_BUS_GBPS");
  o.latency_us = config.real("HDSM_SIM_LATENCY_US");
  o.poison = config.boolean("HDSM_SIM_POISON");
  o.threads = static_cast<unsigned>(config.integer("HDSM_SIM_THREADS"));
  o.fiber_stack_bytes = config.size("HDSM_FIBER_STACK");
  const std::string& kind = config.get("HDSM_SIM_KIND");
  o.kind = kind == "integrated" ? SimKind::integrated
           : kind == "discrete" ? SimKind::discrete
                                : SimKind::integrated_unmappable;
  const std::string& bounds = config.get("HDSM_SIM_BOUNDS_CHECK");
#ifdef NDEBUG
  constexpr bool debug_build = false;
#else
  constexpr bool debug_build = true;
#endif
  o.bounds_check = bounds == "auto" ? debug_build : bounds == "1" || bounds == "on";
  const std::string& peer = config.get("HDSM_SIM_PEER");
  try {
    o.peer_groups = parse_peer_groups(peer, o.devices);
  } catch (const InvalidArgument& e) {
    throw ConfigError(
        fmt::format("HDSM_SIM_PEER={} does not fit HDSM_SIM_DEVICES={}: {}", peer, o.devices, e.what()));
  }
  return o;
}

namespace {

// Always opened, first: the sim devices are indices 0.. of every runtime.
const bool registered = register_backend(
    {"sim", 0, [](const Config&) { return true; },
     [](DeviceServices services, const Config& config, unsigned) -> std::unique_ptr<DeviceBackend> {
       return std::make_unique<SimBackend>(sim_options(config), services);
     }});

}  // namespace

}  // namespace hdsm::sim
