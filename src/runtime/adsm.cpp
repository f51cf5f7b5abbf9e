// The public ADSM calls of a Runtime (alloc, free, call, sync) over its coherence::SharedSpace.
#include <hdsm/adsm.hpp>
#include <hdsm/error.hpp>

#include "obs/lock_wait.hpp"
#include "os/mapping.hpp"
#include "runtime/knobs.hpp"
#include "runtime/runtime_impl.hpp"
#include "runtime/shared_ranges.hpp"
#include "transfer/copy_engine.hpp"
#include "transfer/probe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iterator>
#include <optional>
#include <thread>
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
    case Use::in:
      return KernelUse::in;
    case Use::out:
      return KernelUse::out;
    case Use::inout:
      return KernelUse::inout;
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

// One entry per object, keyed by the object the pointer lies in; two ranges of it become the range
// that covers both.
void add_use(RuntimeImpl::Uses& uses, const coherence::Directory& directory,
             const coherence::ObjectUse& add) {
  constexpr std::size_t whole = coherence::ObjectUse::kWholeObject;
  const coherence::Object* object = directory.lookup(add.pointer).object;
  for (coherence::ObjectUse& u : uses)
    if (directory.lookup(u.pointer).object == object) {
      u.use = combine(u.use, add.use);
      if (u.bytes == whole || add.bytes == whole) {
        u.bytes = whole;
      } else {
        const auto* a = static_cast<const std::byte*>(u.pointer);
        const auto* b = static_cast<const std::byte*>(add.pointer);
        const auto* end = std::max(a + u.bytes, b + add.bytes);
        u.pointer = std::min(a, b);
        u.bytes = static_cast<std::size_t>(end - static_cast<const std::byte*>(u.pointer));
      }
      return;
    }
  uses.push_back(add);
}

// How call `kernel` uses the object its argument `index` points into; a range annotation must lie
// within that object and not be empty.
coherence::ObjectUse object_use(const CallArg& a, KernelUse use, const coherence::Directory& directory,
                                std::string_view kernel, std::size_t index) {
  if (a.kind != CallArg::Kind::annotated || a.bytes == CallArg::kWholeObject) return {a.pointer, use};
  const coherence::Directory::Hit hit = directory.lookup(a.pointer);
  if (hit.object == nullptr) return {a.pointer, use};  // freed meanwhile: the release names it
  const std::size_t start = hit.offset_in_object;
  const std::size_t size = hit.object->bytes;
  if (a.bytes == 0 || a.offset > size - start || a.bytes > size - start - a.offset)
    throw InvalidArgument(fmt::format(
        "call({}): argument {} ({}) is annotated with bytes [{}, {}) from it, which {} object #{} ({} bytes, "
        "the argument at byte {})",
        kernel, index, a.pointer, a.offset, a.offset + a.bytes,
        a.bytes == 0 ? "is an empty range of" : "leave", hit.object->id, size, start));
  // Release and acquire cover the whole object, and the bytes out of the range keep their values:
  // for them, a ranged out is an inout.
  return {static_cast<const std::byte*>(a.pointer) + a.offset, use == KernelUse::out ? KernelUse::inout : use,
          a.bytes};
}

}  // namespace

namespace {

/// The devices on which the calling thread has calls in flight, per runtime: its sync visits only
/// their call lists, so threads on different devices never take each other's locks. A stale entry
/// (a runtime gone, another at its address) only makes a sync look at a list with nothing of its.
struct ThreadCalls {
  const RuntimeImpl* runtime;
  std::vector<unsigned> devices;
};
thread_local std::vector<ThreadCalls> thread_calls;

}  // namespace

void note_call(const RuntimeImpl& runtime, unsigned device) {
  auto it = std::find_if(thread_calls.begin(), thread_calls.end(),
                         [&](const ThreadCalls& t) { return t.runtime == &runtime; });
  if (it == thread_calls.end()) it = thread_calls.insert(thread_calls.end(), ThreadCalls{&runtime, {}});
  if (std::find(it->devices.begin(), it->devices.end(), device) == it->devices.end())
    it->devices.push_back(device);
}

