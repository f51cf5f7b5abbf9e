// The CUDA backend: the CUDA runtime API on every device cudaGetDeviceCount reports. libhdsm loads
// the shared CUDA runtime when the backend opens (cudart.hpp), so it loads where no toolkit is
// installed, and a missing runtime or driver is the backend's NoDevice. Buffers are cudaMalloc allocations
// whose handle is the device address; queues are non-blocking streams; an event is a cudaEvent (what other
// CUDA queues wait for, on the device) whose host-side state the queue's EventWatcher completes; pinned
// memory is portable cudaHostAlloc memory. Every enqueued action is an NVTX range on the calling thread.
//
// Kernels are __global__ functions compiled by nvcc into the program. The program's CUDA runtime
// may not be libhdsm's (a static runtime keeps its own table of host stubs), so a Kernel names its
// CUDA body by the kernel's cudaKernel_t, which every runtime of a process accepts
// (hdsm::cuda_kernel in <hdsm/cuda.hpp>), not by the host stub's address.
#pragma once

#include <cuda_runtime_api.h>

#include "device/backends.hpp"
#include "device/buffer_table.hpp"
#include "device/cuda/cudart.hpp"
#include "device/event_state.hpp"
#include "device/host_mapping.hpp"
#include "device/managed.hpp"
#include "device/range_table.hpp"
#include "obs/counters.hpp"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

namespace hdsm::cuda {

struct CudaOptions {
  unsigned first_index = 0;  // DeviceProperties::index of the first device
  bool poison = false;       // discarded and new buffers are filled with the byte 0xDE (else new ones with 0)
  std::size_t memory_bytes = 0;  // capacity offered per device; 0: the device's global memory
};

/// Throws an hdsm::Error naming the call, what it was applied to and the CUDA error, unless code
/// is cudaSuccess: KernelFailure for a fault of a kernel, Errc::out_of_device_memory for an
/// allocation, Errc::system otherwise. Clears the calling thread's last CUDA error.
void check(cudaError_t code, const char* call, const std::string& object);
/// The name of an error that a faulting kernel leaves behind (cudaErrorIllegalAddress...), or
/// nullptr.
const char* kernel_fault_name(cudaError_t code);

/// The cudaEvents of one device, reused. An event comes back when the last hdsm::Event recorded
/// with it goes, on whatever thread that is (a continuation of another event, say): giving one
/// back only takes a lock.
class EventPool {
 public:
  explicit EventPool(std::string device) : device_(std::move(device)) {}
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  /// A free event of the device, created when there is none (the device must be current).
  cudaEvent_t take();
  void give(cudaEvent_t event) noexcept;

 private:
  std::string device_;
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

/// The state of an hdsm::Event recorded by a CUDA queue: its cudaEvent, which the queue's
/// EventWatcher waits for before it completes the state.
struct CudaEventState final : detail::EventState {
  CudaEventState(std::shared_ptr<EventPool> p, cudaEvent_t e) : pool(std::move(p)), event(e) {}
  ~CudaEventState() override { pool->give(event); }
  /// The cudaEvent has completed: the stream's work before it ran without error. Only where the
  /// queue waited for no event of another device since its last record() (a fault's error is the
  /// device's: every stream of it reports it). A waiter polling this needs no wake-up from the
  /// watcher.
  bool finished_early() const noexcept override {
    if (!alone) return false;
    const cudaError_t e = cudart().cudaEventQuery(event);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) (void)cudart().cudaGetLastError();  // the stream callback reports it
    return false;
  }
  std::shared_ptr<EventPool> pool;
  cudaEvent_t event;
  bool alone = false;  // set by record() before the event is handed out
};

/// Completes the states of one queue's events in the order they were recorded, on a thread of its
/// own: it polls the oldest one's cudaEvent while the wait policy lets it spin, then sleeps in
/// cudaEventSynchronize (the events are blocking-sync ones). Not stream callbacks: a callback holds
/// up the stream's later work until a driver thread has run it, tens of microseconds each time.
/// Events of one queue complete in order, and each depends only on work enqueued before it, so
/// waiting for them in order never waits for something that cannot happen.
class EventWatcher {
 public:
  struct Pending {
    std::shared_ptr<CudaEventState> state;
    std::vector<std::shared_ptr<detail::EventState>> after;  // complete the state only after these
  };
  EventWatcher(std::string device, int ordinal);
  /// Completes what is pending (the queue has synchronized its stream first), then stops.
  ~EventWatcher();
  EventWatcher(const EventWatcher&) = delete;
  EventWatcher& operator=(const EventWatcher&) = delete;
  void watch(Pending pending);

