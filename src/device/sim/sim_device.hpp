// The sim backend: an emulated discrete accelerator. Device memory is a separate mapping that no
// user pointer reaches; copies go through DMA-engine threads that really move the bytes and then
// hold the transfer for the modelled time (latency + bytes / bandwidth); kernels run on the CPU
// grid executor.
#pragma once

#include <hdsm/config.hpp>
#include <hdsm/device.hpp>
#include <hdsm/stats.hpp>

#include "device/backends.hpp"
#include "device/host_mapping.hpp"
#include "device/managed.hpp"
#include "device/services.hpp"
#include "device/sim/host_memory.hpp"
#include "device/sim/link_model.hpp"
#include "exec/executor.hpp"
#include "os/fault.hpp"
#include "os/mapping.hpp"
#include "os/offset_heap.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace hdsm::obs {
struct DeviceCounters;
}

namespace hdsm::sim {

/// What a simulated device models (HDSM_SIM_KIND).
enum class SimKind { discrete, integrated, integrated_unmappable };

struct SimOptions {
  unsigned devices = 2;
  SimKind kind = SimKind::discrete;
  std::size_t memory_bytes = std::size_t{4} << 30;
  double link_gbps = 3;      // 0: unthrottled
  double host_bus_gbps = 6;  // shared by all devices' H2D and D2H transfers; 0: unlimited
  double latency_us = 5;
  std::vector<int> peer_groups;  // one per device; -1: no peer
  bool poison = false;
  /// Guard pages around every allocation; kernel accesses into them die with a message naming the
  /// kernel and the buffer (HDSM_SIM_BOUNDS_CHECK).
  bool bounds_check = false;
  /// Workers of each device's own executor (HDSM_SIM_THREADS); 0: the host's executor.
  unsigned threads = 0;
  std::size_t fiber_stack_bytes = std::size_t{64} * 1024;  // of its cooperative-kernel threads
};

/// One DMA engine: used by one transfer at a time.
struct DmaEngine {
  std::mutex busy;
  Clock::time_point free_at{};  // under busy: when the last transfer ends in modelled time
  int lane = -1;                // trace lane
};

class SimQueue;

class SimDevice final : public Device, public ManagedMemory, public HostMapping {
 public:
  SimDevice(unsigned index, const SimOptions& options, HostMemory& host, DeviceServices services);
  ~SimDevice() override;

  const DeviceProperties& properties() const override { return props_; }
  DeviceBuffer alloc(std::size_t bytes) override;
  void free(DeviceBuffer buffer) override;
  std::size_t memory_used() const override;
  void discard(DeviceBuffer buffer, std::size_t offset, std::size_t bytes) override;
  std::uint64_t address(DeviceBuffer buffer, std::size_t offset) const override;
  void* alloc_pinned(std::size_t bytes) override { return host_.alloc(bytes); }
  void free_pinned(void* pointer) override { host_.free(pointer); }
  bool is_pinned(const void* pointer, std::size_t bytes) const override {
    return host_.contains(pointer, bytes);
  }
  bool can_access_peer(const Device& other) const override;
  std::optional<KernelArg> peer_argument(const Device& home, DeviceBuffer buffer,
                                         std::size_t offset) override;
  std::unique_ptr<Queue> create_queue() override;

  // Unified memory on sim is what an integrated GPU has: the kernels run on the CPU, so a managed
  // allocation is one zero-filled host mapping both use, and prefetching has nothing to move.
  void* alloc_managed(std::size_t bytes) override;
  void free_managed(void* pointer) override;
  void prefetch(const void* pointer, std::size_t bytes, bool to_device, Queue& queue) override;
  void advise(const void*, std::size_t, UmAdvice) override {}

  // Host mapping: sim kernels run on the CPU, so they use host memory through its own pointers;
  // a mapping only records the range (HDSM_SIM_KIND=integrated-unmappable refuses to make one).
  std::uint64_t map_host(void* pointer, std::size_t bytes) override;
  void unmap_host(std::uint64_t mapping) override;
  KernelArg host_argument(std::uint64_t mapping, std::size_t offset) override;
  void hand_over(std::uint64_t mapping, bool to_device, Queue& queue) override;