std::vector<unsigned> take_noted_calls(const RuntimeImpl& runtime) {
  const auto it = std::find_if(thread_calls.begin(), thread_calls.end(),
                               [&](const ThreadCalls& t) { return t.runtime == &runtime; });
  if (it == thread_calls.end()) return {};
  std::vector<unsigned> devices = std::move(it->devices);
  thread_calls.erase(it);
  return devices;
}

/// Whether call `c` may use the object `p` starts (its kernel or a copy of it); the object is dropped
/// from what the call's sync acquires.
bool forget_object(RuntimeImpl::Call& c, const coherence::Directory& directory, const void* p) {
  const coherence::Object* object = directory.lookup(p).object;
  bool uses = c.every_object && directory.arena().segment_of(p) == c.device;
  uses |=
      std::erase_if(c.uses, [&](const auto& u) { return directory.lookup(u.pointer).object == object; }) != 0;
  for (RuntimeImpl::Remote& r : c.remote)
    if (r.pointer != nullptr && directory.lookup(r.pointer).object == object) {
      r.pointer = nullptr;  // its temporary is still freed at the sync
      uses = true;
    }
  return uses;
}

obs::LockWaitSink RuntimeImpl::lock_sink() {
  return {&counters, tracer.enabled() ? &tracer : nullptr, "lock wait: device calls"};
}

coherence::SharedSpace& RuntimeImpl::shared_space() {
  if (coherence::SharedSpace* space = space_published_.load(std::memory_order_acquire)) return *space;
  std::lock_guard lock(space_mutex_);
  if (space_) return *space_;
  const auto kind = coherence::parse_protocol(config.get(knob_name(Knob::protocol)));
  const std::size_t block = checked_size(config, Knob::block_size, true);
  const coherence::SpaceTuning tuning{
      .segment_bytes = checked_size(config, Knob::arena_segment, false),
      .rolling_step = static_cast<unsigned>(config.integer(knob_name(Knob::rolling_step))),
      .read_ahead = static_cast<unsigned>(config.integer(knob_name(Knob::read_ahead))),
      .arena_keep_bytes = config.size(knob_name(Knob::arena_keep))};
  space_ =
      std::make_unique<coherence::SharedSpace>(devices, kind, block, counters, tuning, &tracer, copy_setup());
  const os::Arena& arena = space_->directory().arena();
  try {
    shared_ranges.add(reinterpret_cast<std::uintptr_t>(arena.user(0, 0)),
                      std::uintptr_t{arena.segments()} * arena.segment_bytes(), self);
  } catch (...) {
    space_.reset();
    throw;
  }
  space_published_.store(space_.get(), std::memory_order_release);
  return *space_;
}

coherence::SharedSpace::CopySetup RuntimeImpl::copy_setup() {
  coherence::SharedSpace::CopySetup setup;
  // The chunks are the staging pool's, so they are at most its chunk size.
  setup.options.chunk_bytes =
      std::min(config.size(knob_name(Knob::copy_chunk)), config.size(knob_name(Knob::staging_chunk)));
  setup.options.buffers = static_cast<unsigned>(config.integer(knob_name(Knob::copy_buffers)));
  setup.pool = [this]() -> StagingPool& { return staging(); };
  if (config.boolean(knob_name(Knob::copy_probe))) {
    constexpr std::size_t kProbeBytes = std::size_t{4} << 20;
    constexpr int kProbeCopies = 3;
    setup.topology =
        transfer::measured_topology(devices, transfer::stated_topology(devices), kProbeBytes, kProbeCopies);
  }
  return setup;
}

coherence::SharedSpace* RuntimeImpl::existing_space() {
  return space_published_.load(std::memory_order_acquire);
}

