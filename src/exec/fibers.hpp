// Per-worker state of cooperative kernels: a pool of fiber stacks (mapped once with a guard region
// below each, reused by every block and launch the worker runs), the fibers parked on them between
// blocks, and the round-robin ring of the block being run.
#pragma once

#include <boost/context/fiber.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hdsm::exec {

/// Fiber stacks of one worker. Stacks are only ever added (never moved or unmapped before the
/// pool dies), so a block of n threads uses stacks 0..n-1. Stack tops are staggered ("coloured")
/// so that the hot top frames of many fibers do not all fall into the same cache sets.
class StackPool {
 public:
  StackPool(unsigned worker, std::size_t stack_bytes);
  ~StackPool();
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;

  /// Makes at least `count` stacks available; throws SystemError when mmap/mprotect fail.
  void reserve(std::size_t count);
  std::size_t size() const { return bottoms_.size(); }
  /// Lowest usable address of stack i (its guard region lies just below).
  std::byte* bottom(std::size_t i) const { return bottoms_[i]; }
  /// Usable bytes of stack i: at least the requested stack size, plus its colour.
  std::size_t size(std::size_t i) const { return stack_bytes_ + ((i + i / 16) % 16) * 256; }

 private:
  struct Region {
    void* base;
    std::size_t bytes;
  };
  unsigned worker_;
  std::size_t page_;
  std::size_t stack_bytes_;  // requested size rounded up to pages
  std::size_t guard_;        // inaccessible bytes below each stack
  std::size_t stride_;       // guard + stack + colour slack, an odd number of pages
  std::vector<Region> regions_;
  std::vector<std::byte*> bottoms_;
};

/// The k-th block-shared allocation of a cooperative block.
struct SharedAlloc {
  std::size_t offset;
  std::size_t bytes;
  std::size_t align;
};

/// The cooperative threads of one worker. Thread i of a block runs on fiber i, created the first
/// time a block needs it and then parked between blocks for as long as the worker lives.
class FiberWorker {
 public:
  static constexpr std::uint32_t kScheduler = UINT32_MAX;  // "not a thread" in from/next

  FiberWorker(unsigned worker, std::size_t stack_bytes) : stacks(worker, stack_bytes) {}
  /// Ends the parked fibers (on the destroying thread; fibers are not tied to a thread).
  ~FiberWorker();
  FiberWorker(const FiberWorker&) = delete;
  FiberWorker& operator=(const FiberWorker&) = delete;

  /// Readies the worker for a block of n threads: stacks grow, and the ring holds 0..n-1.
  void prepare(std::uint32_t n) {
    stacks.reserve(n);
    if (fibers.size() < n) {
      fibers.resize(n);
      next.resize(n);
      prev.resize(n);
    }
    for (std::uint32_t i = 0; i < n; ++i) {
      next[i] = i + 1 == n ? 0 : i + 1;
      prev[i] = i == 0 ? n - 1 : i - 1;
    }
    shared_allocs.clear();
  }

  StackPool stacks;
  std::vector<boost::context::fiber> fibers;  // the parked threads (empty while one runs)
  boost::context::fiber sched;                // the scheduler, while the block's threads run
  std::vector<std::uint32_t> next, prev;      // ring of the threads still running the block
  std::uint32_t from = kScheduler;            // who made the latest switch
  void* block = nullptr;                      // the block being run; null ends a resumed fiber
  std::vector<SharedAlloc> shared_allocs;
  // Stack of whoever resumed the block's threads (ASan builds only).
  const void* sched_stack_bottom = nullptr;
  std::size_t sched_stack_size = 0;
  // ThreadSanitizer contexts (TSan builds only): one for all of this worker's cooperative threads
  // (they never run concurrently), and the one of whoever resumes them.
  void* tsan_threads = nullptr;
  void* tsan_resumer = nullptr;
};

}  // namespace hdsm::exec