 private:
  void run();
  void finish(const Pending& pending);

  std::string device_;
  int ordinal_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::atomic<std::size_t> count_{0};  // pending_.size(), read while spinning
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class CudaQueue;

class CudaDevice final : public Device, public ManagedMemory, public HostMapping {
 public:
  /// `peers`: by ordinal, whether this device and that one can access each other's memory.
  CudaDevice(unsigned index, int ordinal, int peer_group, std::vector<bool> peers, DeviceServices services,
             const CudaOptions& options);
  ~CudaDevice() override;

  const DeviceProperties& properties() const override { return props_; }
  DeviceBuffer alloc(std::size_t bytes) override;
  void free(DeviceBuffer buffer) override;
  std::size_t memory_used() const override;
  void discard(DeviceBuffer buffer, std::size_t offset, std::size_t bytes) override;
  std::uint64_t address(DeviceBuffer buffer, std::size_t offset) const override;
  void* alloc_pinned(std::size_t bytes) override;
  void free_pinned(void* pointer) override;
  bool is_pinned(const void* pointer, std::size_t bytes) const override;
  bool can_access_peer(const Device& other) const override;
  std::optional<KernelArg> peer_argument(const Device& home, DeviceBuffer buffer,
                                         std::size_t offset) override;
  std::unique_ptr<Queue> create_queue() override;

  // Unified memory (the um protocol): cudaMallocManaged, cudaMemPrefetchAsync, cudaMemAdvise.
  void* alloc_managed(std::size_t bytes) override;
  void free_managed(void* pointer) override;
  void prefetch(const void* pointer, std::size_t bytes, bool to_device, Queue& queue) override;
  void advise(const void* pointer, std::size_t bytes, UmAdvice advice) override;

  // Host mapping (the host-mapped model): page-locked, mapped host memory (cudaHostRegister), or the
  // pointer itself where the device walks the host's page tables. CUDA memory is coherent at stream
  // synchronization, so hand-overs have nothing to do.
  std::uint64_t map_host(void* pointer, std::size_t bytes) override;
  void unmap_host(std::uint64_t mapping) override;
  KernelArg host_argument(std::uint64_t mapping, std::size_t offset) override;
  void hand_over(std::uint64_t mapping, bool to_device, Queue& queue) override;

  // Used by CudaQueue.
  int ordinal() const { return ordinal_; }
  /// Makes this device the calling thread's current CUDA device (cudaSetDevice, cheap when it is).
  void activate() const;
  /// The device address of byte `offset` of a live buffer; InvalidPointer for a foreign or freed
  /// buffer, InvalidArgument when [offset, offset + bytes) runs past its end.
  std::byte* resolve(DeviceBuffer buffer, std::size_t offset, std::size_t bytes,
                     const std::string& what) const;
  /// The sizes of the parameters of `function`, the CUDA body of `kernel` (cudaFuncGetParamInfo,
  /// asked once per function); nothing when the driver cannot say.
  std::optional<std::vector<std::size_t>> parameters(const Kernel& kernel, const void* function);
  /// Lets `function`, the CUDA body of `kernel`, take `bytes` of dynamic shared memory a block. Above
  /// the default limit (sharedMemPerBlock, 48 KiB) a kernel must opt in: once per function and size,
  /// up to sharedMemPerBlockOptin (InvalidArgument naming both limits above it).
  void allow_dynamic_shared(const Kernel& kernel, const void* function, std::size_t bytes);
  /// Enables this device's access to `peer`'s memory the first time a copy needs it.
  void enable_peer_access(const CudaDevice& peer);
  const std::shared_ptr<EventPool>& events() const { return events_; }
  obs::DeviceCounters& counters() { return counters_; }

