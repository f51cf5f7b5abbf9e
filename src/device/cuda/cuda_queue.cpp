// CUDA queues: asynchronous copies, fills and kernel launches on a non-blocking stream.
#include "device/checks.hpp"
#include "device/cuda/cuda.hpp"
#include "os/process.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <atomic>
#include <utility>

namespace hdsm::cuda {
namespace {

/// An NVTX range on the calling thread: the hdsm action a profiler shows around the CUDA calls it
/// issues. Without a tool attached, push and pop return at once.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace

EventWatcher::EventWatcher(std::string device, int ordinal)
    : device_(std::move(device)), ordinal_(ordinal), thread_(os::service_thread([this] { run(); })) {}

EventWatcher::~EventWatcher() {
  {
    std::lock_guard lock(mutex_);
    stop_.store(true, std::memory_order_release);
  }
  cv_.notify_one();
  thread_.join();
}

void EventWatcher::watch(Pending pending) {
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(std::move(pending));
    count_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_one();
}

void EventWatcher::run() {
  (void)cudart().cudaSetDevice(ordinal_);
  for (;;) {
    os::spin_until([&] { return count_.load(std::memory_order_acquire) != 0 || stop_.load(); });
    Pending next;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return !pending_.empty() || stop_.load(std::memory_order_relaxed); });
      if (pending_.empty()) return;  // stopped, nothing left
      next = std::move(pending_.front());
      pending_.pop_front();
    }
    finish(next);
    count_.fetch_sub(1, std::memory_order_release);
  }
}

void EventWatcher::finish(const Pending& pending) {
  const cudaEvent_t event = pending.state->event;
  cudaError_t status = cudart().cudaEventQuery(event);
  if (status == cudaErrorNotReady &&
      !os::spin_until([&] { return (status = cudart().cudaEventQuery(event)) != cudaErrorNotReady; }))
    status = cudart().cudaEventSynchronize(event);  // a blocking-sync event: sleeps until the device is done
  std::exception_ptr error;
  if (status != cudaSuccess) {
    (void)cudart().cudaGetLastError();
    const std::string message =
        fmt::format("CUDA work queued on {} before an event failed: {} ({})", device_,
                    cudart().cudaGetErrorString(status), cudart().cudaGetErrorName(status));
    error = kernel_fault_name(status) != nullptr ? std::make_exception_ptr(KernelFailure(message))
                                                 : std::make_exception_ptr(Error(Errc::system, message));
  }
  // The last of this event and the events its queue waited for completes the state, on whichever
  // thread completes it; nothing blocks here.
  auto left = std::make_shared<std::atomic<std::size_t>>(pending.after.size() + 1);
  auto done = [left, state = pending.state, error](const std::exception_ptr&) {
    if (left->fetch_sub(1, std::memory_order_acq_rel) == 1) state->complete(error);
  };
  for (const auto& earlier : pending.after) earlier->then(done);
  done(nullptr);
}

CudaQueue::CudaQueue(CudaDevice& device) : device_(device) {
  device_.activate();
  check(cudart().cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags",
        device.name());
  watcher_ = std::make_unique<EventWatcher>(device.name(), device.ordinal());
}

CudaQueue::~CudaQueue() {
  // Errors are ignored: at exit the CUDA runtime may already have shut down.
  if (cudart().cudaSetDevice(device_.ordinal()) == cudaSuccess) {
    cudart().cudaStreamSynchronize(stream_);
    cudart().cudaStreamDestroy(stream_);
  }
  (void)cudart().cudaGetLastError();
}

template <class Call>
void CudaQueue::issue(const char* action, const char* call, Call&& enqueue) {
  device_.activate();
  const NvtxRange range(action);
  check(enqueue(), call, device_.name());
}

