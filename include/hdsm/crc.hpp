// Centralized release consistency: SPMD workers that compute out of small private local stores, and
// one home that owns the shared space and every coherence decision.
//
//   hdsm::crc::Runtime rt;                       // the home; starts the workers
//   double* a = rt.alloc<double>(n);             // shared space: the home reads and writes it directly
//   rt.run([&] {                                 // every worker runs the task (SPMD)
//     const auto [lo, hi] = hdsm::crc::share(n); // this worker's part of [0, n)
//     for (std::size_t i = lo; i < hi; ++i) hdsm::crc::write(&a[i], 2.0 * i);
//     hdsm::crc::barrier();                      // release + acquire
//     double left = hdsm::crc::read(&a[lo == 0 ? n - 1 : lo - 1]);
//   });
//
// Inside a task, shared data is reached through the functions below, never by dereferencing the
// pointer: a worker reads and writes copies of the pages in its page buffer, which the home brings
// up to date at acquires (lock, barrier) and merges back at releases (unlock, barrier, the end of
// the task, a full buffer). A data-race-free program sees sequentially consistent results; the
// user guide (docs/crc.md) says what is undefined. Workers never receive a message they did not
// ask for. Transports: threads in this process, or MPI ranks (rank 0 is the home).
#pragma once

#include <hdsm/export.h>
#include <hdsm/config.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

HDSM_VISIBLE_BEGIN
namespace hdsm::crc {

/// How the home and the workers talk.
enum class Transport {
  threads,  // workers are threads of this process; mailboxes are lock-free queues
  mpi,      // rank 0 is the home, every other rank a worker (needs libhdsm_mpi; see docs/crc.md)
};

/// Where the threads transport's threads run.
enum class Bind {
  none,     // wherever the scheduler puts them
  compact,  // one CPU each, the home's first, then the CPUs that share the most with it
};

struct Options {
  int workers = 0;                      // threads transport: 0 = one per usable CPU but the home's
  std::size_t local_store = 256 << 10;  // bytes of each worker's private store (its page frames)
  std::size_t page_size = 4096;         // initial page size: a power of two, 128 B .. 64 KiB
  // Page-buffer sets: a power of two with 4 x sets > frames; 0 = the largest up to the frames.
  std::size_t sets = 0;
  std::size_t shared_bytes = 256 << 20;      // capacity of the shared space
  std::chrono::milliseconds timeout{60000};  // wait for missing workers at a barrier or lock
  Transport transport = Transport::threads;
  // Threads transport: read_only_local, write_single_local and overwrite_local reach the shared
  // space in place (no page copy through the local store), since the workers share the home's
  // memory. false copies every page through the store, as the workers of the seed's machine did.
  // MPI ranks always copy.
  bool zero_copy = true;
  // Threads transport: inside a region, how long a worker spins for the home's answer (and the home
  // for the next request) before it sleeps, where the workers and the home have a core each. A
  // worker queued for a lock or at a barrier waits for the others; a sleeper costs its wake-up at
  // every hand-on. Oversubscribed, the process-wide HDSM_WAIT_SPIN_US applies instead, and
  // HDSM_WAIT_POLICY=spin or block overrides both.
  std::chrono::microseconds region_spin{1000};
  // Threads transport: compact binds the home (while it serves a region) and each worker to a CPU
  // of its own, in an order that keeps them on the package and last-level cache they share first,
  // wrapping around when there are more threads than CPUs. none leaves them to the scheduler.
  Bind bind = Bind::none;
  // HDSM_WAIT_POLICY and HDSM_WAIT_SPIN_US: set for the process when the runtime starts.
  WaitPolicy wait;

