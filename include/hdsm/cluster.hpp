// CUDA-style kernels on a cluster: every rank of an MPI job runs the program; a launch gives each
// rank a contiguous interval of the grid's blocks, which the rank runs on all its cores; global
// memory is one range of pages at the same address on every rank, kept coherent at kernel
// boundaries by a page DSM (twins made on the first write fault of a page, diffs merged at the
// kernel's end, eagerly broadcast or lazily fetched). Link hdsm::cluster and run under mpirun:
//
//   hdsm::cluster::Session session(&argc, &argv);      // MPI_Init_thread unless already initialized
//   float* a = hdsm::cluster::alloc<float>(n);         // collective; same address on every rank
//   hdsm::cluster::memcpy(a, host.data(), n * 4);      // rank 0's host data becomes the content
//   hdsm::cluster::launch(scale, hdsm::cover(n), a, 2.0f, n);
//   hdsm::cluster::memcpy(host.data(), a, n * 4);      // the coherent result on every rank
//
// Between launches global memory is coherent on every rank; during a launch, each rank sees its own
// writes and the content of the last boundary. Kernels whose blocks write the same bytes are racy:
// their result is undefined, as in CUDA. Host code writes global memory only through
// cluster::memcpy; it may read it directly between launches.
#pragma once

#include <hdsm/export.h>
#include <hdsm/config.hpp>
#include <hdsm/kernel.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm::cluster {

/// How a launch's blocks are split over the ranks.
enum class Distribution : std::uint8_t { equal, weighted };

/// A custom split: given the grid's block count and each rank's measured speed (blocks per second
/// of the calibration kernel; equal weights when unmeasured), the first block of every rank and the
/// end: ranks + 1 non-decreasing numbers from 0 to blocks.
using DistributionPolicy =
    std::function<std::vector<std::uint64_t>(std::uint64_t blocks, std::span<const double> speeds)>;

/// Which ranks get the content of a copy out of global memory.
enum class Deliver : std::uint8_t { all_ranks, rank0 };

struct Options {
  std::size_t space_bytes = std::size_t{8} << 30;  // address space of global memory (a power of two)
  std::size_t page_size = 4096;                    // DSM page: a power of two, at least the system page
  unsigned threads = 0;                            // threads per rank; 0 = one per CPU it may use
  std::uint64_t lazy_pages = 2048;                 // lazy update above this many modified pages
  Distribution distribution = Distribution::equal;
  DistributionPolicy policy;  // overrides `distribution` when set
  // Warn about ranks that wrote the same bytes of a page. Off in a plain Options{};
  // from_environment() turns it on in debug builds (HDSM_CLUSTER_CHECK_RACES=auto).
  bool check_races = false;
  bool private_pages = true;  // a page only one rank touched stays private to it (needs MPI_THREAD_MULTIPLE)
  unsigned open_ahead = 16;   // a write fault also opens the next pages this rank wrote in the last kernel
  std::size_t mappings = 0;   // runs of one protection (VMAs) global memory may use; 0: from vm.max_map_count
  std::chrono::milliseconds timeout{300000};
  // Stack of each thread of a cooperative kernel's block (a fiber). Page faults are handled on the
  // kernel thread's own signal stack, not on it.
  std::size_t fiber_stack = std::size_t{64} << 10;
  // HDSM_WAIT_POLICY and HDSM_WAIT_SPIN_US: set for the process when the session starts (its
  // executor's workers and its boundaries wait by it).
  WaitPolicy wait;

  /// The HDSM_CLUSTER_* knobs of `config` (and HDSM_WAIT_*, HDSM_FIBER_STACK) (docs/configuration.md): a
  /// program's own settings, `hdsm::Config::from_environment().set("HDSM_CLUSTER_THREADS", "4")`.
  static Options from_config(const Config& config);
  /// from_config(Config::from_environment()); ConfigError when a knob is malformed.
  static Options from_environment();
};

