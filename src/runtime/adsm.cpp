// The public ADSM calls of a Runtime (alloc, free, call, sync) over its coherence::SharedSpace.
#include <hdsm/adsm.hpp>
#include <hdsm/error.hpp>

#include "os/mapping.hpp"
#include "runtime/knobs.hpp"
#include "runtime/runtime_impl.hpp"
#include "runtime/shared_ranges.hpp"
#include "transfer/probe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <unordered_map>

namespace hdsm {
namespace detail {
namespace {

using coherence::KernelUse;

/// The runtime whose shared memory holds p (nullptr: host memory), so that a pointer of another
/// runtime is told apart from a plain host pointer.
const Runtime* arena_owner(const void* p) { return shared_ranges.owner(p); }

std::size_t checked_size(const Config& config, Knob knob, bool page_multiple) {
  const std::size_t bytes = config.size(knob_name(knob));
  const std::size_t page = os::page_size();
  if (!std::has_single_bit(bytes) || (page_multiple && bytes % page != 0))
    throw ConfigError(
        fmt::format("{}={} is invalid: not a power of two{}", knob_name(knob), bytes,
                    page_multiple ? fmt::format(" multiple of the page size ({} bytes)", page) : ""));
  return bytes;
}

KernelUse kernel_use(Use use) {
  switch (use) {
    case Use::in: return KernelUse::in;
    case Use::out: return KernelUse::out;
    case Use::inout: return KernelUse::inout;
  }
  return KernelUse::inout;
}

// Two uses of one object in the same call (or in calls merged at the sync).
KernelUse combine(KernelUse a, KernelUse b) {
  if (a == KernelUse::unknown || b == KernelUse::unknown) return KernelUse::unknown;
  if (a == KernelUse::none) return b;
  if (b == KernelUse::none) return a;
  return a == b ? a : KernelUse::inout;
}

// One entry per object, keyed by the object the pointer lies in.
void add_use(RuntimeImpl::Uses& uses, const coherence::Directory& directory, const void* p, KernelUse use) {
  const coherence::Object* object = directory.lookup(p).object;
  for (auto& [q, u] : uses)
    if (directory.lookup(q).object == object) {
      u = combine(u, use);
      return;
    }
  uses.emplace_back(p, use);
}

}  // namespace

coherence::SharedSpace& RuntimeImpl::shared_space() {
  std::lock_guard lock(space_mutex_);
  if (space_) return *space_;
  const auto kind = coherence::parse_protocol(config.get(knob_name(Knob::protocol)));
  const std::size_t block = checked_size(config, Knob::block_size, true);
  const std::size_t segment = checked_size(config, Knob::arena_segment, false);
  const auto step = static_cast<unsigned>(config.integer(knob_name(Knob::rolling_step)));
  space_ = std::make_unique<coherence::SharedSpace>(devices, kind, block, counters, segment, step, &tracer,
                                                    copy_setup());
  const os::Arena& arena = space_->directory().arena();
  try {
    shared_ranges.add(reinterpret_cast<std::uintptr_t>(arena.user(0, 0)),
                      std::uintptr_t{arena.segments()} * arena.segment_bytes(), self);
  } catch (...) {
    space_.reset();
    throw;
  }
  return *space_;
}

coherence::SharedSpace::CopySetup RuntimeImpl::copy_setup() {
  coherence::SharedSpace::CopySetup setup;
  // The chunks are the staging pool's, so they are at most its chunk size.
  setup.options.chunk_bytes = std::min(config.size(knob_name(Knob::copy_chunk)), config.size(knob_name(Knob::staging_chunk)));
  setup.options.buffers = static_cast<unsigned>(config.integer(knob_name(Knob::copy_buffers)));
  setup.pool = [this]() -> StagingPool& { return staging(); };
  if (config.boolean(knob_name(Knob::copy_probe))) {
    constexpr std::size_t kProbeBytes = std::size_t{4} << 20;
    constexpr int kProbeCopies = 3;
    setup.topology = transfer::measured_topology(devices, transfer::stated_topology(devices), kProbeBytes, kProbeCopies);
  }
  return setup;
}

coherence::SharedSpace* RuntimeImpl::existing_space() {
  std::lock_guard lock(space_mutex_);
  return space_.get();
}

void RuntimeImpl::destroy_space() noexcept {
  std::lock_guard lock(space_mutex_);
  if (!space_) return;
  shared_ranges.remove(self);
  in_flight.clear();
  space_.reset();
}

}  // namespace detail

void* Runtime::alloc(std::size_t bytes, int device) {
  const std::size_t index = device < 0 ? impl_->default_device : static_cast<std::size_t>(device);
  if (index >= impl_->devices.size())
    throw InvalidArgument(fmt::format("alloc({}, device {}): this runtime has {} devices",
                                      format_bytes(bytes), device, impl_->devices.size()));
  if (impl_->unified) return impl_->unified->alloc(bytes, static_cast<unsigned>(index));
  return impl_->shared_space().alloc(bytes, static_cast<unsigned>(index));
}

void Runtime::free(void* p) {
  if (p == nullptr) return;
  if (impl_->unified) return impl_->unified->free(p);
  coherence::SharedSpace* space = impl_->existing_space();
  if (space == nullptr || !space->directory().arena().contains(p)) {
    const bool foreign = detail::arena_owner(p) != nullptr;
    throw InvalidPointer(fmt::format("free({}): not a shared object of this runtime{}", p,
                                     foreign ? " (it belongs to another hdsm::Runtime)" : ""));
  }
  // A kernel may still use the object: finish the calls in flight on its device first.
  const unsigned device = space->directory().arena().segment_of(p);
  bool busy = false;
  {
    std::lock_guard lock(impl_->calls_mutex);
    for (const auto& c : impl_->in_flight) busy |= c.device == device;
  }
  if (busy) sync();
  space->free(p);
}

namespace {

/// The shared space `p` is in: nullptr for host memory; InvalidArgument for another runtime's.
coherence::SharedSpace* space_of(coherence::SharedSpace* mine, const void* p, const char* call) {
  if (mine != nullptr && mine->owns(p)) return mine;
  if (detail::arena_owner(p) != nullptr)
    throw InvalidArgument(fmt::format("{}: {} points into the shared memory of another hdsm::Runtime", call, p));
  return nullptr;
}

}  // namespace

namespace {

/// memmove and memcpy_async: waits for the copy, or with `pending` appends the events to wait for.
void copy_any(coherence::SharedSpace* space, void* dst, const void* src, std::size_t n, std::vector<Event>* pending,
              const char* call) {
  coherence::SharedSpace* to = space_of(space, dst, call);
  coherence::SharedSpace* from = space_of(space, src, call);
  if (to != nullptr && from != nullptr)
    space->copy(dst, src, n, pending);
  else if (to != nullptr)
    space->write(dst, src, n, pending);
  else if (from != nullptr)
    space->read(dst, src, n, pending);
  else
    std::memmove(dst, src, n);
}

}  // namespace

void* Runtime::memmove(void* dst, const void* src, std::size_t n) {
  if (n != 0) copy_any(impl_->existing_space(), dst, src, n, nullptr, "memmove");
  return dst;
}

void* Runtime::memcpy(void* dst, const void* src, std::size_t n) { return memmove(dst, src, n); }

Event Runtime::memcpy_async(void* dst, const void* src, std::size_t n) {
  std::vector<Event> pending;
  if (n != 0) copy_any(impl_->existing_space(), dst, src, n, &pending, "memcpy_async");
  return transfer::all_of(std::move(pending));
}

void* Runtime::memset(void* dst, int value, std::size_t n) {
  if (n == 0) return dst;
  coherence::SharedSpace* space = space_of(impl_->existing_space(), dst, "memset");
  if (space != nullptr)
    space->fill(dst, static_cast<std::uint8_t>(value), n);
  else
    std::memset(dst, value, n);
  return dst;
}

void* Runtime::safe_alloc(std::size_t bytes, int device) { return alloc(bytes, device); }

void* Runtime::safe(const void* p) const {
  if (impl_->unified) {  // unified memory has one address for the CPU and the device
    if (!impl_->unified->find(p))
      throw InvalidArgument(fmt::format("safe({}): not in a shared object of this runtime", p));
    return const_cast<void*>(p);
  }
  coherence::SharedSpace* space = impl_->existing_space();
  const bool mine = space != nullptr && space->directory().arena().contains(p);
  if (!mine && detail::arena_owner(p) != nullptr)
    throw InvalidArgument(fmt::format("safe({}): it points into the shared memory of another hdsm::Runtime", p));
  if (space == nullptr)
    throw InvalidArgument(fmt::format("safe({}): not in a shared object (this runtime has none yet)", p));
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(space->device_address(p)));
}

