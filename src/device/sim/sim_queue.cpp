#include "device/sim/sim_queue.hpp"

#include <hdsm/error.hpp>

#include "device/checks.hpp"
#include "device/event_state.hpp"
#include "device/sim/sim_device.hpp"
#include "obs/counters.hpp"
#include "obs/trace.hpp"
#include "os/process.hpp"
#include "os/spin_wait.hpp"

#include <fmt/format.h>

#include <cxxabi.h>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

namespace hdsm::sim {
namespace {

// Names the kernel in the device's guard-page fault message while its body runs.
class RunningKernel {
 public:
  RunningKernel(SimDevice& device, const char* name) : device_(device), name_(name) {
    if (device_.bounds_check()) device_.kernel_started(name_);
  }
  ~RunningKernel() {
    if (device_.bounds_check()) device_.kernel_finished(name_);
  }
  RunningKernel(const RunningKernel&) = delete;
  RunningKernel& operator=(const RunningKernel&) = delete;

 private:
  SimDevice& device_;
  const char* name_;
};

}  // namespace

SimQueue::SimQueue(SimDevice& device, unsigned id)
    : device_(device), lane_(device.services().tracer.lane(fmt::format("{} queue {}", device.name(), id))) {
  device_.register_queue(this);
  // The program's handlers never run on it, not even in the share of a kernel's blocks it runs itself
  // (os::SignalsBlockedForNewThreads says why).
  worker_ = os::service_thread([this] { serve(); });
}

SimQueue::~SimQueue() {
  {
    std::unique_lock lock = idle_lock();
    stop_.store(true, std::memory_order_release);
  }
  work_cv_.notify_all();
  worker_.join();
  device_.unregister_queue(this);
}

Device& SimQueue::device() { return device_; }

void SimQueue::enqueue(std::function<void()> run) {
  {
    std::lock_guard lock(mutex_);
    ops_.push_back({std::move(run), Clock::now()});
    outstanding_.fetch_add(1, std::memory_order_release);
  }
  work_cv_.notify_one();  // no system call where the worker spins rather than sleeps
}

void SimQueue::serve() {
  precise_timers_for_this_thread();
  os::prepare_thread_for_faults();
  std::unique_lock lock(mutex_);
  for (;;) {
    if (ops_.empty() && !stop_.load(std::memory_order_relaxed)) {
      // Spin for the next operation before sleeping (os::spin_until): a round trip's operations
      // come microseconds apart.
      lock.unlock();
      os::spin_until([&] {
        return outstanding_.load(std::memory_order_acquire) != 0 || stop_.load(std::memory_order_acquire);
      });
      lock.lock();
    }
    work_cv_.wait(lock, [&] { return stop_.load(std::memory_order_relaxed) || !ops_.empty(); });
    if (ops_.empty()) return;  // stop_ and nothing left
    Op op = std::move(ops_.front());
    ops_.pop_front();
    busy_ = true;
    lock.unlock();
    std::exception_ptr failure;
    ready_ = std::max(ready_, op.enqueued);
    try {
      op.run();
    } catch (...) {
      failure = std::current_exception();
    }
    op.run = nullptr;  // release captured state outside the lock
    lock.lock();
    if (failure && !unreported_) unreported_ = failure;
    busy_ = false;
    outstanding_.fetch_sub(1, std::memory_order_release);
    if (ops_.empty()) idle_cv_.notify_all();
  }
}

std::byte* SimQueue::bounce() {
  if (bounce_.data() == nullptr)
    bounce_ =
        os::Mapping(kBounceBytes, fmt::format("bounce buffer of {}", device_.name()), /*populate=*/true);
  return bounce_.data();
}

void SimQueue::copy_to_device(DeviceBuffer dst, std::size_t dst_offset, const void* src, std::size_t bytes) {
  require_host(src, bytes, "copy_to_device", device_.name());
  std::byte* d = device_.resolve(dst, dst_offset, bytes, "copy_to_device");
  if (bytes == 0) return;
  const auto* s = static_cast<const std::byte*>(src);
  if (device_.is_pinned(src, bytes)) {
    enqueue([this, d, s, bytes] {
      ready_ = device_.link_copy(Route::h2d, device_.inbound(), nullptr, d, s, bytes, ready_);
    });
    return;
  }
  // Pageable memory: the CPU stages each chunk into the pinned bounce buffer, then the engine
  // moves it, as a driver does.
  enqueue([this, d, s, bytes] {
    std::byte* stage = bounce();
    for (std::size_t done = 0; done < bytes; done += kBounceBytes) {
      const std::size_t n = std::min(kBounceBytes, bytes - done);
      std::memcpy(stage, s + done, n);
      cpu_work_done();
      ready_ = device_.link_copy(Route::h2d, device_.inbound(), nullptr, d + done, stage, n, ready_);
    }
  });
}

void SimQueue::copy_to_host(void* dst, DeviceBuffer src, std::size_t src_offset, std::size_t bytes) {
  require_host(dst, bytes, "copy_to_host", device_.name());
  const std::byte* s = device_.resolve(src, src_offset, bytes, "copy_to_host");
  if (bytes == 0) return;
  auto* d = static_cast<std::byte*>(dst);
  if (device_.is_pinned(dst, bytes)) {
    enqueue([this, d, s, bytes] {
      ready_ = device_.link_copy(Route::d2h, device_.outbound(), nullptr, d, s, bytes, ready_);
    });
    return;
  }
  enqueue([this, d, s, bytes] {
    std::byte* stage = bounce();
    for (std::size_t done = 0; done < bytes; done += kBounceBytes) {
      const std::size_t n = std::min(kBounceBytes, bytes - done);
      ready_ = device_.link_copy(Route::d2h, device_.outbound(), nullptr, stage, s + done, n, ready_);
      std::memcpy(d + done, stage, n);
      cpu_work_done();
    }
  });
}

void SimQueue::copy_on_device(DeviceBuffer dst, std::size_t dst_offset, DeviceBuffer src,
                              std::size_t src_offset, std::size_t bytes) {
  std::byte* d = device_.resolve(dst, dst_offset, bytes, "copy_on_device (destination)");
  const std::byte* s = device_.resolve(src, src_offset, bytes, "copy_on_device (source)");
  if (bytes == 0) return;
  enqueue([this, d, s, bytes] {
    device_.local_copy(d, s, bytes);
    cpu_work_done();
  });
}

void SimQueue::copy_from_peer(DeviceBuffer dst, std::size_t dst_offset, Device& src_device, DeviceBuffer src,
                              std::size_t src_offset, std::size_t bytes) {
  auto* peer = dynamic_cast<SimDevice*>(&src_device);
  if (peer == nullptr || !device_.can_access_peer(*peer))
    throw Unsupported(
        fmt::format("copy_from_peer: {} cannot copy directly from {} (not in one peer group; see "
                    "HDSM_SIM_PEER); stage the copy through host memory",
                    device_.name(), src_device.name()));
  std::byte* d = device_.resolve(dst, dst_offset, bytes, "copy_from_peer (destination)");
  const std::byte* s = peer->resolve(src, src_offset, bytes, "copy_from_peer (source)");
  if (bytes == 0) return;
  enqueue([this, peer, d, s, bytes] {
    ready_ = device_.link_copy(Route::peer, peer->outbound(), &device_.inbound(), d, s, bytes, ready_);
  });
}

void SimQueue::fill(DeviceBuffer dst, std::size_t offset, std::size_t bytes, std::uint8_t value) {
  std::byte* d = device_.resolve(dst, offset, bytes, "fill");
  if (bytes == 0) return;
  enqueue([this, d, bytes, value] {
    std::memset(d, value, bytes);
    cpu_work_done();
  });
}

void SimQueue::launch(const Kernel& kernel, const Launch& launch, std::span<const KernelArg> args) {
  require_launch(kernel, launch, "on " + device_.name());
  if (!kernel.host)
    throw Unsupported(
        fmt::format("kernel '{}' has no body for backend sim (it needs a host body)", kernel.name));
  // Translate buffer arguments into device addresses now, so bad handles fail at the call site.
  struct ArgBytes {
    alignas(16) unsigned char bytes[KernelArg::kMaxValue];
  };
  std::vector<ArgBytes> slots(args.size());
  std::vector<std::size_t> sizes(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    const KernelArg& a = args[i];
    sizes[i] = a.size();
    if (a.is_buffer()) {
      // The message is formatted only for a bad argument: launches are the hot path.
      void* p = device_.try_resolve(a.buffer(), a.offset(), 0);
      if (p == nullptr)
        p = device_.resolve(a.buffer(), a.offset(), 0,
                            fmt::format("argument {} of kernel '{}'", i, kernel.name).c_str());
      std::memcpy(slots[i].bytes, &p, sizeof p);
    } else {
      std::memcpy(slots[i].bytes, a.data(), a.size());
    }
  }
  device_.counters().kernel_launches.fetch_add(1, std::memory_order_relaxed);
  enqueue([this, body = kernel.host, name = kernel.name, launch, slots = std::move(slots),
           sizes = std::move(sizes)]() mutable {
    std::vector<void*> values(slots.size());
    for (std::size_t i = 0; i < slots.size(); ++i) values[i] = slots[i].bytes;
    const auto begin = Clock::now();
    try {
      const RunningKernel running(device_, name.c_str());
      body(device_.services().executor, launch, ArgPack{values.data(), sizes.data(), values.size()});
    } catch (const KernelFailure& e) {
      // The executor's own (shared memory beyond the block's, a barrier's misuse) name the block but
      // not the kernel; a failure that already names it goes on as it is.
      if (std::string_view(e.what()).starts_with("kernel '")) throw;
      throw KernelFailure(fmt::format("kernel '{}' on {} failed: {}", name, device_.name(), e.what()));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw KernelFailure(fmt::format("kernel '{}' on {} failed: {}", name, device_.name(), e.what()));
    } catch (abi::__forced_unwind&) {  // a cancelled thread's unwinding goes on
      throw;
    } catch (...) {
      // `throw 42` and the like: the program would get the bare value, naming neither kernel nor device.
      throw KernelFailure(
          fmt::format("kernel '{}' on {} failed: it threw an exception that is not a "
                      "std::exception",
                      name, device_.name()));
    }
    device_.counters().kernel_ns.fetch_add(
        static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - begin).count()),
        std::memory_order_relaxed);
    cpu_work_done();
    if (obs::Tracer& tracer = device_.services().tracer; tracer.enabled())
      tracer.span(lane_, "kernel " + name, begin, ready_);
  });
}