/// Counters of this rank since the session started (or reset_stats()).
struct Stats {
  std::uint64_t kernels = 0;
  std::uint64_t lazy_kernels = 0;        // boundaries that updated rank 0 only
  std::uint64_t write_faults = 0;        // first writes to a page in a kernel (twins made)
  std::uint64_t opened_ahead = 0;        // pages a write fault opened with it, predicted from the last kernel
  std::uint64_t opened_unwritten = 0;    // of those, pages the kernel did not write after all
  std::uint64_t fetches = 0;             // invalidated pages fetched from rank 0
  std::uint64_t pages_written = 0;       // pages this rank wrote, summed over kernels
  std::uint64_t pages_modified = 0;      // pages any rank wrote, summed over kernels
  std::uint64_t pages_multi_writer = 0;  // of those, pages with several writers
  std::uint64_t pages_promoted = 0;      // private pages another rank touched (sent whole to rank 0)
  std::uint64_t pages_modified_max = 0;  // the most pages one kernel modified
  std::uint64_t pages_invalidated = 0;   // pages this rank had and dropped at boundaries
  std::uint64_t modified_bytes = 0;      // bytes this rank's writes changed, summed over kernels
  std::uint64_t payload_bytes = 0;       // page data this rank sent (diff runs, whole pages)
  std::uint64_t header_bytes = 0;        // the rest of its records: headers, runs, lane plans and bitmaps
  std::uint64_t vector_bytes = 0;        // its writeVector: a word a page in use (and two), every kernel
                                         // (from 16384 pages: a flag a block, then the flagged words)
  std::uint64_t wire_bytes = 0;      // everything this rank's MPI calls sent (broadcasts once per receiver)
  std::uint64_t race_warnings = 0;   // overlapping writes reported (rank 0)
  double boundary_seconds = 0;       // time spent making memory coherent at kernel ends
  std::uint64_t mapping_closes = 0;  // runs of pages a full mappings budget closed (they fault again)
};

/// One DSM session: initializes MPI when the program has not (and finalizes it at the end), or
/// duplicates MPI_COMM_WORLD when it has. Every rank makes one, collectively; the free functions
/// below act on it. One session at a time per process.
class Session {
 public:
  /// Options::from_environment(), whose error (a knob that one rank finds malformed) is thrown only
  /// after a collective once MPI runs: it stops every rank (with its message on that rank), instead
  /// of that rank alone.
  Session();
  Session(int* argc, char*** argv);
  explicit Session(Options options);
  Session(int* argc, char*** argv, Options options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int rank() const;
  int ranks() const;
  /// Whether lazy update is possible: the MPI library gave MPI_THREAD_MULTIPLE, and the job has two
  /// ranks or more (one rank has nobody to update).
  bool lazy_available() const;

  struct Impl;

 private:
  void open(int* argc, char*** argv, std::optional<Options> options);
  std::unique_ptr<Impl> impl_;
};

namespace detail {
class Node;
/// The node the calling thread acts on (the session's); InvalidArgument when there is none.
Node& current();
}  // namespace detail

int rank();
int ranks();

/// Collective: `bytes` of zero-filled global memory, page aligned, at the same address on every
/// rank. Every rank must ask for the same size (InvalidArgument on every rank otherwise).
void* alloc_bytes(std::size_t bytes);
template <class T>
T* alloc(std::size_t n) {
  static_assert(std::is_trivially_copyable_v<T>, "global memory holds trivially copyable types");
  return static_cast<T*>(alloc_bytes(hdsm::detail::bytes_of<T>(n)));
}
/// Collective: gives back what alloc returned.
void free(void* p);
/// Whether p lies in this rank's global memory.
bool is_global(const void* p);

/// Collective. Into global memory (dst global): rank 0's `src` becomes the content of
/// [dst, dst + bytes). Out of global memory (src global): the coherent content lands in `dst` of
/// every rank, or of rank 0 only.
void memcpy(void* dst, const void* src, std::size_t bytes, Deliver deliver = Deliver::all_ranks);

/// Collective: returns when every rank got here; launches and copies are complete when they return,
/// so this only orders host code across ranks.
void sync();

/// Collective launch of an untyped kernel: each rank runs its interval of the grid's blocks, then
/// global memory is made coherent. A grid of zero blocks is InvalidArgument on every rank; a block
/// that throws on any rank makes the launch throw KernelFailure on every rank. The ranks compare the
/// arguments' count and sizes, and the 8-byte values that point into global memory.
void launch(const Kernel& kernel, const Launch& launch, const ArgPack& args);

namespace detail {
/// Which arguments of a typed launch (the first 64) the ranks compare by value: scalars (numbers but
/// long double, enums), and pointers where they point into global memory (a host pointer, such as a
/// Constant's data(), differs between ranks by nature). Other types are compared by size only: their
/// padding bytes may differ.
struct ArgKinds {
  std::uint64_t scalars = 0;
  std::uint64_t pointers = 0;
};
template <class... P>
constexpr ArgKinds arg_kinds() {
  ArgKinds kinds;
  std::size_t i = 0;
  (
      [&] {
        if (i < 64) {
          if constexpr (std::is_pointer_v<P>)
            kinds.pointers |= std::uint64_t{1} << i;
          else if constexpr ((std::is_arithmetic_v<P> && !std::is_same_v<std::remove_cv_t<P>, long double>) ||
                             std::is_enum_v<P>)
            kinds.scalars |= std::uint64_t{1} << i;  // long double: padding bytes in its 16
        }
        ++i;
      }(),
      ...);
  return kinds;
}
void launch(const Kernel& kernel, const Launch& launch, const ArgPack& args, ArgKinds kinds);
}  // namespace detail

/// The same for a typed kernel: arguments are checked and converted at compile time, and compared
/// between the ranks (a scalar or a global-memory pointer that differs between ranks fails the
/// launch on every rank: each rank would run its blocks on other data).
template <class... P, class... A>
void launch(const KernelOf<P...>& kernel, const Launch& shape, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A),
                "the launch passes a different number of arguments than the kernel takes");
  static_assert((std::is_convertible_v<A, P> && ...),
                "an argument does not convert to the kernel's parameter type");
  const HostArgs<P...> packed(static_cast<P>(std::forward<A>(args))...);
  detail::launch(static_cast<const Kernel&>(kernel), shape, packed.pack(), detail::arg_kinds<P...>());
}

