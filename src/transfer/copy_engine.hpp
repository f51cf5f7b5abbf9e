// The copy engine: plans a copy between two ranges (plan.hpp) and runs the plan asynchronously on
// the devices' queues, returning the event of its completion. One engine serves a runtime's shared
// memory (bulk copies, I/O) and whatever else moves bytes between devices.
//
// Queues. A range in device memory names the in-order queue that orders the rest of its buffer's
// work (the shared space's queue of that device). Plans that touch one device (direct, on-device,
// pageable staging) run on that queue, so they are ordered with that work by construction. Plans
// between two devices (peer, staged) run on the engine's own queues: per device one outbound queue
// (D2H of staged copies) and one inbound queue (H2D of staged copies, peer DMA), so the two halves of
// a staged copy overlap on separate copy engines, and copies in opposite directions between two
// devices run at once. These queues first wait for what the ranges' queues had enqueued; with
// `order_after`, the ranges' queues then wait for the copy, so later work on the buffers follows it.
//
// Two plans between devices that share a device enqueue one after the other under short per-device
// locks (no waiting on the host inside them), so the cross-queue waits of concurrent plans never
// form a cycle; a thread that finds such a lock taken counts its wait (Stats::lock_wait_ns). Host steps (CPU
// copies of pageable staging) run on the calling thread, interleaved with issuing the device steps; they are
// done when start() returns.
//
// Staging slots are chunks of the pinned staging pool. A copy between devices without peer access
// waits for its first chunk (back-pressure); a copy to or from host memory takes one only if free
// (its caller may hold chunks, as I/O does, and waiting could deadlock) and goes direct otherwise.
// Further chunks are taken only if free, and a plan made for more slots than the pool gave is made
// again for what it gave. The chunks go back to the pool when the plan's last device step completes.
#pragma once

#include "device/staging_pool.hpp"
#include "obs/counters.hpp"
#include "obs/trace.hpp"
#include "os/lock_rank.hpp"
#include "transfer/plan.hpp"

#include <hdsm/device.hpp>

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace hdsm::transfer {

/// One end of a copy: host memory, or a range of a device buffer with the queue ordering its work.
struct CopyEnd {
  std::byte* host = nullptr;  // host memory (device == nullptr)
  Device* device = nullptr;
  DeviceBuffer buffer;
  std::size_t offset = 0;
  Queue* queue = nullptr;  // device ranges: the in-order queue of the buffer's other work

  static CopyEnd host_memory(const void* p) { return {static_cast<std::byte*>(const_cast<void*>(p))}; }
  static CopyEnd device_memory(Device& device, DeviceBuffer buffer, std::size_t offset, Queue& queue) {
    return {nullptr, &device, buffer, offset, &queue};
  }
  bool on_device() const { return device != nullptr; }
};

/// An event that completes when every one of `events` has; it carries the first error among them.
Event all_of(std::vector<Event> events);

/// `host`'s host-side costs with the figures of `devices` as their properties state them (link rate,
/// latency, copy engines) and their peer access.
Topology stated_topology(std::span<Device* const> devices, Topology host = {});

class CopyEngine {
 public:
  using PoolSource = std::function<StagingPool&()>;

  /// `devices` (and the tracer, when given) must outlive the engine; `pool` gives the staging pool,
  /// created on first use, whose chunks must hold options.chunk_bytes. DeviceProperties::index of
  /// each device is its position in `devices`.
  CopyEngine(std::span<Device* const> devices, Topology topology, Options options, PoolSource pool,
             obs::Counters* counters = nullptr, obs::Tracer* tracer = nullptr);
  ~CopyEngine();
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  const Topology& topology() const { return topology_; }
  /// The enqueue lock of device `index` (for tests that force contention on it).
  os::RankedMutex<std::mutex>& device_lock(unsigned index) { return device_locks_.at(index); }
  const Options& options() const { return options_; }

  /// Where a range lies, as the planner sees it: a device, or host memory pinned for `peer` (the
  /// device at the other end; nullptr: pageable).
  Endpoint endpoint(const CopyEnd& range, std::size_t bytes, const Device* peer) const;
  /// The plan for copying `bytes` bytes from `src` to `dst`.
  CopyPlan plan(const CopyEnd& dst, const CopyEnd& src, std::size_t bytes) const;

  struct Started {
    CopyPlan plan;  // as it ran (made again if the pool gave fewer chunks than it asked for)
    Event done;     // completes when every step has; host steps are done already
  };
  /// Plans and starts the copy. The source must not change, and the destination must not be used,
  /// until `done` completes. With `order_after`, the ranges' queues wait for the copy too.
  Started start(const CopyEnd& dst, const CopyEnd& src, std::size_t bytes, bool order_after);
  /// start() and wait: the bytes are in place when it returns; rethrows the copy's error.
  CopyPlan copy(const CopyEnd& dst, const CopyEnd& src, std::size_t bytes);

 private:
  struct Lanes;
  /// The engine's own queue of `device` in one direction, created on first use.
  Queue& own_queue(const Device& device, bool inbound);
  Event run(const CopyPlan& plan, const CopyEnd& dst, const CopyEnd& src,
            std::vector<StagingPool::Lease> leases, bool order_after);
  unsigned index_of(const Device& device) const;

  std::vector<Device*> devices_;
  Topology topology_;
  Options options_;
  PoolSource pool_;
  obs::Counters* counters_;
  obs::Tracer* tracer_;

  std::mutex queues_mutex_;
  std::vector<std::unique_ptr<Queue>> inbound_, outbound_;  // by device index, created on first use
  /// By device index: held while a plan between devices is enqueued (ranked, in index order).
  std::deque<os::RankedMutex<std::mutex>> device_locks_;
};

}  // namespace hdsm::transfer
