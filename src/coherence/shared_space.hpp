// The shared address space of ADSM (seed 000 §3.3, §4.2-4.3, Fig. 6): objects allocated in an
// os::Arena segment of their device, a copy on the device, and a coherence protocol that keeps the two
// consistent. The CPU side is driven by page faults on the user view; the device side by release (at
// a kernel call: the CPU's newer blocks go up) and acquire (at the sync: the kernel's results come
// down, eagerly for batch, on fault for lazy and rolling).
//
// Every runtime copy goes through the arena's shadow view, so it never faults and never lifts a
// protection of the user view. A write to a read-only block that fits the rolling window moves no
// data, and the handler resolves it itself (try-locks, ProtectionMap::try_set, RollingWindow::try_add:
// nothing that allocates or blocks), so no other thread runs while a burst of such faults lasts, and
// none is interrupted by their TLB flushes. Every other fault is resolved on the os::FaultService
// thread of its object's device (faults of different devices resolve in parallel) while the faulting
// thread waits in its handler: it is in user code and holds no runtime lock, so the
// resolution may lock, allocate and wait for the device.
//
// Locks (ranked, os/lock_rank.hpp; the order is in docs/architecture.md): an object's mutex comes
// before window_mutex_, the copy engine's locks, objects_mutex_ and the directory's; no two objects'
// mutexes are held at once (a copy between objects decides under the source's and copies under the
// destination's); objects_mutex_ (the object table) is held only to look an entry up, add or remove
// it. A block the rolling window evicts is handled after both are released, under its own object's
// lock.
#pragma once

#include <hdsm/export.h>

#include "coherence/directory.hpp"
#include "coherence/protocol.hpp"
#include "coherence/rolling_window.hpp"
#include "obs/counters.hpp"
#include "obs/trace.hpp"
#include "os/arena.hpp"
#include "os/fault.hpp"
#include "os/fault_mutex.hpp"
#include "os/fault_service.hpp"
#include "os/lock_rank.hpp"
#include "os/protection.hpp"
#include "transfer/copy_engine.hpp"

#include <hdsm/device.hpp>
#include <hdsm/kernel.hpp>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm::coherence {

inline constexpr std::size_t kDefaultSegmentBytes = std::size_t{16} << 30;

/// The knobs of a shared space that are not the protocol and the block size.
struct SpaceTuning {
  std::size_t segment_bytes = kDefaultSegmentBytes;  // address space per device (HDSM_ARENA_SEGMENT)
  unsigned rolling_step = default_rolling_step;      // HDSM_ROLLING_STEP
  /// Rolling-update: the most invalid blocks one read fault fetches when an object is read forward
  /// (HDSM_READ_AHEAD); 1 fetches the faulting block only, as seed 000.
  unsigned read_ahead = 1;
  std::size_t arena_keep_bytes = 0;  // freed memory kept for new objects (HDSM_ARENA_KEEP)
  /// Lazy and rolling: objects up to this size that the host reads back after syncs are fetched by
  /// the sync itself (HDSM_SYNC_PREFETCH); 0: never, every such read faults.
  std::size_t sync_prefetch_bytes = 0;
};

/// Of the syncs that would fetch an object the host read back before, every this many leaves it to
/// fault instead: if the host no longer reads it, the syncs stop fetching it.
inline constexpr unsigned kSyncPrefetchProbe = 8;

/// How a kernel call uses one shared object. A call that annotated a range touches only [pointer,
/// pointer + bytes); kWholeObject: the whole object `pointer` lies in. The range narrows only which
/// asynchronous copies of the object the call waits for; release and acquire cover the object.
struct ObjectUse {
  static constexpr std::size_t kWholeObject = SIZE_MAX;
  const void* pointer = nullptr;
  KernelUse use = KernelUse::unknown;
  std::size_t bytes = kWholeObject;
};

class SharedSpace {
 public:
  /// Runs each object's ProtectionMap may use before it degrades.
  static constexpr std::size_t kRunBudget = 4096;

