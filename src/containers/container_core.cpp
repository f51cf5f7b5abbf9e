// The containers' executor: a container's CopySet decides what to copy (coherence/copy_set.hpp), this
// file makes it happen with the copy engine on per-device queues, allocates device copies (evicting
// the least recently used copies of any container of the runtime when a device is full, after writing
// back what only they hold), and tracks the device work in flight on each container so that host
// accesses wait only for the work they conflict with.
//
// One mutex per runtime guards every container's bookkeeping: eviction reaches across containers, and
// the bookkeeping is short (copies and kernels are enqueued, not waited for, except write-backs to the
// main copy, which a host access needs anyway).
#include <hdsm/container.hpp>
#include <hdsm/error.hpp>

#include "coherence/copy_set.hpp"
#include "runtime/internal.hpp"
#include "runtime/knobs.hpp"
#include "runtime/runtime_impl.hpp"
#include "transfer/copy_engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <new>

namespace hdsm::detail {
namespace {

using coherence::CopyId;
using coherence::ElementRange;
using coherence::kMainCopy;

/// What the containers of one runtime share: queues, a copy engine, the LRU clock and the list of
/// containers for eviction.
struct Shared {
  explicit Shared(const Runtime& runtime) : impl(impl_of(runtime)) {
    const Config& config = impl.config;
    mechanism = config.get(knob_name(Knob::container_mechanism)) == "initial" ? Mechanism::initial
                                                                              : Mechanism::improved;
    const auto n = static_cast<unsigned>(impl.devices.size());
    peer.assign(std::size_t{n} * n, 0);
    for (unsigned a = 0; a < n; ++a) {
      queues.push_back(impl.devices[a]->create_queue());
      for (unsigned b = 0; b < n; ++b)
        peer[std::size_t{a} * n + b] = a != b && impl.devices[a]->can_access_peer(*impl.devices[b]) ? 1 : 0;
    }
    transfer::Options options;
    options.chunk_bytes =
        std::min(config.size(knob_name(Knob::copy_chunk)), config.size(knob_name(Knob::staging_chunk)));
    options.buffers = static_cast<unsigned>(config.integer(knob_name(Knob::copy_buffers)));
    engine = std::make_unique<transfer::CopyEngine>(
        impl.devices, transfer::stated_topology(impl.devices), options,
        [this]() -> StagingPool& { return impl.staging(); }, &impl.counters, &impl.tracer);
  }
  ~Shared() {
    for (auto& q : queues) q->synchronize();
  }

  RuntimeImpl& impl;
  std::mutex mutex;
  Mechanism mechanism;
  std::vector<std::unique_ptr<Queue>> queues;
  std::vector<std::uint8_t> peer;
  std::unique_ptr<transfer::CopyEngine> engine;
  std::uint64_t clock = 0;
  std::vector<ContainerCore::State*> containers;
  ContainerStats totals;
};

Shared& shared_of(const Runtime& runtime) {
  return attachment<Shared>(runtime, "hdsm.containers", [&] { return std::make_shared<Shared>(runtime); });
}

}  // namespace

/// Device work on a container that has not completed: which elements and copy it uses, and how.
struct InFlight {
  Event done;
  ElementRange range;
  bool reads_main = false;  // a copy out of the main copy's elements
  bool reads = false;       // a kernel that reads the elements
  bool writes = false;      // a kernel that writes the elements
  CopyId copy = kMainCopy;  // the device copy it uses (not evicted until done)
};

struct ContainerCore::State {
  State(Shared& shared, ContainerCore& core, Mechanism m)
      : shared(shared), core(core), set(m, core.elements_, core.row_length_) {
    set.set_peers(static_cast<unsigned>(shared.queues.size()), shared.peer);
  }

  Shared& shared;
  ContainerCore& core;
  coherence::CopySet set;
  std::vector<InFlight> in_flight;
  std::vector<std::uint32_t> pins;  // by copy id: device accesses begun and not ended
  ContainerStats stats;

  void prune() {
    std::erase_if(in_flight, [](const InFlight& f) { return f.done.query(); });
  }
  bool busy(CopyId id) const {
    return std::any_of(in_flight.begin(), in_flight.end(), [&](const InFlight& f) { return f.copy == id; });
  }
  bool pinned(CopyId id) const { return id < pins.size() && pins[id] > 0; }

