// Internals of the grid executor shared by executor.cpp and fibers.cpp.
#pragma once

#include "exec/executor.hpp"
#include "exec/fibers.hpp"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

namespace hdsm::exec {

/// A cache-line aligned byte buffer that only grows.
class AlignedBuffer {
 public:
  static constexpr std::size_t kAlign = 64;

  AlignedBuffer() = default;
  ~AlignedBuffer() { release(); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  void ensure(std::size_t bytes) {
    if (bytes <= size_) return;
    release();
    data_ = static_cast<std::byte*>(::operator new (bytes, std::align_val_t{kAlign}));
    size_ = bytes;
  }

 private:
  void release() {
    if (data_ != nullptr) ::operator delete (data_, std::align_val_t{kAlign});
    data_ = nullptr;
    size_ = 0;
  }
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// What one worker owns for the blocks it runs: allocated once and grown, never per block.
struct WorkerState {
  WorkerState(unsigned index, std::size_t fiber_stack_bytes) : fibers(index, fiber_stack_bytes) {}
  AlignedBuffer shared;   // launch.shared_bytes + kStaticSharedBytes
  AlignedBuffer scratch;  // kScratchBytes
  FiberWorker fibers;
};

struct Executor::Impl {
  Impl(Executor* owner, ExecutorOptions options);
  ~Impl();

  FiberWorker& fibers(unsigned worker) { return workers[worker]->fibers; }

  void launch(const Launch& launch, FunctionRef<void(const BlockRun&)> fn);

  // Pool side.
  void worker_main(unsigned index);
  std::uint64_t wait_for_job(std::uint64_t seen);
  void publish(unsigned participants);
  void wait_for_participants();
  void run_blocks(unsigned worker);
  void fail(std::exception_ptr error);
  void stop_threads();

  Executor* owner;
  ExecutorOptions options;
  std::vector<std::unique_ptr<WorkerState>> workers;
  std::vector<std::thread> threads;
  std::mutex launch_mutex;  // serialises launches from several host threads

  // The current job: written by the launching thread before publish(), read by participants.
  const Launch* job_launch = nullptr;
  const FunctionRef<void(const BlockRun&)>* job_fn = nullptr;
  std::uint64_t job_blocks = 0;  // end of the launch's interval of blocks (linear numbers)
  std::uint64_t job_chunk = 1;
  alignas(64) std::atomic<std::uint64_t> next_block{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::exception_ptr error;

  // Generation of the latest job (upper bits) and how many workers take part in it (low bits).
  alignas(64) std::atomic<std::uint64_t> job_word{0};
  alignas(64) std::atomic<std::uint32_t> pending{0};  // participating pool threads still running
  std::atomic<bool> stopping{false};
  std::atomic<unsigned> sleepers{0};
  std::mutex sleep_mutex;
  std::condition_variable sleep_cv;
};

}  // namespace hdsm::exec