  /// How bulk copies move bytes: the copy engine's planning figures and staging knobs, and the
  /// staging pool its chunks come from (empty: a pool of the space's own, of kDefaultStagingBytes in
  /// chunks of options.chunk_bytes, made on first use).
  struct CopySetup {
    transfer::Topology topology;  // devices empty: transfer::stated_topology(devices)
    transfer::Options options;
    transfer::CopyEngine::PoolSource pool;
  };
  static constexpr std::size_t kDefaultStagingBytes = std::size_t{16} << 20;

  /// The devices (and the tracer, when given) must outlive the space. One arena segment and one
  /// queue per device; faults in the whole user view go to this space until it is destroyed.
  SharedSpace(std::span<Device* const> devices, ProtocolKind kind, std::size_t block_bytes,
              obs::Counters& counters, SpaceTuning tuning = {}, obs::Tracer* tracer = nullptr,
              CopySetup copies = {});
  ~SharedSpace();
  SharedSpace(const SharedSpace&) = delete;
  SharedSpace& operator=(const SharedSpace&) = delete;

  /// A new shared object of `bytes` hosted by `device`, zero on both sides.
  void* alloc(std::size_t bytes, unsigned device);
  /// `p` must be the start of a live object (hdsm::InvalidPointer otherwise).
  void free(void* p);
  /// The InvalidPointer free(p) would throw, before the caller forgets p anywhere; nothing for the
  /// start of a live object.
  void check_free(const void* p) const;

  /// Kernel call on `device`: the objects named in `uses`, or every object of the device used as
  /// KernelUse::unknown when `uses` is empty, are released (the CPU's newer blocks are uploaded), and
  /// the device's queue waits for the asynchronous copies of them that the call's ranges conflict with.
  /// `walk`, where given and `uses` is empty, gets the number of this walk over the device's objects:
  /// an unannotated call's sync acquires the objects it walked, and none made later.
  void release(unsigned device, std::span<const ObjectUse> uses, std::uint64_t* walk = nullptr);
  /// The device-side argument for a pointer into a live shared object, or one past its last byte
  /// (hdsm::InvalidArgument otherwise).
  KernelArg argument(const void* p) const;
  /// The address kernels of the hosting device see for `p` (hdsm::InvalidArgument as argument()).
  std::uint64_t device_address(const void* p) const;
  void launch(unsigned device, const Kernel& kernel, const Launch& shape, std::span<const KernelArg> args);
  /// Sync on `device`: waits for `after` (the calls being acquired; nullptr: everything on the
  /// device's queue), rethrowing kernel errors, then acquires the objects as release() chose them.
  /// With `walk` (the latest of unannotated calls' release walks), it acquires the device's objects
  /// that walk saw and that are still live, as KernelUse::unknown, and the objects `uses` names (none
  /// when empty): an object made after the calls, which no kernel of theirs can have used, keeps what
  /// the host wrote into it.
  void acquire(unsigned device, std::span<const ObjectUse> uses, const Event* after = nullptr,
               const std::uint64_t* walk = nullptr);
  /// An event that completes when everything enqueued on `device`'s queue so far has.
  Event record(unsigned device);
  /// Later work on `device`'s queue waits for what `before`'s queue holds now (a release there).
  void order(unsigned device, unsigned before);

  /// Remote access (seed 003 §4.2): the argument by which a kernel on `device` reaches `p`, a pointer
  /// into a live object of another device, when the devices are peers (Device::peer_argument).
  std::optional<KernelArg> peer_argument(unsigned device, const void* p) const;
  /// A copy of the object `p` lies in, for a kernel on `device` that cannot reach the object's own
  /// device: a temporary buffer of `device` receives the object's device copy (through the copy
  /// engine, ordered after the object's queued work; `device`'s queue waits for it).
  struct Temporary {
    DeviceBuffer buffer;  // holds the whole object
  };
  Temporary copy_in(unsigned device, const void* p);
  /// The argument for `p` in the temporary (p may point inside the object).
  KernelArg argument(const Temporary& temp, const void* p) const;
  /// Copies `temp` back over the device copy of the object `p` lies in, after the kernels enqueued on
  /// `device` so far; the object's queue waits for it. Returns the event of its completion.
  Event copy_back(unsigned device, const Temporary& temp, const void* p);
  /// Frees a temporary whose kernels and copies have completed.
  void free_temporary(unsigned device, const Temporary& temp);