Event SimQueue::record() {
  auto state = std::make_shared<SimEventState>();
  enqueue([this, state] {
    // Each failure is reported once, as CUDA reports an error once: by the first event recorded
    // after it, or by synchronize() if that comes first. Later events and synchronizes do not fail
    // with a kernel long reported.
    std::exception_ptr error;
    {
      std::lock_guard lock(mutex_);
      error = std::exchange(unreported_, nullptr);
    }
    state->modelled = ready_;
    state->complete(error);
  });
  return Event(state);
}

void SimQueue::wait(const Event& event) {
  const auto& state = event.state();
  if (!state) return;
  enqueue([this, state] {
    (void)state->wait();  // its error is the waited-for queue's to report
    // Work after a sim event may start when that event's queue got there in the model; after any
    // other event, when it was seen to complete.
    const auto* sim = dynamic_cast<const SimEventState*>(state.get());
    ready_ = std::max(ready_, sim != nullptr ? sim->modelled : Clock::now());
  });
}

std::unique_lock<std::mutex> SimQueue::idle_lock() {
  os::spin_until([&] { return outstanding_.load(std::memory_order_acquire) == 0; });
  std::unique_lock lock(mutex_);
  idle_cv_.wait(lock, [&] { return ops_.empty() && !busy_; });
  return lock;
}

void SimQueue::drain() { (void)idle_lock(); }

void SimQueue::synchronize() {
  require_outside_a_kernel("synchronize of a queue of " + device_.name());
  auto& tracer = device_.services().tracer;
  const auto begin = Clock::now();
  std::exception_ptr error;
  {
    std::unique_lock lock = idle_lock();
    error = std::exchange(unreported_, nullptr);
  }
  if (tracer.enabled())
    tracer.span(tracer.host_thread_lane(), "synchronize " + device_.name(), begin, Clock::now());
  if (error) std::rethrow_exception(error);
}

}  // namespace hdsm::sim