 private:
  /// Fills [p, p + bytes) with `value` on the internal stream and waits for it.
  cudaError_t fill_now(void* p, std::size_t bytes, unsigned char value);

  DeviceProperties props_;
  int ordinal_;
  std::vector<bool> peers_;
  obs::DeviceCounters& counters_;
  bool poison_;
  cudaStream_t internal_ = nullptr;  // fills of new and discarded buffers
  std::shared_ptr<EventPool> events_;

  std::optional<BufferTable<std::monostate>> buffers_;  // by device address; made once the capacity is known
  mutable std::mutex mutex_;                            // the tables below
  RangeTable<std::monostate> pinned_;
  RangeTable<std::monostate> managed_;
  std::unordered_map<const void*, std::optional<std::vector<std::size_t>>> parameters_;
  std::size_t shared_per_block_ = std::size_t{48} * 1024, shared_per_block_optin_ = std::size_t{48} * 1024;
  std::unordered_map<const void*, std::size_t> dynamic_shared_;  // opted-in sizes by function
  std::vector<bool> peer_enabled_;                               // by ordinal
  struct HostMapped {
    std::byte* host;
    std::byte* device;  // what kernels use
    std::size_t bytes;
    bool registered;  // cudaHostRegister'ed (else used through the host's page tables)
  };
  std::unordered_map<std::uint64_t, HostMapped> host_mapped_;  // by handle
  std::uint64_t next_host_mapping_ = 1;
  bool pageable_access_ = false;  // cudaDevAttrPageableMemoryAccessUsesHostPageTables
};

class CudaQueue final : public Queue {
 public:
  explicit CudaQueue(CudaDevice& device);
  ~CudaQueue() override;

  Device& device() override { return device_; }
  cudaStream_t stream() const { return stream_; }
  void copy_to_device(DeviceBuffer dst, std::size_t dst_offset, const void* src, std::size_t bytes) override;
  void copy_to_host(void* dst, DeviceBuffer src, std::size_t src_offset, std::size_t bytes) override;
  void copy_on_device(DeviceBuffer dst, std::size_t dst_offset, DeviceBuffer src, std::size_t src_offset,
                      std::size_t bytes) override;
  void copy_from_peer(DeviceBuffer dst, std::size_t dst_offset, Device& src_device, DeviceBuffer src,
                      std::size_t src_offset, std::size_t bytes) override;
  void fill(DeviceBuffer dst, std::size_t offset, std::size_t bytes, std::uint8_t value) override;
  void launch(const Kernel& kernel, const Launch& launch, std::span<const KernelArg> args) override;
  Event record() override;
  void wait(const Event& event) override;
  void synchronize() override;

 private:
  /// Issues one asynchronous CUDA call on the stream inside an NVTX range named `action`.
  template <class Call>
  void issue(const char* action, const char* call, Call&& enqueue);

  CudaDevice& device_;
  cudaStream_t stream_ = nullptr;
  std::mutex mutex_;
  std::exception_ptr error_;  // the first failure of a foreign event this queue waited for
  /// CUDA events this queue waited for (on the device) since its last record(): the next event it
  /// records completes only after them, so that an event's completion implies that of every event
  /// its work waited for, as on the other backends (each queue's watcher completes its own events).
  std::vector<std::shared_ptr<detail::EventState>> waited_;
  std::unique_ptr<EventWatcher> watcher_;  // declared last: stops before the rest goes
};

}  // namespace hdsm::cuda