void RuntimeImpl::destroy_space() noexcept {
  std::lock_guard lock(space_mutex_);
  if (!space_) return;
  // Only the runtime's destructor gets here, once no call of the program can be running on it.
  space_published_.store(nullptr, std::memory_order_release);
  shared_ranges.remove(self);
  for (DeviceCalls& d : device_calls) {
    std::lock_guard lock(d.mutex);
    for (const Call& c : d.in_flight) {
      try {
        c.done.wait();
      } catch (const std::exception&) {  // nobody synced: the error goes with the space
      }
      for (const Remote& r : c.remote)
        if (r.temporary) space_->free_temporary(c.device, *r.temporary);
    }
    d.in_flight.clear();
  }
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
  // A kernel of any thread may still use the object: wait for the calls in flight that may, and drop
  // the object from what their syncs acquire.
  std::vector<Event> users;
  for (detail::RuntimeImpl::DeviceCalls& d : impl_->device_calls) {
    const auto lock = obs::lock_counting_wait(d.mutex, impl_->lock_sink());
    for (auto& c : d.in_flight)
      if (detail::forget_object(c, space->directory(), p)) users.push_back(c.done);
  }
  for (const Event& e : users) {
    try {
      e.wait();
    } catch (const std::exception&) {  // the kernel's error is the sync's to report
    }
  }
  space->free(p);
}

namespace {

/// The shared space `p` is in: nullptr for host memory; InvalidArgument for another runtime's.
coherence::SharedSpace* space_of(coherence::SharedSpace* mine, const void* p, const char* call) {
  if (mine != nullptr && mine->owns(p)) return mine;
  if (detail::arena_owner(p) != nullptr)
    throw InvalidArgument(
        fmt::format("{}: {} points into the shared memory of another hdsm::Runtime", call, p));
  return nullptr;
}

}  // namespace

namespace {

/// memmove and memcpy_async: waits for the copy, or with `pending` appends the events to wait for.
void copy_any(coherence::SharedSpace* space, void* dst, const void* src, std::size_t n,
              std::vector<Event>* pending, const char* call) {
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
    throw InvalidArgument(
        fmt::format("safe({}): it points into the shared memory of another hdsm::Runtime", p));
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
  std::vector<detail::UnifiedSpace::ManagedObject> used;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const detail::CallArg& a = args[i];
    kernel_args.push_back(a.kind == Kind::annotated ? KernelArg::value(a.pointer) : a.value);
    if (a.kind == Kind::value) continue;
    if (const auto o = space.find(a.pointer))
      used.push_back(*o);
    else if (a.kind == Kind::annotated)
      throw InvalidArgument(fmt::format("call({}): annotated argument {} ({}) is not a shared object",
                                        kernel.name, i, a.pointer));
  }
  const unsigned device = used.empty() ? static_cast<unsigned>(default_device) : used.front().device;
  space.call(device, kernel, launch, kernel_args, used);
}

}  // namespace