  /// The HDSM_CRC_* knobs of `config` (and HDSM_WAIT_*) (docs/configuration.md): a program's own settings,
  /// `hdsm::Config::from_environment().set("HDSM_CRC_WORKERS", "3")`.
  static Options from_config(const Config& config);
  /// from_config(Config::from_environment()); ConfigError when a knob is malformed.
  static Options from_environment();
};

/// Counters of the last regions, summed over the workers (reset_stats() zeroes them).
struct Stats {
  std::uint64_t regions = 0;
  std::uint64_t read_misses = 0;         // pages fetched for reading through the home
  std::uint64_t write_faults = 0;        // write permission asked (fetches for writing and upgrades)
  std::uint64_t upgrades_with_data = 0;  // upgrades whose copy was stale, so the home resent the page
  std::uint64_t write_backs = 0;         // modified pages merged at the home
  std::uint64_t flush_fetches = 0;       // combined write-back + fetch handshakes (a modified victim)
  std::uint64_t direct_gets = 0;         // read-only and single-writer fetches (no handshake)
  std::uint64_t direct_puts = 0;         // single-writer write-backs (no handshake)
  std::uint64_t in_place = 0;            // localized read-only and single-writer accesses served in the
                                         // shared space itself (zero copy, threads transport)
  std::uint64_t evictions = 0;           // pages replaced in a page buffer
  std::uint64_t conflict_misses = 0;     // misses that found their set full while frames were free
  std::uint64_t invalidations = 0;       // buffered pages dropped at acquires
  std::uint64_t twins = 0;               // twins the home made (lazily, at write-backs)
  std::uint64_t merged_bytes = 0;        // bytes the merges changed in the shared space
  std::uint64_t locks = 0;
  std::uint64_t barriers = 0;
  std::uint64_t messages = 0;  // requests the home served
};

namespace detail {
/// What the inline access functions read: the current worker's tag arrays, as the page buffer
/// keeps them. Outside a task it points at a lookup that never hits, whose slow path reports the
/// misuse; so does a worker's once its region failed and the home stops it (an atomic pointer, which
/// the home's thread may store to: the same one load on the hit path).
struct Lookup {
  const std::uintptr_t* read_tags;   // page address per way, or kNoPage
  const std::uintptr_t* write_tags;  // page address per way where the worker may write
  std::byte* const* frames;          // local address of each way's page
  std::uintptr_t offset_mask;        // page size - 1
  unsigned page_shift;
  std::uintptr_t set_mask;  // sets - 1
  unsigned set_shift;       // log2(sets)
};
inline constexpr std::uintptr_t kNoPage = ~std::uintptr_t{0};
extern HDSM_API const Lookup kOutsideTask;
// initial-exec: one load from the thread pointer on the hit path (libhdsm is linked, not dlopened).
// nvcc's front end does not know the attribute on a declaration (translation units it compiles take
// the default model for their accesses, which is as correct and one call slower).
#if defined(__CUDACC__)
extern HDSM_API constinit thread_local std::atomic<const Lookup*> current;
#else
extern HDSM_API constinit thread_local std::atomic<const Lookup*> current
    __attribute__((tls_model("initial-exec")));
#endif

/// The set of `a`'s page: the page number's low bits folded with the bits above them, so that arrays
/// whose starts are a multiple of sets x page size apart (large aligned allocations) do not fall
/// into the same sets page for page.
inline std::uintptr_t set_of(const Lookup& l, std::uintptr_t a) {
  const std::uintptr_t number = a >> l.page_shift;
  return (number ^ (number >> l.set_shift)) & l.set_mask;
}

/// The way of `a`'s page in `tags`, or -1. Never straddles: callers check the access fits the page.
inline int way_of(const Lookup& l, const std::uintptr_t* tags, std::uintptr_t a) {
  const std::uintptr_t page = a & ~l.offset_mask;
  const std::uintptr_t base = set_of(l, a) << 2;
  for (std::uintptr_t w = 0; w < 4; ++w)
    if (tags[base + w] == page) return static_cast<int>(base + w);
  return -1;
}
inline bool fits(const Lookup& l, std::uintptr_t a, std::size_t bytes) {
  return (a & l.offset_mask) + bytes <= l.offset_mask + 1;
}

enum class Access : std::uint8_t { read, write, read_only, write_single, overwrite };
/// The slow paths: misses, upgrades, accesses that straddle pages, misuse.
HDSM_API void access(Access access, const void* address, void* bytes, std::size_t size);
HDSM_API std::pair<std::byte*, std::size_t> localize(Access access, const void* address, std::size_t element);
}  // namespace detail

namespace detail {
/// The hit paths: the page in the read (or write) tags, the bytes copied from (or to) the local
/// store; anything else goes to the slow path with `access`.
template <Access A, class T>
T load(const T* p) {
  static_assert(std::is_trivially_copyable_v<T>, "crc reads need a trivially copyable type");
  const Lookup& l = *current.load(std::memory_order_relaxed);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  T v;
  if (fits(l, a, sizeof(T))) [[likely]] {
    if (const int way = way_of(l, l.read_tags, a); way >= 0) [[likely]] {
      std::memcpy(&v, l.frames[way] + (a & l.offset_mask), sizeof(T));
      return v;
    }
  }
  access(A, p, &v, sizeof(T));
  return v;
}
template <Access A, class T>
void store(T* p, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>, "crc writes need a trivially copyable type");
  const Lookup& l = *current.load(std::memory_order_relaxed);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if (fits(l, a, sizeof(T))) [[likely]] {
    if (const int way = way_of(l, l.write_tags, a); way >= 0) [[likely]] {
      std::memcpy(l.frames[way] + (a & l.offset_mask), &v, sizeof(T));
      return;
    }
  }
  access(A, p, const_cast<T*>(&v), sizeof(T));
}
}  // namespace detail

