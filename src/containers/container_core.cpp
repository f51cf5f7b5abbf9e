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
#include "device/event_state.hpp"
#include "runtime/internal.hpp"
#include "runtime/knobs.hpp"
#include "runtime/runtime_impl.hpp"
#include "transfer/copy_engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <new>
#include <span>
#include <vector>

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
    const std::string& chosen = config.get(knob_name(Knob::container_mechanism));
    mechanism = chosen == "initial" ? Mechanism::initial
                : chosen == "none"  ? Mechanism::none
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
  ~Shared();
  void synchronize_queues() noexcept {
    // A queue keeps the failure of its work (an access that waited for the work reported it too):
    // in a destructor it is said on stderr, not thrown.
    for (auto& q : queues) {
      try {
        q->synchronize();
      } catch (const std::exception& e) {
        fmt::print(stderr, "hdsm: a device queue of the containers ends with a failure: {}\n", e.what());
      }
    }
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
  std::vector<std::uint32_t> pins;   // by copy id: device accesses begun and not ended
  std::vector<std::uint32_t> holds;  // by copy id: held for a call's later launches (DeviceHolds)
  ContainerStats stats;
  bool orphaned = false;  // its runtime ended first: `shared` and the devices are gone
  /// The runtime ends: every later access takes the slow path, which refuses it (check_alive).
  void orphan() {
    orphaned = true;
    core.read_free_.store(false, std::memory_order_release);
    core.write_free_.store(false, std::memory_order_release);
  }

  std::size_t prune_at = 16;  // in_flight's size at which prune_sometimes() prunes
  /// Forgets the work that completed, except failed work whose failure is this container's to report
  /// (reports()): the next access that waits for it reports the failure (a device reports each
  /// failure once, in the event after it). A failed call that only read the container is the business
  /// of the containers it wrote: an input reporting it too would report one failure twice, and lose
  /// the access it threw from.
  void prune() {
    std::erase_if(in_flight,
                  [](const InFlight& f) { return f.done.query() && !(reports(f) && failed(f.done)); });
    prune_at = std::max<std::size_t>(16, 2 * in_flight.size());
  }
  /// Work an access waits for, and whether its failure is this container's to report (reports()).
  struct Pending {
    Event done;
    bool report;
  };
  /// A kernel that only read the container does not report its failure here; a kernel that wrote it,
  /// and a transfer into a copy of it (neither reads nor writes: a kernel would run on what it left),
  /// do.
  static bool reports(const InFlight& f) { return f.writes || !f.reads; }
  static Pending pending(const InFlight& f) { return {f.done, reports(f)}; }
  /// Waits for each; throws the first failure of one to report, whose event goes to `reported` (the
  /// caller forgets it then).
  static void wait_for(const std::vector<Pending>& work, Event& reported) {
    for (const Pending& p : work) {
      if (!p.report) {
        (void)failed(p.done);
        continue;
      }
      try {
        p.done.wait();
      } catch (...) {
        reported = p.done;
        throw;
      }
    }
  }
  /// After a wait reported the failure of `reported`: forgets it, and the completed work that did not
  /// fail. Other failures stay, for the accesses that conflict with them (each is reported once).
  void forget_reported(const Event& reported) {
    std::erase_if(in_flight, [&](const InFlight& f) {
      return f.done.query() && (f.done.state() == reported.state() || !(reports(f) && failed(f.done)));
    });
  }
  static bool failed(const Event& done) {
    try {
      done.wait();  // complete: returns at once, or throws its failure
      return false;
    } catch (...) {
      return true;
    }
  }
  /// prune() once in_flight has doubled since the last: O(1) amortized per device access, where a
  /// prune on each would scan every call still queued. Entries of completed work left meanwhile are
  /// harmless: waiting for them returns at once.
  void prune_sometimes() {
    if (in_flight.size() >= prune_at) prune();
  }
  /// Work still running on the copy (a failed one that completed holds it no longer: its entry only
  /// waits to be reported).
  bool busy(CopyId id) const {
    return std::any_of(in_flight.begin(), in_flight.end(),
                       [&](const InFlight& f) { return f.copy == id && !f.done.query(); });
  }
  bool pinned(CopyId id) const {
    return (id < pins.size() && pins[id] > 0) || (id < holds.size() && holds[id] > 0);
  }

  /// The work a host access waits for: what writes what it reads, or reads or writes what it writes.
  std::vector<Pending> conflicting(ElementRange range, Access mode) const {
    std::vector<Pending> work;
    for (const InFlight& f : in_flight) {
      const bool overlap = f.range.first < range.last && range.first < f.range.last;
      if (overlap && (f.writes || (mode != Access::read && (f.reads || f.reads_main))))
        work.push_back(pending(f));
    }
    return work;
  }
  bool pinned_any() const {
    const auto any = [](const std::vector<std::uint32_t>& v) {
      return std::any_of(v.begin(), v.end(), [](std::uint32_t p) { return p > 0; });
    };
    return any(pins) || any(holds);
  }
  /// InvalidArgument when a device view of the container is open (`what` would free its copy).
  void check_no_views(const char* what) const {
    if (pinned_any())
      throw InvalidArgument(
          fmt::format("{} of the {}: a device view of it is open (call done() first)", what, core.name()));
  }
  /// Waits for the work that conflicts with a host access of `range` in `mode`, without holding the
  /// runtime's lock (other containers go on); throws the first failure of one this container
  /// reports, once.
  void wait_for_conflicts(ElementRange range, Access mode) {
    std::vector<Pending> conflicts;
    {
      std::lock_guard lock(shared.mutex);
      prune();
      conflicts = conflicting(range, mode);
    }
    Event reported;
    try {
      wait_for(conflicts, reported);
    } catch (...) {
      std::lock_guard lock(shared.mutex);
      forget_reported(reported);
      core.refresh_flags();
      throw;
    }
  }
  /// A write-back into the main copy waits for the copies still reading those elements out of it.
  void wait_for_main_readers(ElementRange range) {
    for (const InFlight& f : in_flight)
      if (f.reads_main && f.range.first < range.last && range.first < f.range.last) f.done.wait();
  }
  /// Waits for the work on a copy about to be freed or evicted. A failure is not thrown here: it
  /// may be another container's (an eviction for this one's launch), and its entry stays for the
  /// owner's next access that conflicts with it.
  void wait_for_copy(CopyId id) {
    for (const InFlight& f : in_flight)
      if (f.copy == id) (void)failed(f.done);
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
              fmt::format(
                  "{} (a device copy for {}; the other copies on it are held by accesses in progress: "
                  "this one's operands, and other threads' accesses to their containers)",
                  dev.name(), core.name()),
              e.requested(), e.used(), e.capacity());
        victim_state->evict(victim);
      }
    }
  }
};