  /// Bulk memory on shared objects (seed 000 §4.4), each decided per block by its state (protocol.hpp:
  /// on_bulk_write, on_bulk_read): an invalid host copy is never fetched, the device works on its
  /// copy; a dirty one is written through the shadow view. The runtime's accesses never fault. Each
  /// returns once the data is in place. Every byte of a shared range must lie in a live object
  /// (hdsm::InvalidArgument naming the first byte that does not, before anything is written).
  /// [dst, dst + n) shared, [src, src + n) host memory. With `pending`, device work may still read
  /// the source when this returns: its events are appended there, to wait for before the source
  /// changes (later operations on the objects are ordered after it anyway).
  void write(void* dst, const void* src, std::size_t n, std::vector<Event>* pending = nullptr);
  /// [dst, dst + n) host memory, [src, src + n) shared. With `pending`, device work may still write
  /// the destination when this returns: wait for the appended events before reading it.
  void read(void* dst, const void* src, std::size_t n, std::vector<Event>* pending = nullptr);
  /// [dst, dst + n) shared, every byte set to `value`.
  void fill(void* dst, std::uint8_t value, std::size_t n);
  /// Both ranges shared (any objects, any devices); they may overlap (memmove semantics). Device
  /// copies of whole blocks move device-side, on the route the copy engine plans (on the device,
  /// peer DMA, or staged through pinned chunks). With `pending`, device work may still read the
  /// source and write the destination when this returns: its events are appended there, and later
  /// work on the copied ranges is ordered after it (AsyncCopy). Overlapping ranges are copied
  /// synchronously.
  void copy(void* dst, const void* src, std::size_t n, std::vector<Event>* pending = nullptr);
  /// hdsm::InvalidArgument, as write and read give it, unless every byte of [p, p + n) is in a live object.
  void check(const void* p, std::size_t n, const char* call) const { (void)spans(p, n, call); }
  /// Whether `p` is in this space's user view (a live object or not).
  bool owns(const void* p) const { return arena_.contains(p); }

  /// Waits for every transfer the space queued (the zero fill of new objects, evictions): for
  /// benchmarks that time the CPU side alone.
  void wait_transfers();

  ProtocolKind kind() const { return kind_; }
  std::size_t block_bytes() const { return directory_.block_bytes(); }
  const Directory& directory() const { return directory_; }
  std::size_t rolling_capacity() const;
  transfer::CopyEngine& copy_engine() { return *engine_; }

 private:
  /// An asynchronous copy (memcpy_async, chunked I/O and MPI) that reads or writes bytes [offset,
  /// offset + bytes) of an object's device copy until `done`. Later work on the object conflicts with
  /// it when their ranges overlap and one of them writes: such work settles it first (settle), so a
  /// kernel whose annotated range is elsewhere in the object runs while the copy does.
  struct AsyncCopy {
    std::size_t offset = 0;
    std::size_t bytes = 0;
    bool writes = false;
    Event done;
  };
  struct Entry {
    Object* object = nullptr;  // owned by the directory
    unsigned device = 0;
    DeviceBuffer buffer;
    os::RankedMutex<os::FaultMutex> mutex{os::LockRank::entry};  // taken by the fault handler
    std::optional<os::ProtectionMap> protection;  // in the entry: one page less for the fault handler
    /// Rolling-update: where each block is in window_ (under window_mutex_, not the entry's mutex).
    std::vector<RollingWindow::Place> window_places;
    Event pending;  // the last asynchronous upload of the object (eviction, release)
    /// Copies started by asynchronous bulk calls that may still run (under the mutex). They run on the
    /// copy engine's queues, not on the object's, so whatever later uses their bytes settles them.
    std::vector<AsyncCopy> copies;
    bool live = true;  // false once free() has run: a thread that found the entry before must let go
    /// Rolling-update read-ahead: the block after the last read fault's fetched run, and its length.
    std::size_t read_next = SIZE_MAX;
    std::size_t read_run = 0;
    /// Sync prefetch: a fault fetched the object since the last probe (the host reads it back after
    /// syncs), and the syncs that fetched it since.
    bool host_reads_back = false;
    unsigned prefetches = 0;
    /// The last release left the host view's protection as it was, because the sync will fetch the
    /// object (see keeps_view): the blocks it made invalid are still readable until then.
    bool kept_view = false;
    /// The last address whose fault the protection map already allowed, and how many times in a row
    /// (under the mutex; see on_fault).
    const void* spurious_at = nullptr;
    unsigned spurious = 0;
    /// walks_ when the entry joined the table (under objects_mutex_): the walks that see it are the
    /// later ones, those numbered above this.
    std::uint64_t epoch = 0;
  };