  /// A host access waits for the work that writes what it reads, or reads or writes what it writes.
  void wait_for(ElementRange range, Access mode) {
    for (const InFlight& f : in_flight) {
      const bool overlap = f.range.first < range.last && range.first < f.range.last;
      if (overlap && (f.writes || (mode != Access::read && (f.reads || f.reads_main)))) f.done.wait();
    }
    prune();
  }
  /// A write-back into the main copy waits for the copies still reading those elements out of it.
  void wait_for_main_readers(ElementRange range) {
    for (const InFlight& f : in_flight)
      if (f.reads_main && f.range.first < range.last && range.first < f.range.last) f.done.wait();
  }
  void wait_for_copy(CopyId id) {
    for (const InFlight& f : in_flight)
      if (f.copy == id) f.done.wait();
    prune();
  }

  transfer::CopyEnd end_of(CopyId id, std::size_t element) {
    const std::size_t es = core.element_size_;
    if (id == kMainCopy) return transfer::CopyEnd::host_memory(core.host_ + element * es);
    const coherence::DeviceCopy& c = set.copy(id);
    return transfer::CopyEnd::device_memory(*shared.impl.devices[c.device], c.buffer,
                                            c.extent.local(element) * es, *shared.queues[c.device]);
  }

  void count(std::uint64_t ContainerStats::*field, std::uint64_t bytes) {
    stats.*field += bytes;
    shared.totals.*field += bytes;
  }

  /// Runs a plan: write-backs first, waited for (the main copy is read next, by the host or by copies
  /// to devices), then the copies to devices, recorded as in flight; then frees released copies.
  void execute(const coherence::RangePlan& plan) {
    if (plan.empty()) return;
    std::vector<Event> backs;
    CopyId last_written_back = kMainCopy;
    for (const coherence::RangeCopy& c : plan.copies) {
      if (c.to != kMainCopy) continue;
      wait_for_main_readers(c.range);
      backs.push_back(start(c));
      if (c.from != last_written_back) {
        ++stats.write_backs;
        ++shared.totals.write_backs;
        last_written_back = c.from;
      }
    }
    for (const Event& e : backs) e.wait();
    for (const coherence::RangeCopy& c : plan.copies) {
      if (c.to == kMainCopy) continue;
      const Event done = start(c);
      if (done.query()) continue;
      in_flight.push_back({done, c.range, c.from == kMainCopy, false, false, c.from});
      in_flight.push_back({done, c.range, false, false, false, c.to});
    }
    for (CopyId id : plan.released) release(id);
  }

  Event start(const coherence::RangeCopy& c) {
    const std::size_t bytes = c.range.size() * core.element_size_;
    const bool from_device = c.from != kMainCopy;
    const bool to_device = c.to != kMainCopy;
    if (!from_device)
      count(&ContainerStats::host_to_device_bytes, bytes);
    else if (!to_device)
      count(&ContainerStats::device_to_host_bytes, bytes);
    else if (set.copy(c.from).device == set.copy(c.to).device)
      count(&ContainerStats::on_device_bytes, bytes);
    else
      count(&ContainerStats::peer_bytes, bytes);
    ++stats.copies;
    ++shared.totals.copies;
    return shared.engine->start(end_of(c.to, c.range.first), end_of(c.from, c.range.first), bytes, true).done;
  }

  /// Frees a device copy that holds nothing the main copy lacks, once no work uses it.
  void release(CopyId id) {
    wait_for_copy(id);
    const coherence::DeviceCopy& c = set.copy(id);
    if (c.buffer) shared.impl.devices[c.device]->free(c.buffer);
    set.remove(id);
  }

  void evict(CopyId id) {
    execute(set.evict(id));
    ++stats.evictions;
    ++shared.totals.evictions;
    core.refresh_flags();
  }