namespace {

// The runtime ends (its attachments go). A container still alive holds device copies, queue work and
// host memory of this runtime: it is orphaned, so that its destructor, if it ever runs, touches none
// of them (before, it crashed with no word). Often it never runs: exit() ends the runtime under the
// live containers of main's frames, and a program that leaks a container on purpose is fine.
Shared::~Shared() {
  for (ContainerCore::State* s : containers) s->orphan();
  synchronize_queues();
}

std::byte* alloc_host(Shared& shared, std::size_t bytes, bool pinned) {
  return pinned ? static_cast<std::byte*>(shared.impl.devices.front()->alloc_pinned(bytes))
                : static_cast<std::byte*>(::operator new (bytes, std::align_val_t{64}));
}
void free_host(Shared& shared, std::byte* p, bool pinned) {
  if (p == nullptr) return;
  if (pinned)
    shared.impl.devices.front()->free_pinned(p);
  else
    ::operator delete (p, std::align_val_t{64});
}
}  // namespace

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
  if (capacity_ > 0) host_ = alloc_host(shared, capacity_ * element_size_, pinned_);
  try {
    std::lock_guard lock(shared.mutex);
    state_ = std::make_unique<State>(shared, *this, options.mechanism.value_or(shared.mechanism));
    shared.containers.push_back(state_.get());
  } catch (...) {
    free_host(shared, host_, pinned_);
    throw;
  }
}

