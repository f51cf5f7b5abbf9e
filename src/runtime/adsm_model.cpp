// The ADSM model's objects: the shared space (made on first use), alloc, free, device addresses and
// bulk memory. Calls are in call_plan.cpp, syncs in adsm_sync.cpp.
#include "runtime/adsm_model.hpp"

#include <hdsm/error.hpp>

#include "obs/lock_wait.hpp"
#include "os/mapping.hpp"
#include "runtime/direct_objects.hpp"
#include "runtime/knobs.hpp"
#include "runtime/runtime_impl.hpp"
#include "runtime/shared_ranges.hpp"
#include "transfer/copy_engine.hpp"
#include "transfer/probe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <exception>

namespace hdsm::detail {
namespace {

using coherence::KernelUse;

std::size_t checked_size(const Config& config, Knob knob, bool page_multiple) {
  const std::size_t bytes = config.size(knob_name(knob));
  const std::size_t page = os::page_size();
  if (!std::has_single_bit(bytes) || (page_multiple && bytes % page != 0))
    throw ConfigError(
        fmt::format("{}={} is invalid: not a power of two{}", knob_name(knob), bytes,
                    page_multiple ? fmt::format(" multiple of the page size ({} bytes)", page) : ""));
  return bytes;
}

/// Whether call `c` may use the object `p` starts (its kernel or a copy of it); the object is dropped
/// from what the call's sync acquires.
bool forget_object(AdsmModel::Call& c, const coherence::Directory& directory, const void* p) {
  const coherence::Object* object = directory.lookup(p).object;
  bool uses = c.every_object && directory.arena().segment_of(p) == c.device;
  uses |=
      std::erase_if(c.uses, [&](const auto& u) { return directory.lookup(u.pointer).object == object; }) != 0;
  for (RemoteObject& r : c.remote)
    if (r.pointer != nullptr && directory.lookup(r.pointer).object == object) {
      r.pointer = nullptr;  // its temporary is still freed at the sync
      uses = true;
    }
  return uses;
}

}  // namespace

KernelUse combine(KernelUse a, KernelUse b) {
  if (a == KernelUse::unknown || b == KernelUse::unknown) return KernelUse::unknown;
  if (a == KernelUse::none) return b;
  if (b == KernelUse::none) return a;
  return a == b ? a : KernelUse::inout;
}

void add_use(Uses& uses, const coherence::Directory& directory, const coherence::ObjectUse& add) {
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

AdsmModel::AdsmModel(RuntimeImpl& runtime)
    : rt_(runtime), remote_copy_(runtime.config.get(knob_name(Knob::remote)) == "copy"), device_calls_() {
  for (unsigned d = 0; d < runtime.devices.size(); ++d) device_calls_.emplace_back(d);
  note_model_alive(*this);
}

AdsmModel::~AdsmModel() {
  note_model_gone(*this);  // after a thread that is ending has synced its calls on it
  std::lock_guard lock(space_mutex_);
  if (!space_) return;
  // Only the runtime's destructor gets here, once no call of the program can be running on it.
  space_published_.store(nullptr, std::memory_order_release);
  shared_ranges.remove(rt_.self);
  for (DeviceCalls& d : device_calls_) {
    std::lock_guard calls(d.mutex);
    for (const Call& c : d.in_flight) {
      try {
        c.done.wait();
      } catch (const std::exception&) {  // nobody synced: the error goes with the space
      }
      for (const RemoteObject& r : c.remote)
        if (r.temporary) space_->free_temporary(c.device, *r.temporary);
    }
    d.in_flight.clear();
    d.tallies.clear();
  }
  space_.reset();
}

coherence::SharedSpace& AdsmModel::shared_space() {
  if (coherence::SharedSpace* space = space_published_.load(std::memory_order_acquire)) return *space;
  std::lock_guard lock(space_mutex_);
  if (space_) return *space_;
  const Config& config = rt_.config;
  const std::string& protocol = config.get(knob_name(Knob::protocol));
  const auto kind = coherence::parse_protocol(
      protocol == "batch" || protocol == "lazy" ? std::string_view(protocol) : std::string_view("rolling"));
  const std::size_t block = checked_size(config, Knob::block_size, true);
  const coherence::SpaceTuning tuning{
      .segment_bytes = checked_size(config, Knob::arena_segment, false),
      .rolling_step = static_cast<unsigned>(config.integer(knob_name(Knob::rolling_step))),
      .read_ahead = static_cast<unsigned>(config.integer(knob_name(Knob::read_ahead))),
      .arena_keep_bytes = config.size(knob_name(Knob::arena_keep)),
      .sync_prefetch_bytes = config.size(knob_name(Knob::sync_prefetch))};
  space_ = std::make_unique<coherence::SharedSpace>(rt_.devices, kind, block, rt_.counters, tuning,
                                                    &rt_.tracer, copy_setup());
  const os::Arena& arena = space_->directory().arena();
  try {
    shared_ranges.add(reinterpret_cast<std::uintptr_t>(arena.user(0, 0)),
                      std::uintptr_t{arena.segments()} * arena.segment_bytes(), rt_.self);
  } catch (...) {
    space_.reset();
    throw;
  }
  space_published_.store(space_.get(), std::memory_order_release);
  return *space_;
}

coherence::SharedSpace::CopySetup AdsmModel::copy_setup() {
  const Config& config = rt_.config;
  coherence::SharedSpace::CopySetup setup;
  // The chunks are the staging pool's, so they are at most its chunk size.
  setup.options.chunk_bytes =
      std::min(config.size(knob_name(Knob::copy_chunk)), config.size(knob_name(Knob::staging_chunk)));
  setup.options.buffers = static_cast<unsigned>(config.integer(knob_name(Knob::copy_buffers)));
  setup.pool = [this]() -> StagingPool& { return rt_.staging(); };
  if (config.boolean(knob_name(Knob::copy_probe))) {
    constexpr std::size_t kProbeBytes = std::size_t{4} << 20;
    constexpr int kProbeCopies = 3;
    setup.topology = transfer::measured_topology(rt_.devices, transfer::stated_topology(rt_.devices),
                                                 kProbeBytes, kProbeCopies);
  }
  return setup;
}

void* AdsmModel::alloc(std::size_t bytes, unsigned device) { return shared_space().alloc(bytes, device); }

void AdsmModel::free(void* p) {
  coherence::SharedSpace* s = space();
  if (s == nullptr || !s->directory().arena().contains(p)) {
    const bool foreign = foreign_owner(p, 0, rt_.self) != nullptr;
    throw InvalidPointer(fmt::format("free({}): not a shared object of this runtime{}", p,
                                     foreign ? " (it belongs to another hdsm::Runtime)" : ""));
  }
  // A kernel of any thread may still use the object: wait for the calls in flight that may, and drop
  // the object from what their syncs acquire. Not for a pointer that starts no object (an interior
  // one): the calls would no longer acquire the object it points into.
  s->check_free(p);
  std::vector<Event> users;
  for (DeviceCalls& d : device_calls_) {
    const auto lock = obs::lock_counting_wait(d.mutex, rt_.lock_sink());
    for (auto& c : d.in_flight)
      if (forget_object(c, s->directory(), p)) users.push_back(c.done);
  }
  for (const Event& e : users) {
    try {
      e.wait();
    } catch (const std::exception&) {  // the kernel's error is the sync's to report
    }
  }
  s->free(p);
}

void* AdsmModel::device_address(const void* p) const {
  coherence::SharedSpace* s = space_published_.load(std::memory_order_acquire);
  const bool mine = s != nullptr && s->directory().arena().contains(p);
  if (!mine && foreign_owner(p, 0, rt_.self) != nullptr)
    throw InvalidArgument(
        fmt::format("safe({}): it points into the shared memory of another hdsm::Runtime", p));
  if (s == nullptr)
    throw InvalidArgument(fmt::format("safe({}): not in a shared object (this runtime has none yet)", p));
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(s->device_address(p)));
}

coherence::SharedSpace* AdsmModel::space_of(const void* p, const char* call) const {
  coherence::SharedSpace* s = space_published_.load(std::memory_order_acquire);
  if (s != nullptr && s->owns(p)) return s;
  if (foreign_owner(p, 0, rt_.self) != nullptr)
    throw InvalidArgument(
        fmt::format("{}: {} points into the shared memory of another hdsm::Runtime", call, p));
  return nullptr;
}

bool AdsmModel::mediates(const void* p) const {
  coherence::SharedSpace* s = space_published_.load(std::memory_order_acquire);
  return s != nullptr && s->owns(p);
}

void AdsmModel::check(const void* p, std::size_t n, const char* call) const {
  if (coherence::SharedSpace* s = space_published_.load(std::memory_order_acquire)) s->check(p, n, call);
}

void AdsmModel::copy(void* dst, const void* src, std::size_t n, std::vector<Event>* pending) {
  const char* call = pending != nullptr ? "memcpy_async" : "memmove";
  coherence::SharedSpace* to = space_of(dst, call);
  coherence::SharedSpace* from = space_of(src, call);
  if (to != nullptr && from != nullptr)
    to->copy(dst, src, n, pending);
  else if (to != nullptr)
    to->write(dst, src, n, pending);
  else if (from != nullptr)
    from->read(dst, src, n, pending);
  else
    std::memmove(dst, src, n);
}

void AdsmModel::fill(void* dst, std::uint8_t value, std::size_t n) {
  if (coherence::SharedSpace* s = space_of(dst, "memset"))
    s->fill(dst, value, n);
  else
    std::memset(dst, value, n);
}

}  // namespace hdsm::detail