  /// A buffer for a new device copy, evicting least recently used copies of the device's containers
  /// until it fits; OutOfDeviceMemory when what is left is in use.
  DeviceBuffer allocate(unsigned device, std::size_t bytes) {
    Device& dev = *shared.impl.devices[device];
    for (;;) {
      try {
        const DeviceBuffer b = dev.alloc(bytes);
        count(&ContainerStats::device_allocated_bytes, bytes);
        ++stats.device_allocations;
        ++shared.totals.device_allocations;
        return b;
      } catch (const OutOfDeviceMemory& e) {
        // The least recently used copy that no access holds; one that work in flight uses is evicted
        // only after that work completes (and only when no idle copy is left).
        State* victim_state = nullptr;
        CopyId victim = kMainCopy;
        bool victim_busy = false;
        std::uint64_t oldest = std::numeric_limits<std::uint64_t>::max();
        for (State* s : shared.containers) {
          s->prune();
          for (CopyId id : s->set.device_copies()) {
            const coherence::DeviceCopy& c = s->set.copy(id);
            if (c.device != device || !c.buffer || s->pinned(id)) continue;
            const bool busy = s->busy(id);
            if ((victim_busy && !busy) || (busy == victim_busy && c.last_used < oldest) ||
                victim_state == nullptr) {
              oldest = c.last_used;
              victim_state = s;
              victim = id;
              victim_busy = busy;
            }
          }
        }
        if (victim_state != nullptr && victim_busy) victim_state->wait_for_copy(victim);
        if (victim_state == nullptr)
          throw OutOfDeviceMemory(
              fmt::format("{} (a device copy for {}; the other copies on it are held by this access)",
                          dev.name(), core.name()),
              e.requested(), e.used(), e.capacity());
        victim_state->evict(victim);
      }
    }
  }
};

ContainerCore::ContainerCore(const ContainerOptions& options, std::size_t element_size, std::size_t elements,
                             std::size_t row_length, const char* kind)
    : runtime_(options.runtime != nullptr ? options.runtime : &Runtime::instance()),
      element_size_(element_size),
      elements_(elements),
      row_length_(row_length),
      pinned_(options.pinned),
      kind_(kind) {
  if (element_size == 0) throw InvalidArgument(fmt::format("{}: elements of 0 bytes", kind));
  if (elements > std::numeric_limits<std::size_t>::max() / element_size / 2)
    throw InvalidArgument(fmt::format("{} of {} elements of {} B: too large", kind, elements, element_size));
  Shared& shared = shared_of(*runtime_);
  capacity_ = elements;
  if (capacity_ > 0) {
    const std::size_t bytes = capacity_ * element_size_;
    host_ = pinned_ ? static_cast<std::byte*>(shared.impl.devices.front()->alloc_pinned(bytes))
                    : static_cast<std::byte*>(::operator new (bytes, std::align_val_t{64}));
  }
  std::lock_guard lock(shared.mutex);
  state_ = std::make_unique<State>(shared, *this, options.mechanism.value_or(shared.mechanism));
  shared.containers.push_back(state_.get());
}

namespace {
void free_host(Shared& shared, std::byte* p, bool pinned) {
  if (p == nullptr) return;
  if (pinned)
    shared.impl.devices.front()->free_pinned(p);
  else
    ::operator delete (p, std::align_val_t{64});
}
}  // namespace

ContainerCore::~ContainerCore() {
  Shared& shared = state_->shared;
  std::lock_guard lock(shared.mutex);
  for (const InFlight& f : state_->in_flight) f.done.wait();
  state_->in_flight.clear();
  for (CopyId id : state_->set.device_copies()) {
    const coherence::DeviceCopy& c = state_->set.copy(id);
    if (c.buffer) shared.impl.devices[c.device]->free(c.buffer);
  }
  std::erase(shared.containers, state_.get());
  free_host(shared, host_, pinned_);
}

Mechanism ContainerCore::mechanism() const { return state_->set.mechanism(); }

std::string ContainerCore::name() const {
  if (row_length_ != elements_ && row_length_ > 0)
    return fmt::format("{} of {} x {} elements of {} B", kind_, elements_ / row_length_, row_length_,
                       element_size_);
  return fmt::format("{} of {} elements of {} B", kind_, elements_, element_size_);
}

void ContainerCore::refresh_flags() {
  read_free_.store(state_->set.host_access_is_free(Access::read), std::memory_order_relaxed);
  write_free_.store(state_->set.host_access_is_free(Access::write), std::memory_order_relaxed);
}

void ContainerCore::check_range(std::size_t first, std::size_t n, const char* what) const {
  if (first > elements_ || n > elements_ - first)
    throw InvalidArgument(fmt::format("{}: elements [{}, {}) outside the {} of {} elements", what, first,
                                      first + n, name(), elements_));
}

void ContainerCore::check_extent(const Extent& e, const char* what) const {
  const std::size_t stride = e.rows == 1 ? e.cols : e.stride;
  const bool fits = e.cols <= stride && (e.rows == 1 || e.cols <= row_length_) && e.offset <= elements_ &&
                    (e.rows == 0 || e.cols == 0 ||
                     (e.rows - 1 <= (elements_ - e.offset) / std::max<std::size_t>(stride, 1) &&
                      (e.rows - 1) * stride + e.cols <= elements_ - e.offset));
  if (!fits || (e.rows > 1 && (e.offset % row_length_) + e.cols > row_length_))
    throw InvalidArgument(fmt::format("{}: {} x {} elements from element {} lie outside the {}", what, e.rows,
                                      e.cols, e.offset, name()));
}

void ContainerCore::host_access(std::size_t first, std::size_t n, Access mode) {
  check_range(first, n, "host access");
  if (n == 0) return;
  std::lock_guard lock(state_->shared.mutex);
  state_->prune();
  state_->wait_for({first, first + n}, mode);
  state_->execute(state_->set.host_access({first, first + n}, mode));
  refresh_flags();
}

void ContainerCore::host_access(const Extent& extent, Access mode) {
  check_extent(extent, "host access");
  const Extent e = extent.normalized();
  for (std::size_t row = 0; row < e.rows; ++row) host_access(e.offset + row * e.stride, e.cols, mode);
}

ContainerCore::View ContainerCore::begin_device_access(unsigned device, const Extent& extent, Access mode) {
  Shared& shared = state_->shared;
  if (device >= shared.queues.size())
    throw InvalidArgument(fmt::format("device access of the {}: device {} does not exist ({} devices)",
                                      name(), device, shared.queues.size()));
  check_extent(extent, "device access");
  const Extent e = extent.normalized();
  if (e.count() == 0) throw InvalidArgument(fmt::format("device access of the {}: an empty range", name()));
  std::lock_guard lock(shared.mutex);
  State& s = *state_;
  s.prune();
  CopyId id = s.set.find(device, e);
  if (id == kMainCopy) {
    id = s.set.add(device, e);
    try {
      s.set.copy(id).buffer = s.allocate(device, e.count() * element_size_);
    } catch (...) {
      s.set.remove(id);
      refresh_flags();
      throw;
    }
  }
  if (s.pins.size() <= id) s.pins.resize(id + 1, 0);
  ++s.pins[id];
  try {
    s.execute(s.set.device_access(id, mode, ++shared.clock));
  } catch (...) {
    --s.pins[id];
    refresh_flags();
    throw;
  }
  refresh_flags();
  return View{shared.impl.devices[device], shared.queues[device].get(), s.set.copy(id).buffer, 0, id};
}

void ContainerCore::end_device_access(const View& view, const Extent& extent, Access mode,
                                      const Event& done) {
  std::lock_guard lock(state_->shared.mutex);
  State& s = *state_;
  if (view.copy < s.pins.size() && s.pins[view.copy] > 0) --s.pins[view.copy];
  if (done.query()) return;
  const coherence::ElementRange b = coherence::bounds(extent.normalized());
  s.in_flight.push_back({done, b, false, mode != Access::write, mode != Access::read, view.copy});
}

void ContainerCore::update_host() {
  std::lock_guard lock(state_->shared.mutex);
  state_->prune();
  state_->execute(state_->set.update_host());
  refresh_flags();
}

void ContainerCore::invalidate_device_copies() {
  std::lock_guard lock(state_->shared.mutex);
  state_->prune();
  state_->execute(state_->set.invalidate_device_copies());
  refresh_flags();
}

void ContainerCore::flush() {
  std::lock_guard lock(state_->shared.mutex);
  state_->prune();
  state_->execute(state_->set.flush());
  refresh_flags();
}

void ContainerCore::discard(std::size_t first, std::size_t n) {
  check_range(first, n, "discard");
  if (n == 0) return;
  std::lock_guard lock(state_->shared.mutex);
  state_->prune();
  state_->wait_for({first, first + n}, Access::write);
  state_->execute(state_->set.host_access({first, first + n}, Access::write));
  refresh_flags();
}

void ContainerCore::wait() {
  std::lock_guard lock(state_->shared.mutex);
  for (const InFlight& f : state_->in_flight) f.done.wait();
  state_->prune();
}

void ContainerCore::resize(std::size_t elements, std::size_t row_length) {
  Shared& shared = state_->shared;
  std::lock_guard lock(shared.mutex);
  State& s = *state_;
  s.prune();
  if (!s.in_flight.empty())
    throw InvalidArgument(
        fmt::format("resize of the {} to {} elements: {} device operations on it are in flight", name(),
                    elements, s.in_flight.size()));
  if (elements > std::numeric_limits<std::size_t>::max() / element_size_ / 2)
    throw InvalidArgument(fmt::format("resize of the {} to {} elements: too large", name(), elements));
  s.execute(s.set.flush());
  if (elements > capacity_) {
    const std::size_t capacity = std::max(elements, capacity_ * 2);
    const std::size_t bytes = capacity * element_size_;
    auto* p = pinned_ ? static_cast<std::byte*>(shared.impl.devices.front()->alloc_pinned(bytes))
                      : static_cast<std::byte*>(::operator new (bytes, std::align_val_t{64}));
    if (host_ != nullptr) std::memcpy(p, host_, elements_ * element_size_);
    free_host(shared, host_, pinned_);
    host_ = p;
    capacity_ = capacity;
  }
  elements_ = elements;
  row_length_ = row_length;
  const Mechanism m = s.set.mechanism();
  s.set = coherence::CopySet(m, elements_, row_length_);
  s.set.set_peers(static_cast<unsigned>(shared.queues.size()), shared.peer);
  s.pins.clear();
  refresh_flags();
}

ContainerStats ContainerCore::stats() const {
  std::lock_guard lock(state_->shared.mutex);
  return state_->stats;
}

std::size_t ContainerCore::device_copies() const {
  std::lock_guard lock(state_->shared.mutex);
  return state_->set.device_copies().size();
}

Event launch_containers(Runtime& runtime, unsigned device, const Kernel& kernel, const Launch& launch,
                        std::span<const ContainerLaunchArg> args) {
  Shared& shared = shared_of(runtime);
  if (device >= shared.queues.size())
    throw InvalidArgument(fmt::format("launch of {}: device {} does not exist ({} devices)", kernel.name,
                                      device, shared.queues.size()));
  std::vector<KernelArg> kargs;
  std::vector<ContainerCore::View> views;
  kargs.reserve(args.size());
  views.reserve(args.size());
  const auto end_all = [&](const Event& done) {
    for (std::size_t i = 0, v = 0; i < args.size(); ++i)
      if (args[i].core != nullptr)
        args[i].core->end_device_access(views[v++], args[i].extent, args[i].access, done);
  };
  try {
    for (const ContainerLaunchArg& a : args) {
      if (a.core == nullptr) {
        kargs.push_back(a.value);
        continue;
      }
      if (&a.core->runtime() != &runtime)
        throw InvalidArgument(fmt::format("launch of {}: the {} belongs to another hdsm::Runtime",
                                          kernel.name, a.core->name()));
      views.push_back(a.core->begin_device_access(device, a.extent, a.access));
      kargs.push_back(views.back().argument());
    }
    Queue& queue = *shared.queues[device];
    queue.launch(kernel, launch, kargs);
    Event done = queue.record();
    end_all(done);
    return done;
  } catch (...) {
    // Views begun so far end with nothing in flight.
    std::size_t begun = views.size();
    for (std::size_t i = 0, v = 0; i < args.size() && v < begun; ++i)
      if (args[i].core != nullptr)
        args[i].core->end_device_access(views[v++], args[i].extent, args[i].access, {});
    throw;
  }
}

void moved_from(const char* kind) {
  throw InvalidArgument(fmt::format("{}: used after it was moved from", kind));
}

}  // namespace hdsm::detail

namespace hdsm {

ContainerStats container_stats(const Runtime& runtime) {
  detail::Shared& shared = detail::shared_of(runtime);
  std::lock_guard lock(shared.mutex);
  return shared.totals;
}

void reset_container_stats(const Runtime& runtime) {
  detail::Shared& shared = detail::shared_of(runtime);
  std::lock_guard lock(shared.mutex);
  shared.totals = {};
}

}  // namespace hdsm