/// Reads *p through the page buffer (fetching its page from the home on a miss).
template <class T>
T read(const T* p) {
  return detail::load<detail::Access::read>(p);
}

/// Writes v to *p in the page buffer (asking the home for write permission on the first write to
/// the page since the last release).
template <class T>
void write(T* p, const std::type_identity_t<T>& v) {
  detail::store<detail::Access::write>(p, v);
}

/// read() for data no worker writes in this region: a miss copies the page straight from the shared
/// space, with no handshake. The copy is dropped at the next acquire.
template <class T>
T read_only(const T* p) {
  return detail::load<detail::Access::read_only>(p);
}

/// write() for pages only this worker writes in this region: no handshake to fetch or to write
/// back; the whole page goes back to the shared space at the release.
template <class T>
void write_single(T* p, const std::type_identity_t<T>& v) {
  detail::store<detail::Access::write_single>(p, v);
}

/// A run of elements in the local store (or, with Options::zero_copy, in the shared space itself):
/// data[0 .. count) are p[0 .. count), up to the page's end. Valid until the next lock, unlock,
/// barrier or flush, and while at most three other pages come into the page buffer or are handed
/// out as runs after it: up to four runs of different pages can be used together (as many as the
/// local store has frames, where that is fewer).
template <class T>
struct Local {
  T* data;
  std::size_t count;
};

/// Localized access: the local-store address of *p for reading, and how many elements follow in
/// the same page. InvalidArgument when *p straddles two pages.
template <class T>
Local<const T> read_local(const T* p) {
  auto [bytes, count] = detail::localize(detail::Access::read, p, sizeof(T));
  return {reinterpret_cast<const T*>(bytes), count};
}
template <class T>
Local<T> write_local(T* p) {
  auto [bytes, count] = detail::localize(detail::Access::write, p, sizeof(T));
  return {reinterpret_cast<T*>(bytes), count};
}
/// The same for the read-only and single-writer variants.
template <class T>
Local<const T> read_only_local(const T* p) {
  auto [bytes, count] = detail::localize(detail::Access::read_only, p, sizeof(T));
  return {reinterpret_cast<const T*>(bytes), count};
}
template <class T>
Local<T> write_single_local(T* p) {
  auto [bytes, count] = detail::localize(detail::Access::write_single, p, sizeof(T));
  return {reinterpret_cast<T*>(bytes), count};
}
/// write_single_local for a page this worker overwrites from *p to the page's end before the next
/// release: a miss fetches only the bytes before *p, so those after it are undefined until written.
/// Saves a page copy per page for output arrays.
template <class T>
Local<T> overwrite_local(T* p) {
  auto [bytes, count] = detail::localize(detail::Access::overwrite, p, sizeof(T));
  return {reinterpret_cast<T*>(bytes), count};
}