  /// The part of one live object a shared range covers.
  struct Span {
    std::shared_ptr<Entry> entry;
    std::size_t offset = 0;  // within the object
    std::size_t bytes = 0;
  };
  /// Where the bytes a bulk write stores come from.
  struct Source {
    enum class Kind : std::uint8_t { host, device, value } kind = Kind::host;
    const std::byte* host = nullptr;  // host: the first byte
    Entry* entry = nullptr;           // device: the object whose device copy holds them
    std::size_t offset = 0;           // device: offset in that object
    std::uint8_t value = 0;           // value: every byte
    Source advanced(std::size_t n) const;
  };
  /// Records an asynchronous copy of `e` (the caller holds e's lock); completed ones are dropped.
  static void note_copy(Entry& e, std::size_t offset, std::size_t bytes, bool writes, Event done);
  /// Orders the work enqueued next on e's queue after the asynchronous copies of e that conflict with
  /// an access to [offset, offset + bytes) (`writes`: a write), and forgets them (the caller holds
  /// e's lock). Nothing to do when the object has none.
  void settle(Entry& e, std::size_t offset, std::size_t bytes, bool writes);
  /// Waits on the host for every asynchronous copy of `e` (the caller holds e's lock).
  static void settle_on_host(Entry& e);
  /// The live objects covering [p, p + n) in address order (hdsm::InvalidArgument on a gap).
  std::vector<Span> spans(const void* p, std::size_t n, const char* call) const;
  /// Stores `span.bytes` bytes from `source` at `span.offset` of its object; waits for completion,
  /// or appends the event to wait for to `pending`.
  void write_span(const Span& span, const Source& source, std::vector<Event>* pending);
  /// A stretch of one object that a bulk operation handles on one side.
  struct BulkRun {
    std::size_t offset = 0;
    std::size_t bytes = 0;
    Side side = Side::host;
  };
  /// Maximal runs of [offset, offset + bytes) of a live object whose units are read from the same
  /// side (the caller holds the object's lock).
  std::vector<BulkRun> read_runs(const Entry& e, std::size_t offset, std::size_t bytes) const;
  /// Stores `n` bytes from `source` at byte `at` of a range whose spans are `dst`.
  void write_spans(const std::vector<Span>& dst, std::size_t at, std::size_t n, const Source& source,
                   std::vector<Event>* pending = nullptr);
  /// The device copy of an object from `offset` on, as the copy engine sees it.
  transfer::CopyEnd device_range(const Entry& e, std::size_t offset) const;
  /// Starts moving `n` bytes with the copy engine, counted as bulk transfers; returns the event of its
  /// completion. With `order_after`, the ranges' queues wait for it too (asynchronous callers).
  Event move(const transfer::CopyEnd& dst, const transfer::CopyEnd& src, std::size_t n, bool order_after);
  /// A copy between overlapping shared ranges, through a host bounce buffer.
  void copy_overlapping(std::byte* dst, const std::byte* src, std::size_t n);