void Runtime::call_args(const Kernel& kernel, const Launch& launch, std::span<const detail::CallArg> args) {
  using Kind = detail::CallArg::Kind;
  using detail::RuntimeImpl;
  if (impl_->unified) return call_unified(*impl_->unified, impl_->default_device, kernel, launch, args);
  coherence::SharedSpace& space = impl_->shared_space();
  const coherence::Directory& directory = space.directory();
  const os::Arena& arena = directory.arena();
  const bool annotated = std::any_of(args.begin(), args.end(),
                                     [](const detail::CallArg& a) { return a.kind == Kind::annotated; });
  // The call runs on the device of its first shared-pointer argument.
  std::optional<unsigned> device;
  for (const detail::CallArg& a : args)
    if (a.kind != Kind::value && arena.contains(a.pointer)) {
      device = arena.segment_of(a.pointer);
      break;
    }
  const unsigned target = device.value_or(static_cast<unsigned>(impl_->default_device));
  RuntimeImpl::Call call{target, {}, {}, !annotated, {}, std::this_thread::get_id()};
  std::vector<KernelArg> kernel_args;
  std::vector<std::pair<std::size_t, std::size_t>> copied;  // (argument, entry of call.remote) of copies
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
    // In a call with annotations a raw pointer counts as what it says (inout, or in for a typed
    // kernel's const parameter); without any, every object is released and acquired.
    const coherence::KernelUse use = annotated ? detail::kernel_use(a.use) : coherence::KernelUse::unknown;
    if (d == target) {
      kernel_args.push_back(space.argument(a.pointer));
      if (annotated)
        detail::add_use(call.uses, directory, detail::object_use(a, use, directory, kernel.name, i));
      continue;
    }
    // Remote access (seed 003 §4.2): an object of a peer is passed as its device's address; otherwise
    // HDSM_REMOTE=copy passes a copy on the call's device.
    std::optional<KernelArg> peer = space.peer_argument(target, a.pointer);
    if (!peer && !impl_->remote_copy)
      throw Unsupported(fmt::format(
          "call({}): argument {} ({}) is in an object of device {} ({}), but the call runs on device {} "
          "({}), "
          "the device of its first shared-pointer argument, and kernels there cannot reach device {}'s "
          "memory "
          "(not peers); allocate the object on device {} or a peer of it, or set HDSM_REMOTE=copy to copy it "
          "there for the call",
          kernel.name, i, a.pointer, d, impl_->devices[d]->name(), target, impl_->devices[target]->name(), d,
          target));
    const coherence::Object* object = directory.lookup(a.pointer).object;
    auto same = std::find_if(call.remote.begin(), call.remote.end(), [&](const RuntimeImpl::Remote& r) {
      return directory.lookup(r.pointer).object == object;
    });
    if (same == call.remote.end()) {
      call.remote.push_back({a.pointer, d, use, std::nullopt});
      same = std::prev(call.remote.end());
    } else {
      same->use = detail::combine(same->use, use);
    }
    if (peer) {
      kernel_args.push_back(*peer);
    } else {
      copied.emplace_back(i, static_cast<std::size_t>(same - call.remote.begin()));
      kernel_args.push_back({});  // the temporary's, once it exists
    }
  }
  if (!copied.empty())
    for (std::size_t r = 0; r < call.remote.size(); ++r)
      if (std::any_of(copied.begin(), copied.end(), [&](const auto& c) { return c.second == r; }))
        call.remote[r].temporary.emplace();

  // Enqueue under the short locks of every device involved, taken in index order.
  std::vector<unsigned> involved{target};
  for (const RuntimeImpl::Remote& r : call.remote) involved.push_back(r.home);
  std::sort(involved.begin(), involved.end());
  involved.erase(std::unique(involved.begin(), involved.end()), involved.end());
  std::vector<std::unique_lock<std::mutex>> locks;
  for (unsigned d : involved)
    locks.push_back(obs::lock_counting_wait(impl_->device_calls[d].mutex, impl_->lock_sink()));

  // Remote objects are released on their own devices, as if the kernel ran there.
  for (unsigned home : involved) {
    if (home == target) continue;
    detail::RuntimeImpl::Uses at_home;
    for (const RuntimeImpl::Remote& r : call.remote)
      if (r.home == home) at_home.push_back({r.pointer, r.use});
    space.release(home, at_home);
  }
  std::vector<Event> copies_back;
  try {
    for (RuntimeImpl::Remote& r : call.remote) {
      if (r.temporary)
        r.temporary = space.copy_in(target, r.pointer);
      else
        space.order(target, r.home);  // the launch waits for the release on the object's device
    }
    for (const auto& [arg, r] : copied)
      kernel_args[arg] = space.argument(*call.remote[r].temporary, args[arg].pointer);
    if (call.every_object || !call.uses.empty()) space.release(target, call.uses);
    space.launch(target, kernel, launch, kernel_args);
    for (const RuntimeImpl::Remote& r : call.remote) {
      if (!r.temporary)
        space.order(r.home, target);  // later work on the object's device follows the kernel
      else if (r.use != coherence::KernelUse::in)
        copies_back.push_back(space.copy_back(target, *r.temporary, r.pointer));
    }
  } catch (...) {
    // The temporaries made so far go, once the copies into them are done.
    for (const RuntimeImpl::Remote& r : call.remote) {
      if (!r.temporary || !r.temporary->buffer) continue;
      try {
        space.record(target).wait();
      } catch (const std::exception&) {  // the error being thrown says what failed
      }
      space.free_temporary(target, *r.temporary);
    }
    throw;
  }
  copies_back.push_back(space.record(target));
  call.done = transfer::all_of(std::move(copies_back));
  impl_->device_calls[target].in_flight.push_back(std::move(call));
  detail::note_call(*impl_, target);
}