/// Acquire: waits until the home grants lock `id` (first come, first served), then drops the
/// buffered pages others changed.
void lock(int id);
/// Release: writes the modified pages back, then hands lock `id` on. InvalidArgument when this
/// worker does not hold it.
void unlock(int id);
/// Release and acquire for every worker of the region. A worker that ends its task without coming
/// ends the region with an error, as does one that has not come within the timeout.
void barrier();
/// Writes the modified pages back now (a release without a lock).
void flush();

/// This worker's number in [0, worker_count()); -1 outside a task.
int worker_id();
int worker_count();
/// This worker's contiguous share [first, last) of n items split as evenly as possible.
std::pair<std::size_t, std::size_t> share(std::size_t n);
/// The same, in whole granules of `granule` items (the last share takes the rest): with a granule of
/// one page of elements, no page has two writers, as the single-writer variant needs.
std::pair<std::size_t, std::size_t> share(std::size_t n, std::size_t granule);

/// The home: owns the shared space and serves the workers while they run a task.
class Runtime {
 public:
  explicit Runtime(const Options& options = Options::from_environment());
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Shared memory, aligned to the largest page size (64 KiB), zeroed. Between regions only; the
  /// home reads and writes it directly, workers through the functions above. OutOfDeviceMemory
  /// names the space when it is full.
  void* allocate(std::size_t bytes);
  template <class T>
  T* alloc(std::size_t count) {
    static_assert(std::is_trivially_copyable_v<T>, "the shared space holds trivially copyable types");
    return static_cast<T*>(allocate(hdsm::detail::bytes_of<T>(count)));
  }
  void free(void* pointer);

  /// The page size of the next regions: a power of two from 128 B to 64 KiB, with at least one page
  /// per set in the local store. The page buffers are empty between regions, as a change needs.
  void page_size(std::size_t bytes);
  std::size_t page_size() const;
  /// Frames and sets of each worker's page buffer at the current page size.
  std::size_t frames() const;
  std::size_t sets() const;

  int workers() const;
  /// True on the process that holds the shared space (always with threads; rank 0 under MPI).
  bool is_home() const;

  /// Runs `task` on every worker and serves their requests until all have finished. The first
  /// error a worker raised (or a barrier or lock that not every worker reached) ends the region and
  /// is rethrown here, its message naming the worker.
  void run(const std::function<void()>& task);
  /// A region that needs no servicing (only read_only, write_single and overwrite_local accesses,
  /// no locks or barriers): the home runs the task too, as worker number workers() of
  /// workers() + 1, and serves afterwards. An access of the home's that needs the home is
  /// Unsupported. Under MPI it is collective, like run: rank 0 works on its own memory.
  void run_with_home(const std::function<void()>& task);
  /// The seed's style: tasks registered under numbers, run by number. A number with no task is
  /// InvalidArgument; under MPI, where the others are in the region already, a worker rank's missing
  /// task fails the region on every rank (rank 0, the home, runs no task in `run`). Between
  /// regions only, like allocate.
  void define(int task_id, std::function<void()> task);
  void run(int task_id);

  /// The regions' counters: on threads and on rank 0 summed over the workers; on an MPI worker rank
  /// its own.
  Stats stats() const;
  void reset_stats();

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace hdsm::crc

HDSM_VISIBLE_END