namespace {

/// call under HDSM_PROTOCOL=um: pointers go to the kernel as they are; the call runs on the device
/// of its first shared object (managed memory is reachable from every device).
void call_unified(detail::UnifiedSpace& space, std::size_t default_device, const Kernel& kernel,
                  const Launch& launch, std::span<const detail::CallArg> args) {
  using Kind = detail::CallArg::Kind;
  std::vector<KernelArg> kernel_args;
  std::vector<detail::UnifiedSpace::Object> used;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const detail::CallArg& a = args[i];
    kernel_args.push_back(a.kind == Kind::annotated ? KernelArg::value(a.pointer) : a.value);
    if (a.kind == Kind::value) continue;
    if (const auto o = space.find(a.pointer))
      used.push_back(*o);
    else if (a.kind == Kind::annotated)
      throw InvalidArgument(
          fmt::format("call({}): annotated argument {} ({}) is not a shared object", kernel.name, i, a.pointer));
  }
  const unsigned device = used.empty() ? static_cast<unsigned>(default_device) : used.front().device;
  space.call(device, kernel, launch, kernel_args, used);
}

}  // namespace

void Runtime::call_args(const Kernel& kernel, const Launch& launch, std::span<const detail::CallArg> args) {
  using Kind = detail::CallArg::Kind;
  if (impl_->unified) return call_unified(*impl_->unified, impl_->default_device, kernel, launch, args);
  coherence::SharedSpace& space = impl_->shared_space();
  const coherence::Directory& directory = space.directory();
  const os::Arena& arena = directory.arena();
  const bool annotated = std::any_of(args.begin(), args.end(),
                                     [](const detail::CallArg& a) { return a.kind == Kind::annotated; });
  std::optional<unsigned> device;
  std::vector<KernelArg> kernel_args;
  detail::RuntimeImpl::Uses uses;
  kernel_args.reserve(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    const detail::CallArg& a = args[i];
    if (a.kind == Kind::value) {
      kernel_args.push_back(a.value);
      continue;
    }
    if (!arena.contains(a.pointer)) {
      if (detail::arena_owner(a.pointer) != nullptr)
        throw InvalidArgument(
            fmt::format("call({}): argument {} ({}) points into the shared memory of another "
                        "hdsm::Runtime",
                        kernel.name, i, a.pointer));
      if (a.kind == Kind::annotated)
        throw InvalidArgument(fmt::format("call({}): annotated argument {} ({}) is not a shared object",
                                          kernel.name, i, a.pointer));
      kernel_args.push_back(a.value);
      continue;
    }
    const unsigned d = arena.segment_of(a.pointer);
    if (!device) device = d;
    if (d != *device)
      throw Unsupported(
          fmt::format("call({}): argument {} lives on device {} but the call runs on device {}; "
                      "remote access arrives with the multi-device issue",
                      kernel.name, i, d, *device));
    kernel_args.push_back(space.argument(a.pointer));
    if (annotated)
      detail::add_use(uses, directory, a.pointer,
                      a.kind == Kind::annotated ? detail::kernel_use(a.use) : coherence::KernelUse::inout);
  }
  const unsigned target = device.value_or(static_cast<unsigned>(impl_->default_device));
  std::lock_guard lock(impl_->calls_mutex);
  space.release(target, uses);
  space.launch(target, kernel, launch, kernel_args);
  impl_->in_flight.push_back({target, std::move(uses)});
}

void Runtime::sync() {
  if (impl_->unified) return impl_->unified->sync();
  std::vector<detail::RuntimeImpl::Call> calls;
  {
    std::lock_guard lock(impl_->calls_mutex);
    calls.swap(impl_->in_flight);
  }
  if (calls.empty()) return;
  coherence::SharedSpace& space = impl_->shared_space();
  // One acquire per device, in the order of the devices' first calls; an unannotated call makes the
  // device's acquire cover every object.
  std::vector<detail::RuntimeImpl::Call> merged;
  for (auto& c : calls) {
    auto it = std::find_if(merged.begin(), merged.end(), [&](const auto& m) { return m.device == c.device; });
    if (it == merged.end()) {
      merged.push_back(std::move(c));
      continue;
    }
    if (it->uses.empty() || c.uses.empty()) {
      it->uses.clear();
      continue;
    }
    for (const auto& [p, use] : c.uses) detail::add_use(it->uses, space.directory(), p, use);
  }
  std::exception_ptr first_error;
  for (const auto& c : merged) {
    try {
      space.acquire(c.device, c.uses);
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace hdsm