/// Collective: rank 0's `bytes` at `data` land at `data` of every rank (Constant's broadcast). A
/// rank that passes no buffer (`data` null, `bytes` not 0: it could not allocate one) fails the call
/// on every rank.
void replicate(void* data, std::size_t bytes);

/// Read-only data replicated on every rank (CUDA's constant memory): rank 0's values, broadcast at
/// construction (collective). Kernels take data() as a plain pointer.
template <class T>
class Constant {
 public:
  static_assert(std::is_trivially_copyable_v<T>, "constant memory holds trivially copyable types");
  Constant(const T* rank0_values, std::size_t n) {
    // A rank that cannot hold the values still takes part in the broadcast's agreement, so that
    // every rank fails rather than the others waiting for it.
    std::exception_ptr failed;
    try {
      values_.resize(n);
      if (n != 0 && rank0_values == nullptr && rank() == 0)
        throw InvalidArgument("cluster::constant of " + std::to_string(n) +
                              " elements from a null pointer on rank 0");
    } catch (...) {
      failed = std::current_exception();
    }
    if (!failed && n != 0 && rank() == 0) std::memcpy(values_.data(), rank0_values, n * sizeof(T));
    const std::size_t bytes = hdsm::detail::bytes_of<T>(n);
    try {
      replicate(failed ? nullptr : values_.data(), bytes);
    } catch (...) {
      if (failed) std::rethrow_exception(failed);
      throw;
    }
    if (failed) std::rethrow_exception(failed);
  }
  const T* data() const { return values_.data(); }
  std::size_t size() const { return values_.size(); }
  const T& operator[](std::size_t i) const { return values_[i]; }

 private:
  std::vector<T> values_;
};

template <class T>
Constant<T> constant(const T* rank0_values, std::size_t n) {
  return Constant<T>(rank0_values, n);
}

Stats stats();
void reset_stats();

}  // namespace hdsm::cluster

HDSM_VISIBLE_END
