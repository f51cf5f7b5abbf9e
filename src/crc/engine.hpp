// What a crc::Runtime runs on: the threads of this process (runtime.cpp) or MPI ranks (libhdsm_mpi,
// src/mpi/crc_engine.cpp). An engine owns the workers, the transport and, on the home, the shared
// space; the protocol (Home, Worker, Directory) is the same in both.
#pragma once

#include "crc/page_buffer.hpp"

#include <hdsm/export.h>
#include <hdsm/crc.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>

HDSM_VISIBLE_BEGIN
namespace hdsm::crc::detail {

class Engine {
 public:
  virtual ~Engine() = default;
  virtual int workers() const = 0;
  virtual bool is_home() const = 0;
  /// Collective under MPI (every rank, in the same order): the same pointer on every rank.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void free(void* pointer) = 0;
  /// Runs one region with this page-buffer geometry; returns its counters (summed over the
  /// workers, on the home) or throws the region's error (on every rank).
  virtual Stats run(const std::function<void()>& task, const Geometry& geometry) = 0;
  /// The same with the home running the task too, as the last of workers() + 1 workers.
  virtual Stats run_with_home(const std::function<void()>& task, const Geometry& geometry) = 0;
  /// The runtime is left to the process's end, never destroyed (a child of fork(), an exit() from a
  /// task): nothing may end the engine later (MPI's: its MPI_Finalize hook).
  virtual void abandon() noexcept {}
};

/// The engine factory libhdsm_mpi provides as the C symbol hdsm_crc_mpi_engine (found at run time,
/// so libhdsm needs no MPI). `local_error`: what this rank's own checks of the options found (a
/// malformed knob, a local store too small), which the ranks agree on with their setup: every rank
/// then fails, this one with its error, none waiting for it.
using EngineFactory = std::unique_ptr<Engine> (*)(const Options& options, std::exception_ptr local_error);

/// Sums the counters of `from` into `into`.
void add_stats(Stats& into, const Stats& from);

/// The shared space's allocator: objects aligned to the largest page size.
inline constexpr std::size_t kSpaceAlignment = kMaxPageSize;

/// `p` rounded up to kSpaceAlignment: where a shared space in memory from `p` on starts, so that
/// pages, aligned by address, never begin before it (memory is reserved one alignment larger).
inline std::byte* align_space(std::byte* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  return p + ((kSpaceAlignment - a % kSpaceAlignment) % kSpaceAlignment);
}

}  // namespace hdsm::crc::detail
HDSM_VISIBLE_END