  // Used by SimQueue.
  /// Device address of [offset, offset+bytes) of a buffer of this device; throws InvalidPointer for
  /// a foreign or freed handle and InvalidArgument for a range past the end.
  std::byte* resolve(DeviceBuffer buffer, std::size_t offset, std::size_t bytes, const char* what) const;
  /// The same, or nullptr where resolve would throw: for callers that build the message only then.
  std::byte* try_resolve(DeviceBuffer buffer, std::size_t offset, std::size_t bytes) const;
  /// Copy n bytes over the link while holding the given engines until the transfer's modelled end,
  /// which it returns; counts the transfer on `route` and traces it on every held engine's lane.
  /// Transfers other than peer copies cross host memory, so they also take their time on its bus.
  /// In the model the transfer starts once its inputs are `ready` and the engines are free, whenever
  /// the thread serving the queue got to it: a DMA engine is not preempted as that thread can be, so
  /// a stalled thread catches up (copies without holding) instead of pushing every later transfer back.
  Clock::time_point link_copy(Route route, DmaEngine& first, DmaEngine* second, void* dst, const void* src,
                              std::size_t n, Clock::time_point ready);
  /// A copy inside device memory (not limited by the link).
  void local_copy(void* dst, const void* src, std::size_t n);
  DmaEngine& inbound() { return inbound_; }
  DmaEngine& outbound() { return outbound_; }
  DeviceServices& services() { return services_; }
  obs::DeviceCounters& counters() { return counters_; }
  HostMemory& host() { return host_; }
  bool poison() const { return poison_; }
  bool bounds_check() const { return bounds_check_; }
  /// The kernel a guard-page fault message names (bounds checking only). With kernels of several
  /// queues running at once it names the one that started last.
  void kernel_started(const char* name) noexcept { running_kernel_.store(name, std::memory_order_release); }
  void kernel_finished(const char* name) noexcept {
    running_kernel_.compare_exchange_strong(name, nullptr, std::memory_order_acq_rel);
  }

  void register_queue(SimQueue* q);
  void unregister_queue(SimQueue* q);

 private:
  struct Allocation {
    std::size_t offset;  // of the first byte in memory_
    std::size_t bytes;
    std::size_t heap_offset;  // the range taken from heap_ (with bounds checking: guards included)
    std::size_t heap_bytes;
  };
  const Allocation& find(DeviceBuffer buffer, const char* what) const;  // caller holds alloc_mutex_
  void fill_poison(std::byte* p, std::size_t n);

  // Bounds checking (sim_device.cpp explains the layout).
  DeviceBuffer alloc_guarded(std::size_t bytes);
  void release_guarded(const Allocation& a);
  void set_guard(std::size_t page_offset, std::uint64_t owner, DeviceBuffer buffer);
  static bool on_guard_fault(void* context, void* address, os::FaultAccess access) noexcept;

  DeviceProperties props_;
  LinkModel link_;
  bool poison_;
  HostMemory& host_;
  std::unique_ptr<exec::Executor> own_executor_;  // HDSM_SIM_THREADS > 0
  DeviceServices services_;
  obs::DeviceCounters& counters_;
  os::Mapping memory_;
  bool bounds_check_;
  std::size_t page_;
  std::size_t capacity_;      // what the device offers programs (heap_ is larger with guards)
  os::Mapping guard_owners_;  // bounds checking: one std::uint64_t per page of memory_ (see .cpp)
  int fault_range_ = -1;
  std::atomic<const char*> running_kernel_{nullptr};

  mutable std::mutex alloc_mutex_;
  os::OffsetHeap heap_;
  std::size_t guarded_used_ = 0;  // bounds checking: memory_used() without the guards
  std::unordered_map<std::uint64_t, Allocation> allocations_;
  std::uint64_t next_id_ = 1;
  std::unordered_map<const void*, os::Mapping> managed_;  // by start address
  struct HostRange {
    std::byte* start;
    std::size_t bytes;
  };
  std::unordered_map<std::uint64_t, HostRange> host_mapped_;  // by handle
  std::uint64_t next_host_mapping_ = 1;
  bool unmappable_ = false;

  DmaEngine inbound_, outbound_;
  int local_lane_ = -1;

  std::mutex queues_mutex_;
  std::vector<SimQueue*> queues_;
  unsigned queues_created_ = 0;
};

/// The sim backend of one runtime: its devices and their shared pinned-memory registry and host bus.
/// Options of the sim backend as the configuration sets them (HDSM_SIM_*); ConfigError for a peer
/// group that does not fit the device count.
SimOptions sim_options(const Config& config);

class SimBackend final : public DeviceBackend {
 public:
  SimBackend(const SimOptions& options, DeviceServices services);
  ~SimBackend() override;
  std::vector<Device*> devices() const override;

 private:
  HostMemory host_;
  std::vector<std::unique_ptr<SimDevice>> devices_;
};

}  // namespace hdsm::sim
