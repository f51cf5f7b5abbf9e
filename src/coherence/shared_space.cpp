#include "coherence/shared_space.hpp"
#include "os/fault_path.hpp"

#include "coherence/plan.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <exception>

namespace hdsm::coherence {

namespace {

bool permits(Protection p, bool write) { return p >= (write ? Protection::read_write : Protection::read); }

std::uint64_t monotonic_ns() noexcept {  // async-signal-safe, unlike std::chrono's guarantees
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(t.tv_nsec);
}

}  // namespace

SharedSpace::SharedSpace(std::span<Device* const> devices, ProtocolKind kind, std::size_t block_bytes,
                         obs::Counters& counters, SpaceTuning tuning, obs::Tracer* tracer, CopySetup copies)
    : kind_(kind),
      counters_(counters),
      tracer_(tracer != nullptr && tracer->enabled() ? tracer : nullptr),
      time_faults_(counters.time_faults || tracer_ != nullptr),
      devices_(devices.begin(), devices.end()),
      arena_(static_cast<unsigned>(devices.size()), tuning.segment_bytes, tuning.arena_keep_bytes),
      directory_(arena_, block_bytes),
      rolling_step_(tuning.rolling_step),
      read_ahead_(std::max(1u, tuning.read_ahead)),
      sync_prefetch_bytes_(kind == ProtocolKind::batch ? 0 : tuning.sync_prefetch_bytes) {
  if (devices_.empty()) throw InvalidArgument("shared space: no devices");
  // Rolling-window ids pack the object id and the block index into 32 bits each.
  if (tuning.segment_bytes / block_bytes > (std::size_t{1} << 32))
    throw InvalidArgument(fmt::format("shared space: segments of {} hold more than 2^32 blocks of {}",
                                      format_bytes(tuning.segment_bytes), format_bytes(block_bytes)));
  for (Device* d : devices_) queues_.push_back(d->create_queue());
  device_objects_.resize(devices_.size());
  if (copies.topology.devices.empty())
    copies.topology = transfer::stated_topology(devices_, std::move(copies.topology));
  if (!copies.pool) {
    const std::size_t chunk = copies.options.chunk_bytes;
    copies.pool = [this, chunk]() -> StagingPool& {
      std::lock_guard lock(pool_mutex_);
      if (!own_pool_)
        own_pool_ =
            std::make_unique<StagingPool>(*devices_.front(), std::max(kDefaultStagingBytes, chunk), chunk);
      return *own_pool_;
    };
  }
  engine_ = std::make_unique<transfer::CopyEngine>(devices_, std::move(copies.topology), copies.options,
                                                   std::move(copies.pool), &counters_, tracer_);
  if (tracer_ != nullptr) fault_lane_ = tracer_->lane("shared-memory faults");
  // One fault service per device (the segment a fault is in names it), so faults on objects of
  // different devices resolve in parallel.
  for (unsigned d = 0; d < arena_.segments(); ++d)
    fault_services_.push_back(std::make_unique<os::FaultService>(&SharedSpace::resolve_on_service, this));
  os::install_fault_handler();
  fault_range_ = os::register_fault_range(arena_.user(0, 0), arena_.segments() * arena_.segment_bytes(),
                                          &SharedSpace::resolve, this);
}

SharedSpace::~SharedSpace() {
  os::unregister_fault_range(fault_range_);
  fault_services_.clear();
  for (auto& queue : queues_) {
    try {
      queue->synchronize();
    } catch (const std::exception&) {  // a kernel error nobody acquired; the space goes away anyway
    }
  }
  engine_.reset();  // its queues finish what they hold, handing the staging chunks back
  for (auto& [id, e] : objects_) {
    e->protection.reset();
    try {
      devices_[e->device]->free(e->buffer);
    } catch (const std::exception&) {
    }
  }
  objects_.clear();
  device_objects_.clear();
  queues_.clear();
}

std::size_t SharedSpace::rolling_capacity() const {
  std::lock_guard lock(window_mutex_);
  return window_.capacity();
}

void SharedSpace::check_device(unsigned device, const char* call) const {
  if (device >= devices_.size())
    throw InvalidArgument(
        fmt::format("{}: device {} does not exist ({} devices)", call, device, devices_.size()));
}

std::shared_ptr<SharedSpace::Entry> SharedSpace::entry_of(ObjectId id) const {
  std::lock_guard lock(objects_mutex_);
  const auto it = objects_.find(id);
  return it == objects_.end() ? nullptr : it->second;
}

void* SharedSpace::alloc(std::size_t bytes, unsigned device) {
  check_device(device, "SharedSpace::alloc");
  const ObjectId id = directory_.insert(device, bytes);
  Object* object = directory_.find(id);
  auto e = std::make_shared<Entry>();
  e->object = object;
  e->device = device;
  bool inserted = false;
  try {
    e->buffer = devices_[device]->alloc(bytes);
    const Transition start = initial(kind_);
    e->protection.emplace(directory_.user(*object), object->blocks, directory_.block_bytes(),
                          fmt::format("shared object #{} ({})", id, format_bytes(bytes)), start.protection,
                          kRunBudget);
    object->states.assign(object->blocks, start.next);
    if (kind_ == ProtocolKind::rolling) e->window_places.assign(object->blocks, RollingWindow::kOutside);
    object->owner.store(e.get(), std::memory_order_release);
    // The host view starts as zeros; so must the device copy. A device that does not hand out
    // zeroed buffers (poisoning, or the sim device) gets them filled. Before the entry is published:
    // another thread's unannotated call selects every object of the device, and sets `pending` under
    // the entry's lock.
    if (!devices_[device]->properties().zeroed_alloc) {
      queues_[device]->fill(e->buffer, 0, bytes, 0);
      e->pending = queues_[device]->record();
    }
    {
      std::lock_guard lock(objects_mutex_);
      e->epoch = walks_;
      inserted = true;  // before the emplaces: a failed second one must undo the first
      objects_.emplace(id, e);
      device_objects_[device].emplace(id, e);
    }
  } catch (...) {
    if (inserted) {
      std::lock_guard lock(objects_mutex_);
      objects_.erase(id);
      device_objects_[device].erase(id);
    }
    e->protection.reset();
    if (e->buffer) devices_[device]->free(e->buffer);
    directory_.erase(id);
    throw;
  }
  if (kind_ == ProtocolKind::rolling) {
    // At least two blocks: one instruction may write two (a store across a block boundary), and a
    // window of one evicted the first block as the second faulted, then the second as the first
    // faulted again, for good (HDSM_ROLLING_STEP=1 with one object).
    std::lock_guard lock(window_mutex_);
    window_.grow(rolling_objects_++ == 0 ? std::max<std::size_t>(rolling_step_, 2) : rolling_step_);
  }
  return directory_.user(*object);
}

void SharedSpace::check_free(const void* p) const {
  const Object* object = directory_.object_at_start(p);
  if (object == nullptr || entry_of(object->id) == nullptr)
    throw InvalidPointer(
        fmt::format("free({}): not the start of a live shared object: {}", p, directory_.describe(p)));
}

void SharedSpace::free(void* p) {
  Object* object = directory_.object_at_start(p);
  std::shared_ptr<Entry> e = object != nullptr ? entry_of(object->id) : nullptr;
  if (e == nullptr) {
    check_free(p);  // names what p is
    throw InvalidPointer(fmt::format("free({}): freed by another thread meanwhile", p));
  }
  const ObjectId id = object->id;
  std::lock_guard lock(e->mutex);
  try {
    e->pending.wait();
  } catch (const std::exception&) {  // a failed upload of data that is being thrown away
  }
  settle_on_host(*e);  // copies into or out of the buffer that is about to go
  object->owner.store(nullptr, std::memory_order_release);
  e->live = false;
  if (kind_ == ProtocolKind::rolling) {
    std::lock_guard window_lock(window_mutex_);
    for (RollingWindow::Place& place : e->window_places) window_.remove(place);
    // The rolling size follows the live objects (what alloc added): a program that allocates and
    // frees in a loop would otherwise grow it without bound, until no block was ever evicted early.
    window_.shrink(--rolling_objects_ == 0 ? window_.capacity() : rolling_step_);
  }
  {
    std::lock_guard objects_lock(objects_mutex_);
    objects_.erase(id);
    device_objects_[e->device].erase(id);
  }
  e->protection.reset();
  devices_[e->device]->free(e->buffer);
  directory_.erase(id);
}

KernelArg SharedSpace::argument(const void* p) const {
  const auto [e, offset] = live_entry(p, "kernel argument");
  return KernelArg::buffer(e->buffer, offset);
}

std::uint64_t SharedSpace::device_address(const void* p) const {
  const Directory::Hit hit = directory_.lookup_argument(p);
  const std::shared_ptr<Entry> e = hit.object != nullptr ? entry_of(hit.object->id) : nullptr;
  if (e == nullptr) throw InvalidArgument(not_live(fmt::format("safe({})", p).c_str(), p));
  return devices_[e->device]->address(e->buffer, hit.offset_in_object);
}

void SharedSpace::launch(unsigned device, const Kernel& kernel, const Launch& shape,
                         std::span<const KernelArg> args) {
  check_device(device, "SharedSpace::launch");
  queues_[device]->launch(kernel, shape, args);
}

std::vector<SharedSpace::Selected> SharedSpace::select(unsigned device, std::span<const ObjectUse> uses,
                                                       const char* call, bool skip_freed) const {
  check_device(device, call);
  if (uses.empty()) return select_all(device, nullptr, nullptr);
  std::vector<Selected> out;
  for (const ObjectUse& u : uses) {
    const void* p = u.pointer;
    // With skip_freed another thread may be freeing the object: its fields are read under the
    // directory's lock, which erase() holds while it resets them.
    Directory::Hit hit;
    ObjectId id = 0;
    std::size_t object_bytes = 0;
    if (skip_freed) {
      const std::optional<Directory::Found> found = directory_.lookup_values(p);
      if (!found) continue;
      id = found->id;
      object_bytes = found->bytes;
      hit.offset_in_object = found->offset_in_object;
    } else {
      hit = directory_.lookup(p);
      if (hit.object != nullptr) {
        id = hit.object->id;
        object_bytes = hit.object->bytes;
      }
    }
    std::shared_ptr<Entry> e = id != 0 ? entry_of(id) : nullptr;
    // With skip_freed, whatever no longer fits (the object freed, or another made at its address
    // since) is another thread's doing after the call's release, which checked these uses.
    if (e == nullptr) {
      if (skip_freed) continue;
      throw InvalidArgument(not_live(call, p));
    }
    if (e->device != device) {
      if (skip_freed) continue;
      throw InvalidArgument(fmt::format("{}: shared object #{} at {} lives on device {}, not on device {}",
                                        call, id, p, e->device, device));
    }
    const std::size_t offset = u.bytes == ObjectUse::kWholeObject ? 0 : hit.offset_in_object;
    const std::size_t bytes = u.bytes == ObjectUse::kWholeObject ? object_bytes : u.bytes;
    if (offset + bytes > object_bytes || bytes == 0) {
      if (skip_freed) continue;
      throw InvalidArgument(fmt::format("{}: {} bytes from {} are not within shared object #{} ({} bytes)",
                                        call, bytes, p, id, object_bytes));
    }
    out.push_back({std::move(e), u.use, offset, bytes});
  }
  return out;
}

std::vector<SharedSpace::Selected> SharedSpace::select_all(unsigned device, std::uint64_t* walk,
                                                           const std::uint64_t* seen_by) const {
  std::vector<Selected> out;
  std::lock_guard lock(objects_mutex_);
  if (walk != nullptr) *walk = ++walks_;
  out.reserve(device_objects_[device].size());
  for (const auto& [id, e] : device_objects_[device])
    if (seen_by == nullptr || e->epoch < *seen_by)
      out.push_back({e, KernelUse::unknown, 0, e->object->bytes});
  return out;
}

void SharedSpace::trace(std::string_view what, obs::Clock::time_point begin, std::size_t bytes,
                        int lane) const {
  if (tracer_ == nullptr) return;
  tracer_->span(lane >= 0 ? lane : tracer_->host_thread_lane(), what, begin, obs::Clock::now(), bytes);
}

std::size_t SharedSpace::copy_blocks(Entry& e, Transfer direction, std::size_t first, std::size_t count,
                                     Action why) {
  const Object& o = *e.object;
  const std::size_t offset = first * directory_.block_bytes();
  const std::size_t bytes = std::min(count * directory_.block_bytes(), o.bytes - offset);
  std::byte* shadow = arena_.shadow(o.segment, o.offset + offset);
  settle(e, offset, bytes, direction == Transfer::to_device);
  Queue& queue = *queues_[e.device];
  if (direction == Transfer::to_device)
    queue.copy_to_device(e.buffer, offset, shadow, bytes);
  else
    queue.copy_to_host(shadow, e.buffer, offset, bytes);
  counters_.action(why).add(bytes);
  return bytes;
}

void SharedSpace::forget_clean(Entry& e, std::size_t first, std::size_t end) {
  if (kind_ != ProtocolKind::rolling) return;
  std::lock_guard lock(window_mutex_);
  for (std::size_t b = first; b < end; ++b)
    if (e.object->states[b] != BlockState::dirty) window_.remove(e.window_places[b]);
}

void SharedSpace::note_copy(Entry& e, std::size_t offset, std::size_t bytes, bool writes, Event done) {
  std::erase_if(e.copies, [](const AsyncCopy& c) { return c.done.query(); });
  if (!done.query()) e.copies.push_back({offset, bytes, writes, std::move(done)});
}

void SharedSpace::settle(Entry& e, std::size_t offset, std::size_t bytes, bool writes) {
  if (e.copies.empty()) return;
  Queue& queue = *queues_[e.device];
  std::erase_if(e.copies, [&](const AsyncCopy& c) {
    if (c.done.query()) return true;
    const bool overlap = c.offset < offset + bytes && offset < c.offset + c.bytes;
    if (!overlap || !(writes || c.writes)) return false;
    queue.wait(c.done);
    return true;
  });
}

void SharedSpace::settle_on_host(Entry& e) {
  for (const AsyncCopy& c : e.copies) {
    try {
      c.done.wait();
    } catch (const std::exception&) {  // its error went to the caller that started it
    }
  }
  e.copies.clear();
}

void SharedSpace::wait_transfers() {
  for (auto& queue : queues_) queue->synchronize();
}

void SharedSpace::release(unsigned device, std::span<const ObjectUse> uses, std::uint64_t* walk) {
  const auto begin = obs::Clock::now();
  std::size_t bytes = 0;
  check_device(device, "SharedSpace::release");
  for (auto& [e, use, offset, range] :
       uses.empty() ? select_all(device, walk, nullptr) : select(device, uses, "SharedSpace::release")) {
    std::lock_guard lock(e->mutex);
    if (!e->live) continue;                           // freed by another thread since it was selected
    settle(*e, offset, range, use != KernelUse::in);  // the kernel's own bytes
    const CoherencePlan plan = plan_release(kind_, e->object->states, use);
    // An object the sync will fetch anyway keeps its host view through the call: taking the access
    // away now and giving it back at the sync costs two protection changes (on a VM, TLB-shootdown
    // interrupts to every vCPU) for nothing a data-race-free program can see, since it does not touch
    // the object between the call and the sync.
    if (!plan.protections.empty() && keeps_view(*e)) {
      e->kept_view = true;
      counters_.kept_views.fetch_add(1, std::memory_order_relaxed);
    } else {
      for (const ProtectionRun& run : plan.protections)
        e->protection->set(run.first_block, run.blocks, run.protection);
      e->protection->regain_granularity();
    }
    for (const CopyStep& step : plan.copies)
      bytes += copy_blocks(*e, step.direction, step.first_block, step.blocks, Action::release);
    if (!plan.copies.empty()) e->pending = queues_[device]->record();
    forget_clean(*e, 0, e->object->blocks);
  }
  if (tracer_ != nullptr) trace(fmt::format("release on device {}", device), begin, bytes);
}

void SharedSpace::acquire(unsigned device, std::span<const ObjectUse> uses, const Event* after,
                          const std::uint64_t* walk) {
  std::vector<Selected> selected;
  if (walk == nullptr) {
    selected = select(device, uses, "SharedSpace::acquire", /*skip_freed=*/true);
  } else {
    // Objects freed since are gone from the table; an object named in `uses` as well is acquired
    // once, as the unknown use covers every other.
    check_device(device, "SharedSpace::acquire");
    selected = select_all(device, nullptr, walk);
    if (!uses.empty())
      for (Selected& s : select(device, uses, "SharedSpace::acquire", /*skip_freed=*/true))
        if (s.entry->epoch >= *walk) selected.push_back(std::move(s));
  }
  // A failed kernel (or copy) before the acquire: the objects come back all the same, with whatever
  // content the failed work left, and the error is thrown once they have (the queue reported it
  // once, to this wait, and goes on).
  std::exception_ptr failed;
  try {
    if (after != nullptr)
      after->wait();
    else
      queues_[device]->synchronize();
  } catch (...) {
    failed = std::current_exception();
  }
  const auto begin = obs::Clock::now();
  std::size_t bytes = 0;
  for (auto& [e, use, offset, range] : selected) {
    try {
      std::lock_guard lock(e->mutex);
      if (!e->live) continue;  // freed by another thread since it was selected: nothing to bring back
      const CoherencePlan plan = plan_acquire(kind_, e->object->states, use);
      for (const CopyStep& step : plan.copies)
        bytes += copy_blocks(*e, step.direction, step.first_block, step.blocks, Action::acquire);
      if (!plan.copies.empty()) queues_[device]->record().wait();
      for (const ProtectionRun& run : plan.protections)
        e->protection->set(run.first_block, run.blocks, run.protection);
      bytes += sync_prefetch(*e);
      if (e->kept_view) restore_view(*e);
      e->protection->regain_granularity();
      forget_clean(*e, 0, e->object->blocks);
    } catch (...) {
      // After a failure, a copy may fail of it too (a device whose errors stick): the first failure,
      // which names the kernel, is the one thrown, and the other objects are still acquired.
      if (!failed) throw;
    }
  }
  if (tracer_ != nullptr) trace(fmt::format("acquire on device {}", device), begin, bytes);
  if (failed) std::rethrow_exception(failed);
}

Event SharedSpace::record(unsigned device) {
  check_device(device, "SharedSpace::record");
  return queues_[device]->record();
}

void SharedSpace::order(unsigned device, unsigned before) {
  check_device(device, "SharedSpace::order");
  check_device(before, "SharedSpace::order");
  if (device != before) queues_[device]->wait(queues_[before]->record());
}

std::pair<std::shared_ptr<SharedSpace::Entry>, std::size_t> SharedSpace::live_entry(const void* p,
                                                                                    const char* call) const {
  const Directory::Hit hit = directory_.lookup_argument(p);
  std::shared_ptr<Entry> e = hit.object != nullptr ? entry_of(hit.object->id) : nullptr;
  if (e == nullptr) throw InvalidArgument(not_live(call, p));
  return {std::move(e), hit.offset_in_object};
}

std::string SharedSpace::not_live(const char* call, const void* p) const {
  // The directory drops an object after the table of entries does: in between, another thread's free()
  // is under way, and resets the object's fields (read here under the directory's lock).
  if (const std::optional<Directory::Found> found = directory_.lookup_values(p))
    return fmt::format("{}: {} is in shared object #{} ({}), which another thread is freeing", call, p,
                       found->id, format_bytes(found->bytes));
  return fmt::format("{}: {} is not in a live shared object: {}", call, p, directory_.describe(p));
}

std::optional<KernelArg> SharedSpace::peer_argument(unsigned device, const void* p) const {
  check_device(device, "SharedSpace::peer_argument");
  const auto [e, offset] = live_entry(p, "SharedSpace::peer_argument");
  if (e->device == device) return KernelArg::buffer(e->buffer, offset);
  return devices_[device]->peer_argument(*devices_[e->device], e->buffer, offset);
}

SharedSpace::Temporary SharedSpace::copy_in(unsigned device, const void* p) {
  check_device(device, "SharedSpace::copy_in");
  const std::shared_ptr<Entry> e = live_entry(p, "SharedSpace::copy_in").first;
  const std::size_t bytes = e->object->bytes;
  {
    std::lock_guard lock(e->mutex);
    settle(*e, 0, bytes, false);
  }
  const Temporary temp{devices_[device]->alloc(bytes)};
  try {
    const auto to = transfer::CopyEnd::device_memory(*devices_[device], temp.buffer, 0, *queues_[device]);
    // Counted as the call's uploads are (and the copy back as the sync's downloads): every
    // transfer of shared memory counts under one action.
    counters_.action(Action::release)
        .add(engine_->start(to, device_range(*e, 0), bytes, true).plan.link_bytes());
  } catch (...) {
    devices_[device]->free(temp.buffer);
    throw;
  }
  return temp;
}

KernelArg SharedSpace::argument(const Temporary& temp, const void* p) const {
  return KernelArg::buffer(temp.buffer, live_entry(p, "SharedSpace::argument").second);
}

Event SharedSpace::copy_back(unsigned device, const Temporary& temp, const void* p) {
  check_device(device, "SharedSpace::copy_back");
  const std::shared_ptr<Entry> e = live_entry(p, "SharedSpace::copy_back").first;
  {
    std::lock_guard lock(e->mutex);
    settle(*e, 0, e->object->bytes, true);
  }
  const auto from = transfer::CopyEnd::device_memory(*devices_[device], temp.buffer, 0, *queues_[device]);
  transfer::CopyEngine::Started s = engine_->start(device_range(*e, 0), from, e->object->bytes, true);
  counters_.action(Action::acquire).add(s.plan.link_bytes());
  return std::move(s.done);
}

void SharedSpace::free_temporary(unsigned device, const Temporary& temp) {
  check_device(device, "SharedSpace::free_temporary");
  devices_[device]->free(temp.buffer);
}

HDSM_FAULT_PATH bool SharedSpace::resolve(void* context, void* address, os::FaultAccess access) {
  auto* self = static_cast<SharedSpace*>(context);
  os::FaultService& service = *self->fault_services_[self->arena_.segment_of(address)];
  if (!self->time_faults_)
    return self->resolve_in_handler(address, access) || service.submit(address, access);
  const std::uint64_t begin = monotonic_ns();
  const bool resolved = self->resolve_in_handler(address, access) || service.submit(address, access);
  self->counters_.fault_handler_ns.fetch_add(monotonic_ns() - begin, std::memory_order_relaxed);
  return resolved;
}

HDSM_FAULT_PATH bool SharedSpace::resolve_in_handler(void* address, os::FaultAccess access) noexcept {
  // Traced faults take the service path, which can format their spans.
  if (access != os::FaultAccess::write || kind_ == ProtocolKind::batch || tracer_ != nullptr) return false;
  const Directory::Hit hit = directory_.lookup(address);
  if (hit.object == nullptr) return false;
  auto* e = static_cast<Entry*>(hit.object->owner.load(std::memory_order_acquire));
  if (e == nullptr) return false;
  std::unique_lock lock(e->mutex, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  std::vector<BlockState>& states = e->object->states;
  os::ProtectionMap& protection = *e->protection;
  const bool lazy = kind_ == ProtocolKind::lazy;
  const std::size_t first = lazy ? 0 : hit.block, end = lazy ? states.size() : hit.block + 1;
  for (std::size_t b = first; b < end; ++b)
    if (states[b] != BlockState::read_only) return false;
  // A lazy object is one run of one mapping, so its mprotect cannot stop half way.
  if (lazy && protection.runs() != 1) return false;
  // A block that would overflow the rolling window needs an eviction, which moves data: the service
  // does that. Room is checked before anything changes, so the add below cannot fail (this thread
  // holds the window's lock from the check on).
  std::unique_lock<os::RankedMutex<os::FaultMutex>> window_lock;
  if (!lazy) {
    window_lock = std::unique_lock(window_mutex_, std::try_to_lock);
    if (!window_lock.owns_lock() || !window_.can_add() ||
        RollingWindow::contains(e->window_places[hit.block]))
      return false;
  }
  // Everything is recorded before the mprotect and undone if it fails: the mprotect flushes the
  // TLB, and every page touched after it costs a page walk (docs/benchmarks.md).
  const Transition t = coherence::on_fault(kind_, BlockState::read_only, Access::write);
  RollingWindow::Place* const place = lazy ? nullptr : &e->window_places[hit.block];
  const auto set_states = [&](BlockState s) { std::fill(states.data() + first, states.data() + end, s); };
  set_states(t.next);
  if (place != nullptr) window_.try_add(block_id(hit.object->id, hit.block), *place);  // room checked above
  counters_.write_faults.fetch_add(1, std::memory_order_relaxed);
  if (!protection.try_set(first, end - first, t.protection)) {
    set_states(BlockState::read_only);
    if (place != nullptr) window_.remove(*place);  // the newest block: the window is as it was
    counters_.write_faults.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

bool SharedSpace::resolve_on_service(void* context, void* address, os::FaultAccess access) {
  return static_cast<SharedSpace*>(context)->on_fault(address, access);
}

bool SharedSpace::on_fault(void* address, os::FaultAccess access) {
  const Directory::Hit hit = directory_.lookup(address);
  const std::shared_ptr<Entry> e = hit.object != nullptr ? entry_of(hit.object->id) : nullptr;
  if (e == nullptr) {
    // A real bug (use after free, a stray pointer): say what the address was before the process dies.
    std::fputs(
        fmt::format("hdsm: invalid {} access: {}\n", os::to_string(access), directory_.describe(address))
            .c_str(),
        stderr);
    return false;
  }
  const auto begin = obs::Clock::now();
  std::size_t fetched = 0;
  bool write = false;
  std::optional<RollingWindow::BlockId> victim;
  {
    std::lock_guard lock(e->mutex);
    if (!e->live) return false;  // freed by another thread while this one touched it
    os::ProtectionMap& protection = *e->protection;
    // Undecoded accesses are reads first; a write then faults again on the readable block.
    write = access == os::FaultAccess::write ||
            (access == os::FaultAccess::unknown && protection.allows(hit.block, false));
    if (protection.allows(hit.block, write)) {
      // The kernel refused an access the map allows: another thread resolved it since (the retry then
      // passes), or the program itself changed this memory (mprotect, munmap) or runs code in it,
      // which no retry fixes: the same address, again and again with no resolution in between, ends
      // the process with a word instead of spinning in faults for good.
      constexpr unsigned kMaxSpurious = 100;
      e->spurious = e->spurious_at == address ? e->spurious + 1 : 1;
      e->spurious_at = address;
      if (e->spurious >= kMaxSpurious) {
        std::fputs(fmt::format("hdsm: the {} at {} in shared object #{} was refused {} times in a row though "
                               "its protection allows it: the program changed this memory's protection or "
                               "mapping (mprotect, munmap, mremap, madvise) or runs code in it, which shared "
                               "memory does not support\n",
                               os::to_string(access), address, hit.object->id, e->spurious)
                       .c_str(),
                   stderr);
        return false;
      }
      protection.refine(hit.block);
      return true;
    }
    e->spurious_at = nullptr;  // a fault this one resolves
    e->pending.wait();
    std::vector<BlockState>& states = e->object->states;
    // Lazy-update moves whole objects, rolling-update single blocks.
    const std::size_t first = kind_ == ProtocolKind::lazy ? 0 : hit.block;
    std::size_t end = kind_ == ProtocolKind::lazy ? states.size() : hit.block + 1;
    if (kind_ == ProtocolKind::rolling && !write) end = read_ahead_end(*e, hit.block);
    std::vector<Transition> next(end - first);
    std::size_t fetch_first = end, fetch_end = first;
    for (std::size_t b = first; b < end; ++b) {
      if (permits(protection_of(kind_, states[b]), write)) {
        next[b - first] = {states[b], protection_of(kind_, states[b]), Transfer::none};
        continue;
      }
      next[b - first] = coherence::on_fault(kind_, states[b], write ? Access::write : Access::read);
      if (next[b - first].transfer == Transfer::to_host) {
        fetch_first = std::min(fetch_first, b);
        fetch_end = b + 1;
      }
    }
    // Blocks in between that needed no fetch are not dirty (a fault never skips a dirty block of a
    // lazy object: its blocks share one state), so refetching them loses nothing.
    if (fetch_first < fetch_end) {
      fetched = copy_blocks(*e, Transfer::to_host, fetch_first, fetch_end - fetch_first, Action::fault);
      queues_[e->device]->record().wait();
    }
    for (std::size_t b = first; b < end;) {
      const Protection p = next[b - first].protection;
      std::size_t run_end = b + 1;
      while (run_end < end && next[run_end - first].protection == p) ++run_end;
      protection.set(b, run_end - b, p);
      b = run_end;
    }
    for (std::size_t b = first; b < end; ++b) states[b] = next[b - first].next;
    if (fetched > 0) e->host_reads_back = true;
    (write ? counters_.write_faults : counters_.read_faults).fetch_add(1, std::memory_order_relaxed);
    if (kind_ == ProtocolKind::rolling && states[hit.block] == BlockState::dirty) {
      std::lock_guard window_lock(window_mutex_);
      victim = window_.on_dirty(block_id(hit.object->id, hit.block), e->window_places[hit.block]);
    }
  }
  if (tracer_ != nullptr)
    trace(fmt::format("{} fault, object #{} block {}", write ? "write" : "read", hit.object->id, hit.block),
          begin, fetched, fault_lane_);
  if (victim) evict(*victim);
  return true;
}

// A read fault on the block where the previous read fault's fetch ended continues a forward read:
// its run doubles, up to read_ahead_ blocks, and takes in the invalid blocks that follow the faulting
// one (it stops at any other state, so it never overwrites a block the host holds). Any other read
// fault fetches its block alone. A program that reads an object front to back then waits for
// log2(read_ahead_) round trips plus one per read_ahead_ blocks instead of one per block; one that
// stops early has fetched fewer blocks beyond what it read than it read since the run began, and at
// most read_ahead_ - 1.
std::size_t SharedSpace::read_ahead_end(Entry& e, std::size_t block) const {
  const std::vector<BlockState>& states = e.object->states;
  if (states[block] != BlockState::invalid) return block + 1;
  e.read_run = block == e.read_next ? std::min(2 * e.read_run, read_ahead_) : 1;
  const std::size_t limit = std::min(states.size(), block + e.read_run);
  std::size_t end = block + 1;
  while (end < limit && states[end] == BlockState::invalid) ++end;
  e.read_next = end;
  return end;
}

// A program that reads a result after every sync pays, per round, a fault, a hand-off to the fault
// service and a wait for the fetch there. Fetching small objects it read back before at the sync
// instead costs the same copy and protection change, without the fault. Each kSyncPrefetchProbe-th
// such sync leaves the object to fault, so that one the host stopped reading stops being fetched
// after at most kSyncPrefetchProbe - 1 wasted copies.
bool SharedSpace::keeps_view(const Entry& e) const {
  return e.host_reads_back && e.object->bytes <= sync_prefetch_bytes_ &&
         (e.prefetches + 1) % kSyncPrefetchProbe != 0;
}

void SharedSpace::restore_view(Entry& e) {
  e.kept_view = false;
  const std::vector<BlockState>& states = e.object->states;
  for (std::size_t b = 0; b < states.size();) {
    const Protection p = coherence::protection_of(kind_, states[b]);
    std::size_t end = b + 1;
    while (end < states.size() && coherence::protection_of(kind_, states[end]) == p) ++end;
    e.protection->set(b, end - b, p);
    b = end;
  }
}

std::size_t SharedSpace::sync_prefetch(Entry& e) {
  if (!e.host_reads_back || e.object->bytes > sync_prefetch_bytes_) return 0;
  if (++e.prefetches % kSyncPrefetchProbe == 0) {
    e.host_reads_back = false;
    return 0;
  }
  std::vector<BlockState>& states = e.object->states;
  std::vector<std::pair<std::size_t, std::size_t>> runs;  // [first, end) of invalid blocks
  for (std::size_t b = 0; b < states.size(); ++b) {
    if (states[b] != BlockState::invalid) continue;
    if (!runs.empty() && runs.back().second == b)
      ++runs.back().second;
    else
      runs.emplace_back(b, b + 1);
  }
  if (runs.empty()) return 0;
  e.pending.wait();
  std::size_t bytes = 0;
  for (const auto& [first, end] : runs)
    bytes += copy_blocks(e, Transfer::to_host, first, end - first, Action::acquire);
  queues_[e.device]->record().wait();
  const Transition read = coherence::on_fault(kind_, BlockState::invalid, Access::read);
  for (const auto& [first, end] : runs) {
    e.protection->set(first, end - first, read.protection);
    std::fill(states.begin() + static_cast<std::ptrdiff_t>(first),
              states.begin() + static_cast<std::ptrdiff_t>(end), read.next);
  }
  counters_.sync_prefetches.fetch_add(1, std::memory_order_relaxed);
  return bytes;
}

void SharedSpace::evict(RollingWindow::BlockId block) {
  const std::shared_ptr<Entry> e = entry_of(block >> 32);
  if (e == nullptr) return;
  const std::size_t index = block & 0xffffffffu;
  std::lock_guard lock(e->mutex);
  if (!e->live) return;  // freed since the window let it go
  BlockState& state = e->object->states[index];
  if (state != BlockState::dirty) return;  // released since the window let it go
  const Transition t = on_evict(kind_, state);
  e->protection->set(index, 1, t.protection);
  copy_blocks(*e, Transfer::to_device, index, 1, Action::evict);
  e->pending = queues_[e->device]->record();
  state = t.next;
}

}  // namespace hdsm::coherence