void CudaQueue::copy_to_device(DeviceBuffer dst, std::size_t dst_offset, const void* src, std::size_t bytes) {
  require_host(src, bytes, "copy_to_device", device_.name());
  std::byte* d = device_.resolve(dst, dst_offset, bytes, "copy_to_device");
  if (bytes == 0) return;
  // Pageable host memory is fine: cudaMemcpyAsync stages it through the driver's own pinned buffers.
  issue("hdsm copy_to_device", "cudaMemcpyAsync",
        [&] { return cudart().cudaMemcpyAsync(d, src, bytes, cudaMemcpyHostToDevice, stream_); });
  device_.counters().route(Route::h2d).add(bytes);
}

void CudaQueue::copy_to_host(void* dst, DeviceBuffer src, std::size_t src_offset, std::size_t bytes) {
  require_host(dst, bytes, "copy_to_host", device_.name());
  const std::byte* s = device_.resolve(src, src_offset, bytes, "copy_to_host");
  if (bytes == 0) return;
  issue("hdsm copy_to_host", "cudaMemcpyAsync",
        [&] { return cudart().cudaMemcpyAsync(dst, s, bytes, cudaMemcpyDeviceToHost, stream_); });
  device_.counters().route(Route::d2h).add(bytes);
}

void CudaQueue::copy_on_device(DeviceBuffer dst, std::size_t dst_offset, DeviceBuffer src,
                               std::size_t src_offset, std::size_t bytes) {
  std::byte* d = device_.resolve(dst, dst_offset, bytes, "copy_on_device (destination)");
  const std::byte* s = device_.resolve(src, src_offset, bytes, "copy_on_device (source)");
  if (bytes == 0) return;
  issue("hdsm copy_on_device", "cudaMemcpyAsync",
        [&] { return cudart().cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, stream_); });
  device_.counters().route(Route::d2d).add(bytes);
}

void CudaQueue::copy_from_peer(DeviceBuffer dst, std::size_t dst_offset, Device& src_device, DeviceBuffer src,
                               std::size_t src_offset, std::size_t bytes) {
  auto* peer = dynamic_cast<CudaDevice*>(&src_device);
  if (peer == nullptr || !device_.can_access_peer(*peer))
    throw Unsupported(
        fmt::format("copy_from_peer: {} cannot copy directly from {} (no CUDA peer access between "
                    "them); stage the copy through host memory",
                    device_.name(), src_device.name()));
  std::byte* d = device_.resolve(dst, dst_offset, bytes, "copy_from_peer (destination)");
  const std::byte* s = peer->resolve(src, src_offset, bytes, "copy_from_peer (source)");
  if (bytes == 0) return;
  device_.enable_peer_access(*peer);
  issue("hdsm copy_from_peer", "cudaMemcpyPeerAsync", [&] {
    return cudart().cudaMemcpyPeerAsync(d, device_.ordinal(), s, peer->ordinal(), bytes, stream_);
  });
  device_.counters().route(Route::peer).add(bytes);
}

void CudaQueue::fill(DeviceBuffer dst, std::size_t offset, std::size_t bytes, std::uint8_t value) {
  std::byte* d = device_.resolve(dst, offset, bytes, "fill");
  if (bytes == 0) return;
  issue("hdsm fill", "cudaMemsetAsync", [&] { return cudart().cudaMemsetAsync(d, value, bytes, stream_); });
}

