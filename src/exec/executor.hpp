// The CPU grid executor: runs the blocks of a CUDA-like launch on a pool of host threads (the
// calling thread takes part). Used by the sim device, host skeletons and the cluster runtime.
#pragma once

#include <hdsm/export.h>

#include <hdsm/kernel.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>

HDSM_VISIBLE_BEGIN
namespace hdsm::exec {

/// The smallest stack a cooperative kernel's thread may have.
inline constexpr std::size_t kMinFiberStack = std::size_t{16} * 1024;

struct ExecutorOptions {
  unsigned threads = 0;  // total workers including the caller; 0 = usable CPUs
  std::size_t fiber_stack_bytes = std::size_t{64} * 1024;  // stack of one cooperative-kernel thread
};

/// The checks for_each_block makes of a launch's shape: InvalidArgument naming it otherwise.
void validate(const Launch& launch);

class Executor {
 public:
  explicit Executor(ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  /// Workers that run blocks, the calling thread included.
  unsigned workers() const;
  const ExecutorOptions& options() const;

  /// Run fn for every block of the launch; returns when all blocks are done and rethrows the first
  /// exception a block threw. Validates the launch (non-zero dims, at most 1024 threads a block)
  /// and throws InvalidArgument naming the shape otherwise. Launches from several host threads
  /// are safe (they are serialised).
  void for_each_block(const Launch& launch, FunctionRef<void(const BlockRun&)> fn);

  /// Whether the calling thread is running blocks of this executor now (its pool threads and the
  /// launching thread, while a launch runs). Async-signal-safe: fault handlers ask it.
  bool running_here() const noexcept;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// Whether the calling thread is running blocks of any executor now: kernel code, which may not wait
/// for device work (that work may need the executor whose worker it holds).
bool inside_a_block() noexcept;

/// While it lives, the launches the constructing thread makes run only the blocks [begin, end) of
/// their grids, numbered in linear order (x fastest, then y, then z); an end past the grid is
/// clamped, and an empty interval runs no block. The cluster runtime runs each rank's interval of a
/// launch this way, through the kernels' own host bodies. Scopes nest: the innermost one applies.
class BlockInterval {
 public:
  BlockInterval(std::uint64_t begin, std::uint64_t end);
  ~BlockInterval();
  BlockInterval(const BlockInterval&) = delete;
  BlockInterval& operator=(const BlockInterval&) = delete;

  std::uint64_t begin() const { return begin_; }
  std::uint64_t end() const { return end_; }
  /// The innermost interval of the calling thread, or nullptr.
  static const BlockInterval* current() noexcept;

 private:
  std::uint64_t begin_, end_;
  const BlockInterval* previous_;
};

/// Shared memory a block can use beyond Launch::shared_bytes (CUDA's static __shared__ limit).
inline constexpr std::size_t kStaticSharedBytes = std::size_t{48} * 1024;
/// Per-worker scratch for Block::local.
inline constexpr std::size_t kScratchBytes = std::size_t{256} * 1024;

}  // namespace hdsm::exec

HDSM_VISIBLE_END