ContainerCore::~ContainerCore() {
  if (state_->orphaned) {
    // Its device copies went with their devices; only plain host memory is still its own to free.
    fmt::print(stderr,
               "hdsm: the {} outlived its hdsm::Runtime (a container, or a skeleton's Future, must not): "
               "its contents were lost with the runtime\n",
               name());
    if (!pinned_) ::operator delete (host_, std::align_val_t{64});
    return;
  }
  Shared& shared = state_->shared;
  std::lock_guard lock(shared.mutex);
  // Errors of work in flight were the program's to collect; the container goes away either way.
  for (const InFlight& f : state_->in_flight)
    if (const auto st = f.done.state()) (void)st->wait();
  state_->in_flight.clear();
  for (CopyId id : state_->set.device_copies()) {
    const coherence::DeviceCopy& c = state_->set.copy(id);
    if (c.buffer) {
      try {
        shared.impl.devices[c.device]->free(c.buffer);
      } catch (...) {  // NOLINT(bugprone-empty-catch): a failed free leaks device memory, nothing more
      }
    }
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
  // A host write must not overwrite elements that a copy to a device still reads out of the main copy.
  const bool main_read = std::any_of(state_->in_flight.begin(), state_->in_flight.end(),
                                     [](const InFlight& f) { return f.reads_main && !f.done.query(); });
  // A failure not reported yet keeps host accesses on the slow path, which reports it: the main copy
  // may be current all the same (an eviction wrote back what the failed kernel left).
  const bool unreported = std::any_of(
      state_->in_flight.begin(), state_->in_flight.end(),
      [](const InFlight& f) { return State::reports(f) && f.done.query() && State::failed(f.done); });
  read_free_.store(!unreported && state_->set.host_access_is_free(Access::read), std::memory_order_release);
  write_free_.store(!unreported && !main_read && state_->set.host_access_is_free(Access::write),
                    std::memory_order_release);
}

Runtime& ContainerCore::runtime() const {
  check_alive("use");
  return *runtime_;
}

void ContainerCore::check_alive(const char* what) const {
  if (state_->orphaned)
    throw Unsupported(
        fmt::format("{}: the {} outlived its hdsm::Runtime, and its contents went with it", what, name()));
}

void ContainerCore::check_range(std::size_t first, std::size_t n, const char* what) const {
  if (first > elements_ || n > elements_ - first)
    throw InvalidArgument(  // name() says how many elements there are; first + n may wrap
        n > SIZE_MAX - first
            ? fmt::format("{}: {} elements from element {} outside the {}", what, n, first, name())
            : fmt::format("{}: elements [{}, {}) outside the {}", what, first, first + n, name()));
}

void ContainerCore::check_extent(const Extent& e, const char* what) const {
  if (e.rows == 0 || e.cols == 0) return;  // empty: the caller decides
  const std::size_t stride = e.rows == 1 ? e.cols : e.stride;
  const bool fits =
      e.cols <= stride && e.offset <= elements_ &&
      (e.rows == 1 ||
       (row_length_ > 0 && e.cols <= row_length_ && (e.offset % row_length_) + e.cols <= row_length_)) &&
      e.rows - 1 <= (elements_ - e.offset) / stride && (e.rows - 1) * stride + e.cols <= elements_ - e.offset;
  if (!fits)
    throw InvalidArgument(fmt::format("{}: {} x {} elements from element {} lie outside the {}", what, e.rows,
                                      e.cols, e.offset, name()));
}

void ContainerCore::host_access(std::size_t first, std::size_t n, Access mode) {
  check_alive("host access");
  check_range(first, n, "host access");
  if (n == 0) return;
  State& s = *state_;
  const ElementRange range{first, first + n};
  s.wait_for_conflicts(range, mode);
  std::lock_guard lock(s.shared.mutex);
  s.prune();
  // A call's own held copies (DeviceHolds: a Scan writes its offsets between its launches) are no
  // views: they stay allocated and become invalid, as any device copy the write overlaps.
  if (mode != Access::read && s.set.mechanism() == Mechanism::initial &&
      std::any_of(s.pins.begin(), s.pins.end(), [](std::uint32_t p) { return p > 0; }))
    s.check_no_views("host write");
  s.execute(s.set.host_access(range, mode));
  refresh_flags();
}

void ContainerCore::host_access(const Extent& extent, Access mode) {
  check_extent(extent, "host access");
  const Extent e = extent.normalized();
  for (std::size_t row = 0; row < e.rows; ++row) host_access(e.offset + row * e.stride, e.cols, mode);
}

std::uint32_t ContainerCore::reserve(unsigned device, const Extent& extent) {
  return reserve_copy(device, extent, false);
}

std::uint32_t ContainerCore::hold(unsigned device, const Extent& extent) {
  return reserve_copy(device, extent, true);
}

void ContainerCore::release(std::uint32_t copy) {
  std::lock_guard lock(state_->shared.mutex);
  State& s = *state_;
  if (copy < s.holds.size() && s.holds[copy] > 0) --s.holds[copy];
}

std::uint32_t ContainerCore::reserve_copy(unsigned device, const Extent& extent, bool held) {
  check_alive("device access");
  Shared& shared = state_->shared;
  if (device >= shared.queues.size())
    throw InvalidArgument(fmt::format("device access of the {}: device {} does not exist ({} devices)",
                                      name(), device, shared.queues.size()));
  if (extent.rows == 0 || extent.cols == 0)
    throw InvalidArgument(fmt::format("device access of the {}: an empty range", name()));
  check_extent(extent, "device access");
  const Extent e = extent.normalized();
  std::lock_guard lock(shared.mutex);
  State& s = *state_;
  s.prune_sometimes();
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
  std::vector<std::uint32_t>& counts = held ? s.holds : s.pins;
  if (counts.size() <= id) counts.resize(id + 1, 0);
  ++counts[id];
  return id;
}

ContainerCore::View ContainerCore::prepare(std::uint32_t copy, Access mode) {
  Shared& shared = state_->shared;
  std::lock_guard lock(shared.mutex);
  State& s = *state_;
  try {
    s.execute(s.set.prepare_device_access(copy, mode, ++shared.clock));
  } catch (...) {
    s.set.forget(copy);  // a fill that failed leaves the copy's contents unknown
    refresh_flags();
    throw;
  }
  refresh_flags();
  const coherence::DeviceCopy& c = s.set.copy(copy);
  return View{shared.impl.devices[c.device], shared.queues[c.device].get(), c.buffer, 0, copy};
}

void ContainerCore::finish(const View& view, Access mode, const Event& done) {
  std::lock_guard lock(state_->shared.mutex);
  State& s = *state_;
  if (view.copy < s.pins.size() && s.pins[view.copy] > 0) --s.pins[view.copy];
  // Work that already failed is recorded too: nobody else waits for its event (skeletons and calls
  // drop it), and its failure is the container's to report.
  if (!done.query() || State::failed(done)) {
    const coherence::ElementRange b = coherence::bounds(s.set.copy(view.copy).extent);
    s.in_flight.push_back({done, b, false, mode != Access::write, mode != Access::read, view.copy});
  }
  s.execute(s.set.commit_device_write(view.copy, mode));
  refresh_flags();
}

void ContainerCore::cancel(std::uint32_t copy) {
  std::lock_guard lock(state_->shared.mutex);
  State& s = *state_;
  if (copy < s.pins.size() && s.pins[copy] > 0) --s.pins[copy];
}

void ContainerCore::abandon(const View& view) {
  std::lock_guard lock(state_->shared.mutex);
  State& s = *state_;
  if (view.copy < s.pins.size() && s.pins[view.copy] > 0) --s.pins[view.copy];
  // What the user enqueued on the copy by now: the copy is not freed or reused under it. Its failure
  // is not reported (reads, no write: the exception that unwinds is the error).
  if (const Event done = view.queue->record(); !done.query()) {
    const coherence::ElementRange b = coherence::bounds(s.set.copy(view.copy).extent);
    s.in_flight.push_back({done, b, false, true, false, view.copy});
  }
  s.set.forget(view.copy);
  refresh_flags();
}

void ContainerCore::check_no_views(const char* what) const {
  check_alive(what);
  std::lock_guard lock(state_->shared.mutex);
  state_->check_no_views(what);
}

void ContainerCore::flush_after_call() {
  std::lock_guard lock(state_->shared.mutex);
  State& s = *state_;
  s.prune();
  coherence::RangePlan plan = s.set.update_host();
  for (const CopyId id : s.set.device_copies())
    if (!s.pinned(id)) plan.released.push_back(id);
  s.execute(plan);
  refresh_flags();
}

void ContainerCore::update_host() {
  check_alive("update_host");
  // The writers' failures first: a write-back of what a failed kernel left would make it the host's
  // data, with no error.
  state_->wait_for_conflicts({0, elements_}, Access::read);
  std::lock_guard lock(state_->shared.mutex);
  state_->prune();
  state_->execute(state_->set.update_host());
  refresh_flags();
}

void ContainerCore::invalidate_device_copies() {
  check_alive("invalidate_device_copies");
  state_->wait_for_conflicts({0, elements_}, Access::read);
  std::lock_guard lock(state_->shared.mutex);
  state_->prune();
  state_->execute(state_->set.invalidate_device_copies());
  refresh_flags();
}

void ContainerCore::flush() {
  check_alive("flush");
  state_->wait_for_conflicts({0, elements_}, Access::read);
  std::lock_guard lock(state_->shared.mutex);
  state_->prune();
  state_->check_no_views("flush");
  state_->execute(state_->set.flush());
  refresh_flags();
}

void ContainerCore::discard(std::size_t first, std::size_t n) {
  check_alive("discard");
  // As a host write whose bytes nobody writes: modified copies keep only what lies outside the range.
  host_access(first, n, Access::write);
}

void ContainerCore::wait() {
  check_alive("wait");
  std::vector<State::Pending> work;
  {
    std::lock_guard lock(state_->shared.mutex);
    for (const InFlight& f : state_->in_flight) work.push_back(State::pending(f));
  }
  Event reported;
  try {
    State::wait_for(work, reported);
  } catch (...) {
    std::lock_guard lock(state_->shared.mutex);
    state_->forget_reported(reported);  // reported here, once
    refresh_flags();
    throw;
  }
  std::lock_guard lock(state_->shared.mutex);
  state_->prune();
  refresh_flags();
}

void ContainerCore::resize(std::size_t elements, std::size_t row_length) {
  check_alive("resize");
  State& s = *state_;
  Shared& shared = s.shared;
  {
    // push_back's common case, one lock: no device copy or work to wait for, and room.
    std::lock_guard lock(shared.mutex);
    if (elements <= capacity_ && s.in_flight.empty() && !s.set.has_device_copies() && !s.pinned_any()) {
      elements_ = elements;
      row_length_ = row_length;
      s.set.resize(elements, row_length);
      refresh_flags();
      return;
    }
  }
  // As a host access waits for the calls it conflicts with, a change of size waits for every call
  // on the container (it frees the device copies they use): before, it threw while one was in flight,
  // so whether a push_back after an asynchronous call worked depended on timing.
  wait();
  std::lock_guard lock(shared.mutex);
  s.prune();
  if (!s.in_flight.empty())
    throw InvalidArgument(
        fmt::format("resize of the {} to {} elements: {} device operations on it are in flight", name(),
                    elements, s.in_flight.size()));
  s.check_no_views("resize");
  if (elements > std::numeric_limits<std::size_t>::max() / element_size_ / 2)
    throw InvalidArgument(fmt::format("resize of the {} to {} elements: too large", name(), elements));
  std::byte* grown = nullptr;
  std::size_t capacity = capacity_;
  if (elements > capacity_) {
    capacity = std::max(elements, capacity_ * 2);
    grown = alloc_host(shared, capacity * element_size_, pinned_);
  }
  try {
    s.execute(s.set.flush());
  } catch (...) {
    free_host(shared, grown, pinned_);
    refresh_flags();
    throw;
  }
  if (grown != nullptr) {
    if (host_ != nullptr) std::memcpy(grown, host_, elements_ * element_size_);
    free_host(shared, host_, pinned_);
    host_ = grown;
    capacity_ = capacity;
  }
  elements_ = elements;
  row_length_ = row_length;
  const Mechanism m = s.set.mechanism();
  s.set = coherence::CopySet(m, elements_, row_length_);
  s.set.set_peers(static_cast<unsigned>(shared.queues.size()), shared.peer);
  s.pins.clear();
  s.holds.clear();
  refresh_flags();
}

ContainerStats ContainerCore::stats() const {
  check_alive("stats");
  std::lock_guard lock(state_->shared.mutex);
  return state_->stats;
}

std::size_t ContainerCore::device_copies() const {
  check_alive("device_copies");
  std::lock_guard lock(state_->shared.mutex);
  return state_->set.device_copies().size();
}

namespace {

/// n value-initialized elements: in place for the few operands of a usual launch, on the heap beyond.
template <class T, std::size_t Inline = 12>
class Scratch {
 public:
  explicit Scratch(std::size_t n) : n_(n) {
    if (n > Inline) heap_.resize(n);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T& operator[](std::size_t i) { return n_ > Inline ? heap_[i] : inline_[i]; }
  std::span<const T> span() const { return {n_ > Inline ? heap_.data() : inline_.data(), n_}; }

 private:
  std::size_t n_;
  std::array<T, Inline> inline_{};
  std::vector<T> heap_;
};

}  // namespace

Event launch_containers(Runtime& runtime, unsigned device, const Kernel& kernel, const Launch& launch,
                        std::span<const ContainerLaunchArg> args) {
  Shared& shared = shared_of(runtime);
  if (device >= shared.queues.size())
    throw InvalidArgument(fmt::format("launch of {}: device {} does not exist ({} devices)", kernel.name,
                                      device, shared.queues.size()));
  for (const ContainerLaunchArg& a : args)
    if (a.core != nullptr && &a.core->runtime() != &runtime)
      throw InvalidArgument(
          fmt::format("launch of {}: the {} belongs to another hdsm::Runtime", kernel.name, a.core->name()));
  // 1. Every operand's copy, allocated and pinned; 2. reads made current (reads first, so that no read
  // is filled from a copy this kernel is about to write); 3. the kernel enqueued; 4. writes committed.
  // A failure before 4 leaves every container's contents as they were. An empty operand (a range of
  // no elements, an empty container: a device's share of a split that got none) is a null pointer,
  // with no copy and nothing to wait for, as a CUDA program passes one with a count of 0.
  const auto live = [&](std::size_t i) {
    const ContainerLaunchArg& a = args[i];
    return a.core != nullptr && a.extent.rows != 0 && a.extent.cols != 0;
  };
  for (const ContainerLaunchArg& a : args)
    if (a.core != nullptr && (a.extent.rows == 0 || a.extent.cols == 0))
      a.core->check_range(a.extent.offset, 0, "device access");
  Scratch<std::uint32_t> copies(args.size());
  Scratch<ContainerCore::View> views(args.size());
  std::size_t reserved = 0;
  const auto cancel_all = [&] {
    for (std::size_t i = 0; i < reserved; ++i)
      if (live(i)) args[i].core->cancel(copies[i]);
  };
  Scratch<KernelArg> kargs(args.size());
  try {
    for (; reserved < args.size(); ++reserved)
      if (live(reserved)) copies[reserved] = args[reserved].core->reserve(device, args[reserved].extent);
    for (const Access pass : {Access::read, Access::read_write, Access::write})
      for (std::size_t i = 0; i < args.size(); ++i)
        if (live(i) && args[i].access == pass) views[i] = args[i].core->prepare(copies[i], pass);
    for (std::size_t i = 0; i < args.size(); ++i)
      kargs[i] = live(i)                   ? views[i].argument()
                 : args[i].core != nullptr ? KernelArg::value(static_cast<void*>(nullptr))
                                           : args[i].value;
    Queue& queue = *shared.queues[device];
    queue.launch(kernel, launch, kargs.span());
    Event done = queue.record();
    reserved = 0;  // from here on each operand is finished, whatever the others do
    std::exception_ptr first_error;
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (!live(i)) continue;
      try {
        args[i].core->finish(views[i], args[i].access, done);
      } catch (...) {
        if (!first_error) first_error = std::current_exception();
      }
    }
    if (first_error) std::rethrow_exception(first_error);
    // Mechanism::none: the call's results go back and its device copies go at once. A kernel that
    // failed is reported as under the other mechanisms, once, by the next access of what it wrote
    // (finish recorded it): thrown here too, it was reported twice. Its copies stay, holding what the
    // kernel left, until a later use of the container frees them.
    std::vector<ContainerCore*> flushed;
    for (std::size_t i = 0; i < args.size(); ++i)
      if (const ContainerLaunchArg& a = args[i];
          live(i) && a.core->mechanism() == Mechanism::none &&
          std::find(flushed.begin(), flushed.end(), a.core) == flushed.end()) {
        if (flushed.empty()) {
          try {
            done.wait();
          } catch (...) {  // NOLINT(bugprone-empty-catch): reported by the containers, as said above
            return done;
          }
        }
        a.core->flush_after_call();
        flushed.push_back(a.core);
      }
    return done;
  } catch (...) {
    cancel_all();
    throw;
  }
}

DeviceHolds::~DeviceHolds() {
  for (const auto& [core, copy] : held_) core->release(copy);
  // Mechanism::none keeps no copy after a call: the launches wrote their results back but could not
  // free the copies held here (each waited for its kernel). What is left is freeing them.
  for (std::size_t i = 0; i < held_.size(); ++i) {
    ContainerCore* core = held_[i].first;
    const bool first = std::none_of(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(i),
                                    [&](const auto& h) { return h.first == core; });
    if (!first || core->mechanism() != Mechanism::none) continue;
    try {
      core->flush_after_call();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a failed write-back is the launch's to report
    }
  }
}

void DeviceHolds::add(unsigned device, std::span<const ContainerLaunchArg> args) {
  const ContainerCore* first = held_.empty() ? nullptr : held_.front().first;
  for (const ContainerLaunchArg& a : args) {
    if (a.core == nullptr) continue;
    if (first == nullptr) first = a.core;
    if (&a.core->runtime() != &first->runtime())
      throw InvalidArgument(fmt::format("call on the {}: the {} belongs to another hdsm::Runtime",
                                        first->name(), a.core->name()));
  }
  held_.reserve(held_.size() + args.size());
  for (const ContainerLaunchArg& a : args) {
    if (a.core == nullptr || a.extent.rows == 0 || a.extent.cols == 0) continue;
    const std::uint32_t copy = a.core->hold(device, a.extent);
    held_.emplace_back(a.core, copy);
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
