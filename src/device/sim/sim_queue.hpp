// An in-order queue of a sim device, served by its own host thread. Copies take the device's
// DMA engines for their modelled time; kernels run on the CPU executor. The queue keeps a modelled
// timeline (ready_): when its previous operation ended, in modelled time for transfers and in real
// time for CPU work (kernels, fills, staging); events carry it to the queues that wait for them.
#pragma once

#include <hdsm/device.hpp>

#include "device/event_state.hpp"
#include "device/sim/link_model.hpp"
#include "os/mapping.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace hdsm::sim {

class SimDevice;

/// An event recorded on a sim queue: when the work before it ended on the queue's timeline.
struct SimEventState : detail::EventState {
  Clock::time_point modelled{};  // written before complete(), read after done is seen
};

class SimQueue final : public Queue {
 public:
  /// Size of the bounce buffer that pageable host memory is staged through.
  static constexpr std::size_t kBounceBytes = std::size_t{1} << 20;

  SimQueue(SimDevice& device, unsigned id);
  ~SimQueue() override;

  Device& device() override;
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

  /// Wait until the queue is idle without reporting errors (used when memory is freed).
  void drain();

 private:
  struct Op {
    std::function<void()> run;
    Clock::time_point enqueued;  // the operation cannot start before the host asked for it
  };
  void enqueue(std::function<void()> run);
  /// The queue's timeline after CPU work that just finished.
  void cpu_work_done() { ready_ = std::max(ready_, Clock::now()); }
  void serve();
  /// The queue's lock once it is idle (nothing queued or running), spinning first.
  std::unique_lock<std::mutex> idle_lock();
  std::byte* bounce();

  SimDevice& device_;
  int lane_;
  std::mutex mutex_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<Op> ops_;
  bool busy_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> outstanding_{0};  // operations enqueued and not finished (read while spinning)
  std::exception_ptr unreported_;            // first failure no event or synchronize() reported yet
  Clock::time_point ready_{};  // the worker's only: when the previous operation ended (see above)
  os::Mapping bounce_;         // pinned staging for pageable memory, made on first use
  std::thread worker_;
};

}  // namespace hdsm::sim
