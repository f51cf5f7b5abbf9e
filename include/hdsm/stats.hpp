// Counters of what hdsm moved and ran, readable at any time and printed at exit with HDSM_STATS=1.
#pragma once

#include <hdsm/export.h>

#include <cstdint>
#include <string>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm {

enum class Route { h2d, d2h, d2d, peer };
inline constexpr int kRouteCount = 4;
const char* to_string(Route route) noexcept;

/// Why shared memory (ADSM) moved data: the coherence action behind a transfer. release: the CPU's
/// newer blocks uploaded at a kernel call; acquire: results downloaded at the sync (batch-update's,
/// and the objects sync prefetch fetches under lazy and rolling);
/// fault: blocks fetched when the CPU touched invalid data; evict: dirty blocks the rolling window
/// pushed to the device early; bulk: hdsm::memcpy, memset and I/O on shared objects (transfers they
/// make between host and device; their device-side fills and copies move nothing over the link).
enum class Action { release, acquire, fault, evict, bulk };
inline constexpr int kActionCount = 5;
const char* to_string(Action action) noexcept;

/// How the copy engine moved one copy of hdsm::memcpy (and of the bulk and I/O paths beneath it):
/// host: a CPU copy; on_device: within one device; direct: one DMA between host memory and a
/// device; peer: one peer DMA between two devices; staged: through pinned chunks, double-buffered
/// (device to device through host memory, or pageable host memory to or from a device).
enum class CopyRoute { host, on_device, direct, peer, staged };
inline constexpr int kCopyRouteCount = 5;
const char* to_string(CopyRoute route) noexcept;

struct RouteStats {
  std::uint64_t bytes = 0;
  std::uint64_t transfers = 0;
};

struct DeviceStats {
  std::string name;
  RouteStats routes[kRouteCount];  // indexed by Route; peer copies count on the receiving device
  std::uint64_t kernel_launches = 0;
  /// Time the device spent running kernels, from each kernel's start to its end (sim: on the CPU
  /// executor; OpenCL: the profiling times of its command); 0 where the backend does not measure it
  /// (CUDA).
  std::uint64_t kernel_ns = 0;
  /// Time the device spent on copies, from each copy's start to its end (sim: the modelled transfer
  /// time; OpenCL: the profiling times of its commands); 0 where not measured (CUDA).
  std::uint64_t transfer_ns = 0;
  std::uint64_t program_builds = 0;       // kernel programs compiled from source (OpenCL)
  std::uint64_t program_cache_loads = 0;  // kernel programs loaded from the cache (HDSM_CACHE_DIR)
  const RouteStats& route(Route r) const { return routes[static_cast<int>(r)]; }
};

/// A snapshot of the counters of one runtime.
struct Stats {
  RouteStats routes[kRouteCount];
  std::uint64_t kernel_launches = 0;
  std::uint64_t read_faults = 0;
  std::uint64_t write_faults = 0;
  /// Objects a sync fetched because the host read them back after earlier syncs (HDSM_SYNC_PREFETCH);
  /// their bytes count as Action::acquire.
  std::uint64_t sync_prefetches = 0;
  /// Calls that left such an object's host view as it was, since the sync fetches it anyway: two
  /// protection changes saved each (a data-race-free program does not touch it in between).
  std::uint64_t kept_views = 0;
  /// Time threads spent in the fault handler for shared memory, resolving included. Measured only
  /// with HDSM_STATS=1 or a trace (HDSM_TRACE); 0 otherwise, as timing costs two clock reads a fault.
  std::uint64_t fault_handler_ns = 0;
  /// Time host threads spent blocked on hdsm's enqueue locks: the per-device call
  /// locks that order a kernel call's release and launch, and the copy engine's per-device locks of
  /// copies between devices. Only contended acquisitions are timed (and counted in lock_waits); a
  /// thread never holds these locks while it waits for a device.
  std::uint64_t lock_wait_ns = 0;
  std::uint64_t lock_waits = 0;
  RouteStats actions[kActionCount];  // indexed by Action; also counted in the routes
  /// Copies the copy engine planned and ran, by route: transfers = copies, bytes = bytes copied.
  RouteStats copies[kCopyRouteCount];
  std::vector<DeviceStats> devices;
  const RouteStats& route(Route r) const { return routes[static_cast<int>(r)]; }
  const RouteStats& action(Action a) const { return actions[static_cast<int>(a)]; }
  const RouteStats& copy(CopyRoute r) const { return copies[static_cast<int>(r)]; }
  /// A human-readable table (what HDSM_STATS=1 prints at exit).
  std::string to_string() const;
};

}  // namespace hdsm

HDSM_VISIBLE_END