void CudaQueue::launch(const Kernel& kernel, const Launch& launch, std::span<const KernelArg> args) {
  require_launch(kernel, launch, "on " + device_.name());
  const void* function = require_cuda_body(kernel);
  // Arguments first, so that a bad one throws before anything is enqueued. cudaLaunchKernel takes
  // a pointer to each argument's value: a buffer's value is its device address.
  std::vector<std::uint64_t> addresses(args.size());
  std::vector<void*> values(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    const KernelArg& a = args[i];
    if (a.is_buffer()) {
      addresses[i] = reinterpret_cast<std::uint64_t>(device_.resolve(
          a.buffer(), a.offset(), 0, fmt::format("argument {} of kernel '{}'", i, kernel.name)));
      values[i] = &addresses[i];
    } else {
      values[i] = const_cast<void*>(a.data());
    }
  }
  device_.activate();
  if (const auto sizes = device_.parameters(kernel, function)) {
    if (sizes->size() != args.size())
      throw InvalidArgument(
          fmt::format("kernel '{}' takes {} arguments in its __global__ function; the call passes {}",
                      kernel.name, sizes->size(), args.size()));
    for (std::size_t i = 0; i < args.size(); ++i)
      if ((*sizes)[i] != args[i].size())
        throw InvalidArgument(
            fmt::format("argument {} of kernel '{}' has {} bytes; the __global__ function's "
                        "parameter has {}",
                        i, kernel.name, args[i].size(), (*sizes)[i]));
  }
  device_.allow_dynamic_shared(kernel, function, launch.shared_bytes);
  const NvtxRange range(kernel.name.c_str());
  const dim3 grid(launch.grid.x, launch.grid.y, launch.grid.z);
  const dim3 block(launch.block.x, launch.block.y, launch.block.z);
  cudaError_t e =
      cudart().cudaLaunchKernel(function, grid, block, values.data(), launch.shared_bytes, stream_);
  const cudaError_t last = cudart().cudaGetLastError();
  if (e == cudaSuccess) e = last;
  if (e != cudaSuccess)
    throw KernelFailure(
        fmt::format("kernel '{}' did not launch on {} (grid {}x{}x{}, block {}x{}x{}, {} bytes of "
                    "dynamic shared memory): {} ({})",
                    kernel.name, device_.name(), grid.x, grid.y, grid.z, block.x, block.y, block.z,
                    launch.shared_bytes, cudart().cudaGetErrorString(e), cudart().cudaGetErrorName(e)));
  device_.counters().kernel_launches.fetch_add(1, std::memory_order_relaxed);
}

Event CudaQueue::record() {
  device_.activate();
  // The state owns the event from here on, so a failure below gives it back to the pool.
  auto state = std::make_shared<CudaEventState>(device_.events(), device_.events()->take());
  check(cudart().cudaEventRecord(state->event, stream_), "cudaEventRecord", device_.name());
  EventWatcher::Pending pending{state, {}};
  {
    std::lock_guard lock(mutex_);
    pending.after.swap(waited_);
  }
  state->alone = std::all_of(pending.after.begin(), pending.after.end(), [&](const auto& earlier) {
    const auto* cuda = dynamic_cast<const CudaEventState*>(earlier.get());
    return cuda != nullptr && cuda->pool == state->pool;
  });
  watcher_->watch(std::move(pending));
  return Event(std::move(state));
}

void CudaQueue::wait(const Event& event) {
  const auto& state = event.state();
  if (!state) return;
  if (const auto* recorded = dynamic_cast<const CudaEventState*>(state.get())) {
    device_.activate();
    check(cudart().cudaStreamWaitEvent(stream_, recorded->event, 0), "cudaStreamWaitEvent", device_.name());
    std::lock_guard lock(mutex_);
    waited_.push_back(state);
    return;
  }
  // An event of another backend (sim, opencl): the calling thread waits for it here, so later work
  // of this queue is enqueued only once it has completed (CUDA has no way to make a stream wait for
  // a host-side condition without holding up a driver thread). This wait cannot deadlock:
  // everything the event depends on was enqueued before it was recorded.
  if (std::exception_ptr error = state->wait()) {
    std::lock_guard mine(mutex_);
    if (!error_) error_ = error;  // synchronize() rethrows it
  }
}

void CudaQueue::synchronize() {
  device_.activate();
  const cudaError_t e = cudart().cudaStreamSynchronize(stream_);
  std::exception_ptr error;
  {
    std::lock_guard lock(mutex_);
    error = std::exchange(error_, nullptr);
  }
  if (error) {
    if (e != cudaSuccess) (void)cudart().cudaGetLastError();
    std::rethrow_exception(error);
  }
  check(e, "cudaStreamSynchronize", fmt::format("the queued work of {}", device_.name()));
}

}  // namespace hdsm::cuda