  static bool resolve(void* context, void* address, os::FaultAccess access);  // in the handler
  /// The handler's own resolution of a write to a read-only block, the one transition that moves no
  /// data: no allocation, no blocking lock, no exception. False sends the fault to the service.
  bool resolve_in_handler(void* address, os::FaultAccess access) noexcept;
  static bool resolve_on_service(void* context, void* address, os::FaultAccess access);
  bool on_fault(void* address, os::FaultAccess access);
  std::shared_ptr<Entry> entry_of(ObjectId id) const;
  /// The live entry `p` lies in, or ends at (a range's end), and the offset in it
  /// (hdsm::InvalidArgument naming `call` otherwise).
  std::pair<std::shared_ptr<Entry>, std::size_t> live_entry(const void* p, const char* call) const;
  /// Why `p` is in no live object, for an error of `call`: the directory's description, or that another
  /// thread is freeing the object the directory still names.
  std::string not_live(const char* call, const void* p) const;
  /// The entries `uses` names (all of the device as unknown when empty), each validated.
  /// One object a kernel call uses, and the bytes of it the call touches.
  struct Selected {
    std::shared_ptr<Entry> entry;
    KernelUse use = KernelUse::unknown;
    std::size_t offset = 0;
    std::size_t bytes = 0;
  };
  /// `skip_freed`: an object no longer live is left out rather than refused (an acquire's uses were
  /// checked at their release; another thread may have freed one since).
  std::vector<Selected> select(unsigned device, std::span<const ObjectUse> uses, const char* call,
                               bool skip_freed = false) const;
  /// Every live object of `device` as KernelUse::unknown: with `walk`, numbering this walk; with
  /// `seen_by`, only those that walk saw.
  std::vector<Selected> select_all(unsigned device, std::uint64_t* walk, const std::uint64_t* seen_by) const;
  void check_device(unsigned device, const char* call) const;
  /// Copies blocks [first, first + count) of an object between shadow view and device (clamped to the
  /// object's size) and counts it for `why`; enqueued on the object's queue, not waited for. Returns
  /// the bytes.
  std::size_t copy_blocks(Entry& e, Transfer direction, std::size_t first, std::size_t count, Action why);
  /// A span on the calling thread's trace lane (when tracing).
  void trace(std::string_view what, obs::Clock::time_point begin, std::size_t bytes, int lane = -1) const;
  /// Removes blocks [first, end) of the object that are not dirty from the rolling window.
  void forget_clean(Entry& e, std::size_t first, std::size_t end);
  /// Uploads and read-protects a block the rolling window pushed out.
  void evict(RollingWindow::BlockId block);
  /// The end of the blocks a rolling-update read fault on `block` fetches (the caller holds e's lock).
  std::size_t read_ahead_end(Entry& e, std::size_t block) const;
  /// At a sync: fetches e's invalid blocks and makes them readable, as read faults would, when the
  /// host is expected to read the object back (the caller holds e's lock); the bytes fetched.
  std::size_t sync_prefetch(Entry& e);
  /// Whether the next sync will prefetch `e` (sync_prefetch without its probe), so that a release
  /// may leave e's host view as it is.
  bool keeps_view(const Entry& e) const;
  /// Gives every block of `e` the protection its state calls for (after a kept view).
  void restore_view(Entry& e);
  static RollingWindow::BlockId block_id(ObjectId object, std::size_t block) {
    return (object << 32) | block;
  }

  ProtocolKind kind_;
  obs::Counters& counters_;
  obs::Tracer* tracer_;
  bool time_faults_;     // count fault_handler_ns
  int fault_lane_ = -1;  // the trace lane of the fault service thread
  std::vector<Device*> devices_;
  os::Arena arena_;
  Directory directory_;
  std::vector<std::unique_ptr<Queue>> queues_;
  std::size_t rolling_step_;
  std::size_t read_ahead_;
  std::size_t sync_prefetch_bytes_;

  mutable os::RankedMutex<std::mutex> objects_mutex_{os::LockRank::objects};
  std::unordered_map<ObjectId, std::shared_ptr<Entry>> objects_;
  /// The same entries by device: an unannotated call walks its own device's objects only, not every
  /// object of the runtime (16000 objects on another device made a call + sync 35x slower).
  std::vector<std::unordered_map<ObjectId, std::shared_ptr<Entry>>> device_objects_;
  mutable std::uint64_t walks_ = 0;  // under objects_mutex_: the walks of unannotated releases so far

  mutable os::RankedMutex<os::FaultMutex> window_mutex_{os::LockRank::window};  // taken by the fault handler
  RollingWindow window_;
  std::size_t rolling_objects_ = 0;  // live objects, whose steps make the rolling size (window_mutex_)

  std::vector<std::unique_ptr<os::FaultService>> fault_services_;  // by device (arena segment)
  int fault_range_ = -1;

  std::mutex pool_mutex_;
  std::unique_ptr<StagingPool> own_pool_;  // when CopySetup gave no pool
  std::unique_ptr<transfer::CopyEngine> engine_;
};

}  // namespace hdsm::coherence

HDSM_VISIBLE_END
