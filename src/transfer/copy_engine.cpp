#include "transfer/copy_engine.hpp"

#include "device/event_state.hpp"
#include "obs/lock_wait.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstring>
#include <exception>

namespace hdsm::transfer {

Event all_of(std::vector<Event> events) {
  std::erase_if(events, [](const Event& e) { return e.state() == nullptr; });
  if (events.empty()) return {};
  if (events.size() == 1) return std::move(events.front());
  struct Join {
    explicit Join(std::size_t n) : left(n) {}
    std::atomic<std::size_t> left;
    std::mutex mutex;
    std::exception_ptr first;
  };
  auto state = std::make_shared<detail::EventState>();
  auto join = std::make_shared<Join>(events.size());
  for (const Event& e : events)
    e.state()->then([state, join](const std::exception_ptr& error) {
      if (error) {
        std::lock_guard lock(join->mutex);
        if (!join->first) join->first = error;
      }
      if (join->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
      std::exception_ptr first;
      {
        std::lock_guard lock(join->mutex);
        first = join->first;
      }
      state->complete(first);
    });
  return Event(state);
}

Topology stated_topology(std::span<Device* const> devices, Topology host) {
  Topology t = std::move(host);
  t.devices.clear();
  const std::size_t n = devices.size();
  t.peer.assign(n * n, 0);
  for (std::size_t d = 0; d < n; ++d) {
    const DeviceProperties& p = devices[d]->properties();
    t.devices.push_back({p.copy_engines, p.link_gbps, p.link_gbps, p.latency_us});
    for (std::size_t s = 0; s < n; ++s)
      t.peer[d * n + s] = s != d && devices[d]->can_access_peer(*devices[s]) ? 1 : 0;
  }
  return t;
}

CopyEngine::CopyEngine(std::span<Device* const> devices, Topology topology, Options options, PoolSource pool,
                       obs::Counters* counters, obs::Tracer* tracer)
    : devices_(devices.begin(), devices.end()),
      topology_(std::move(topology)),
      options_(options),
      pool_(std::move(pool)),
      counters_(counters),
      tracer_(tracer != nullptr && tracer->enabled() ? tracer : nullptr),
      inbound_(devices_.size()),
      outbound_(devices_.size()),
      device_locks_() {
  for (unsigned d = 0; d < devices_.size(); ++d) device_locks_.emplace_back(os::LockRank::engine, d);
  if (topology_.devices.size() != devices_.size())
    throw InvalidArgument(fmt::format("copy engine: the topology describes {} devices, but there are {}",
                                      topology_.devices.size(), devices_.size()));
}

CopyEngine::~CopyEngine() {
  // The queues' destructors wait for the work they still hold (and so for the chunks it uses).
  inbound_.clear();
  outbound_.clear();
}

unsigned CopyEngine::index_of(const Device& device) const {
  const unsigned i = device.properties().index;
  if (i < devices_.size() && devices_[i] == &device) return i;
  for (std::size_t k = 0; k < devices_.size(); ++k)
    if (devices_[k] == &device) return static_cast<unsigned>(k);
  throw InvalidArgument(fmt::format("copy engine: {} is not one of its devices", device.name()));
}

Queue& CopyEngine::own_queue(const Device& device, bool inbound) {
  const unsigned i = index_of(device);
  std::lock_guard lock(queues_mutex_);
  std::unique_ptr<Queue>& q = (inbound ? inbound_ : outbound_)[i];
  if (!q) q = devices_[i]->create_queue();
  return *q;
}

Endpoint CopyEngine::endpoint(const CopyEnd& range, std::size_t bytes, const Device* peer) const {
  if (range.on_device()) return Endpoint::on(index_of(*range.device));
  return Endpoint::host(peer != nullptr && bytes > 0 && peer->is_pinned(range.host, bytes));
}

CopyPlan CopyEngine::plan(const CopyEnd& dst, const CopyEnd& src, std::size_t bytes) const {
  return plan_copy(endpoint(src, bytes, dst.device), endpoint(dst, bytes, src.device), bytes, topology_,
                   options_);
}

CopyEngine::Started CopyEngine::start(const CopyEnd& dst, const CopyEnd& src, std::size_t bytes,
                                      bool order_after) {
  const auto begin = obs::Clock::now();
  Started started{plan(dst, src, bytes), {}};
  CopyPlan& p = started.plan;
  std::vector<StagingPool::Lease> leases;
  if (p.buffers > 0) {
    // Between two devices without peer access staging is the only route: wait for a chunk. Otherwise
    // take one only if free (a caller may hold chunks itself, as I/O does) and go direct if none is.
    const bool only_route = p.src.is_device() && p.dst.is_device();
    leases = pool_().lease(p.buffers, only_route ? StagingPool::Wait::for_first : StagingPool::Wait::never);
    if (leases.size() < p.buffers) {
      Options fewer = options_;
      fewer.buffers = static_cast<unsigned>(leases.size());
      p = plan_copy(p.src, p.dst, bytes, topology_, fewer);
      while (leases.size() > p.buffers) leases.pop_back();  // the plan may not stage any more
    }
  }
  started.done = run(p, dst, src, std::move(leases), order_after);
  if (counters_ != nullptr) counters_->copy(p.route).add(bytes);
  if (tracer_ != nullptr)
    tracer_->span(tracer_->host_thread_lane(), "copy " + p.describe(), begin, obs::Clock::now(), bytes);
  return started;
}

CopyPlan CopyEngine::copy(const CopyEnd& dst, const CopyEnd& src, std::size_t bytes) {
  Started s = start(dst, src, bytes, false);
  s.done.wait();
  return std::move(s.plan);
}

Event CopyEngine::run(const CopyPlan& plan, const CopyEnd& dst, const CopyEnd& src,
                      std::vector<StagingPool::Lease> leases, bool order_after) {
  if (plan.steps.empty()) return {};
  constexpr auto kSource = static_cast<std::size_t>(Lane::source),
                 kDest = static_cast<std::size_t>(Lane::destination);
  const bool between_devices = src.on_device() && dst.on_device() && src.device != dst.device;

  // The queue of each device lane, and which ranges' earlier work it must follow.
  std::array<Queue*, 3> lanes{};
  std::array<bool, 3> reads_src{}, writes_dst{};
  for (const Step& s : plan.steps) {
    const auto l = static_cast<std::size_t>(s.lane);
    reads_src[l] |= s.from == Place::source;
    writes_dst[l] |= s.to == Place::destination;
    if (s.lane == Lane::host || lanes[l] != nullptr) continue;
    const CopyEnd& own = s.lane == Lane::source ? src : dst;
    lanes[l] = between_devices || own.queue == nullptr ? &own_queue(*own.device, s.lane == Lane::destination)
                                                       : own.queue;
  }
  const auto range_queue = [](const CopyEnd& r) { return r.on_device() ? r.queue : nullptr; };
  struct Order {
    Queue* lane;
    Queue* range;
  };
  std::vector<Order> before;
  for (std::size_t l : {kSource, kDest}) {
    if (lanes[l] == nullptr) continue;
    for (const auto& [touches, range] :
         {std::pair{reads_src[l], range_queue(src)}, std::pair{writes_dst[l], range_queue(dst)}})
      if (touches && range != nullptr && range != lanes[l]) before.push_back({lanes[l], range});
  }
  // Cross-queue waits of plans enqueued concurrently must not form a cycle: plans that share a device
  // enqueue one at a time, under the locks of their devices taken in index order (plans between other
  // devices touch other queues and go on at once). They have no host steps, so nothing waits on the
  // host under the locks.
  std::array<std::unique_lock<os::RankedMutex<std::mutex>>, 2> locks;
  if (!before.empty() ||
      (lanes[kSource] != nullptr && lanes[kDest] != nullptr && lanes[kSource] != lanes[kDest])) {
    unsigned first = src.on_device() ? index_of(*src.device) : index_of(*dst.device);
    unsigned second = dst.on_device() ? index_of(*dst.device) : first;
    if (second < first) std::swap(first, second);
    const obs::LockWaitSink sink{counters_, tracer_, "lock wait: copy engine"};
    locks[0] = obs::lock_counting_wait(device_locks_[first], sink);
    if (second != first) locks[1] = obs::lock_counting_wait(device_locks_[second], sink);
  }
  const auto unlock = [&locks] {
    for (auto it = locks.rbegin(); it != locks.rend(); ++it)
      if (it->owns_lock()) it->unlock();
  };

  struct SlotUse {
    Event last;  // completes when the last step using the slot has
    Lane lane = Lane::host;
    bool used = false;
  };
  std::vector<SlotUse> slots(leases.size());
  const auto host_at = [&](Place place, const Step& s) -> std::byte* {
    switch (place) {
      case Place::source:
        return src.host + s.offset;
      case Place::destination:
        return dst.host + s.offset;
      case Place::slot:
        break;
    }
    return leases[static_cast<std::size_t>(s.slot)].data();
  };
  try {
    for (const Order& o : before) o.lane->wait(o.range->record());
    for (const Step& s : plan.steps) {
      SlotUse* slot = s.slot >= 0 ? &slots[static_cast<std::size_t>(s.slot)] : nullptr;
      const bool follows = slot != nullptr && slot->used && slot->lane != s.lane;
      if (s.lane == Lane::host) {
        if (follows) slot->last.wait();
        std::memmove(host_at(s.to, s), host_at(s.from, s), s.bytes);
        if (slot != nullptr) *slot = {Event{}, Lane::host, true};
        continue;
      }
      Queue& q = *lanes[static_cast<std::size_t>(s.lane)];
      if (follows && slot->lane != Lane::host) q.wait(slot->last);
      switch (s.op) {
        case Op::to_device:
          q.copy_to_device(dst.buffer, dst.offset + s.offset, host_at(s.from, s), s.bytes);
          break;
        case Op::to_host:
          q.copy_to_host(host_at(s.to, s), src.buffer, src.offset + s.offset, s.bytes);
          break;
        case Op::on_device:
          q.copy_on_device(dst.buffer, dst.offset + s.offset, src.buffer, src.offset + s.offset, s.bytes);
          break;
        case Op::from_peer:
          q.copy_from_peer(dst.buffer, dst.offset + s.offset, *src.device, src.buffer, src.offset + s.offset,
                           s.bytes);
          break;
        case Op::host_copy:
          throw std::logic_error("copy engine: a host copy planned on a device lane");
      }
      if (slot != nullptr) *slot = {q.record(), s.lane, true};
    }
    // Completion: the last queue to finish records once it has waited for the other.
    Queue* last = lanes[kDest] != nullptr ? lanes[kDest] : lanes[kSource];
    Queue* other = last == lanes[kDest] ? lanes[kSource] : nullptr;
    if (other != nullptr && other != last) last->wait(other->record());
    Event done = last != nullptr ? last->record() : Event{};
    if (order_after)
      for (Queue* range : {range_queue(src), range_queue(dst)})
        if (range != nullptr && range != last) range->wait(done);
    unlock();
    if (!leases.empty() && done.state() != nullptr) {
      auto held = std::make_shared<std::vector<StagingPool::Lease>>(std::move(leases));
      done.state()->then([held](const std::exception_ptr&) { held->clear(); });
    }
    return done;
  } catch (...) {
    unlock();
    // The chunks go back with the leases: first let the steps already enqueued finish.
    for (Queue* q : {lanes[kSource], lanes[kDest]}) {
      if (q == nullptr) continue;
      try {
        q->record().wait();
      } catch (const std::exception&) {  // the error being thrown already says what failed
      }
    }
    throw;
  }
}

}  // namespace hdsm::transfer