namespace {

/// What one sync acquires on one device: the objects its calls used there, after their kernels.
struct Acquire {
  unsigned device;
  bool every_object = false;
  detail::RuntimeImpl::Uses uses;
  std::vector<Event> after;
};

Acquire& acquire_on(std::vector<Acquire>& acquires, unsigned device) {
  auto it =
      std::find_if(acquires.begin(), acquires.end(), [&](const Acquire& a) { return a.device == device; });
  if (it != acquires.end()) return *it;
  return acquires.emplace_back(Acquire{device, false, {}, {}});
}

}  // namespace

void Runtime::sync() {
  if (impl_->unified) return impl_->unified->sync();
  using detail::RuntimeImpl;
  // The calls this thread made (release consistency: a thread acquires what it released).
  const std::thread::id me = std::this_thread::get_id();
  std::vector<RuntimeImpl::Call> calls;
  for (const unsigned device : detail::take_noted_calls(*impl_)) {
    if (device >= impl_->device_calls.size()) continue;
    RuntimeImpl::DeviceCalls& d = impl_->device_calls[device];
    const auto lock = obs::lock_counting_wait(d.mutex, impl_->lock_sink());
    auto mine = std::stable_partition(d.in_flight.begin(), d.in_flight.end(),
                                      [&](const RuntimeImpl::Call& c) { return c.thread != me; });
    std::move(mine, d.in_flight.end(), std::back_inserter(calls));
    d.in_flight.erase(mine, d.in_flight.end());
  }
  if (calls.empty()) return;
  coherence::SharedSpace& space = impl_->shared_space();
  // One acquire per device, in the order of the devices' first calls, after the kernels of the calls
  // that used its objects; an unannotated call makes its device's acquire cover every object. Remote
  // objects are acquired on their own devices.
  std::vector<Acquire> acquires;
  for (const RuntimeImpl::Call& c : calls) {
    Acquire& a = acquire_on(acquires, c.device);
    a.every_object |= c.every_object;
    for (const coherence::ObjectUse& u : c.uses) detail::add_use(a.uses, space.directory(), u);
    a.after.push_back(c.done);
    for (const RuntimeImpl::Remote& r : c.remote) {
      if (r.pointer == nullptr) continue;  // freed since
      Acquire& home = acquire_on(acquires, r.home);
      detail::add_use(home.uses, space.directory(), {r.pointer, r.use});
      home.after.push_back(c.done);
    }
  }
  std::exception_ptr first_error;
  for (Acquire& a : acquires) {
    try {
      const Event after = transfer::all_of(std::move(a.after));
      if (a.every_object || !a.uses.empty()) {
        if (a.every_object) a.uses.clear();
        space.acquire(a.device, a.uses, &after);
      } else {
        after.wait();
      }
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  for (const RuntimeImpl::Call& c : calls)
    for (const RuntimeImpl::Remote& r : c.remote) {
      if (!r.temporary) continue;
      try {
        c.done.wait();
      } catch (const std::exception&) {  // reported by the acquire above
      }
      space.free_temporary(c.device, *r.temporary);
    }
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace hdsm
