// The CPU grid executor: runs the blocks of a CUDA-like launch on a pool of host threads (the
// calling thread takes part). Used by the sim device, host skeletons and the cluster runtime.
#pragma once

#include <hdsm/export.h>

#include <hdsm/kernel.hpp>

#include <cstddef>
#include <memory>

HDSM_VISIBLE_BEGIN
namespace hdsm::exec {

struct ExecutorOptions {
  unsigned threads = 0;                                    // total workers including the caller; 0 = cores
  std::size_t fiber_stack_bytes = std::size_t{64} * 1024;  // stack of one cooperative-kernel thread
};

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

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// Shared memory a block can use beyond Launch::shared_bytes (CUDA's static __shared__ limit).
inline constexpr std::size_t kStaticSharedBytes = std::size_t{48} * 1024;
/// Per-worker scratch for Block::local.
inline constexpr std::size_t kScratchBytes = std::size_t{256} * 1024;

}  // namespace hdsm::exec

HDSM_VISIBLE_END
