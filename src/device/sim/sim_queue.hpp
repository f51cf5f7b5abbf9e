// An in-order queue of a sim device, served by its own host thread. Copies take the device's
// DMA engines for their modelled time; kernels run on the CPU executor.
#pragma once

#include <hdsm/device.hpp>

#include "os/mapping.hpp"

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace hdsm::sim {

class SimDevice;

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
  using Op = std::function<void()>;
  void enqueue(Op op);
  void serve();
  std::byte* bounce();

  SimDevice& device_;
  int lane_;
  std::mutex mutex_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<Op> ops_;
  bool busy_ = false;
  bool stop_ = false;
  std::exception_ptr error_;  // first failure since the last synchronize()
  os::Mapping bounce_;        // pinned staging for pageable memory, made on first use
  std::thread worker_;
};

}  // namespace hdsm::sim
