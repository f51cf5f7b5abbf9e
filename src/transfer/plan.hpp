// The route planner of the copy engine (seed 003 §3.1, §5.2): how n bytes move from one place to
// another — host memory (pageable or pinned) or a device buffer — given what the devices can do and
// how fast their links are. A plan is a value: a route and the list of steps that carry it out,
// computed by a pure function of its inputs, so tests assert on it without a device, statistics
// count it and traces show it. copy_engine.hpp runs plans.
//
// Routes:
//   host       host to host: one memmove on the CPU
//   on_device  within one device: one device-side copy
//   direct     one DMA between host memory and a device (pinned memory goes straight over the link;
//              pageable memory through the driver's own bounce buffer, serially)
//   peer       one peer DMA: the destination device reads the source device's memory
//   staged     through chunks of the pinned staging pool, N-buffered: device -> device as D2H into a
//              chunk on the source device's outbound queue, then H2D from it on the destination's
//              inbound queue, overlapping the D2H of chunk i + 1 with the H2D of chunk i; pageable
//              host memory <-> device as a CPU copy into (out of) a chunk overlapped with the DMA of
//              the previous (next) one
//
// The choice is a cost model: every candidate (the routes the two places allow, and for staging
// chunk sizes from the largest down to the smallest allowed, halving) is timed by simulating its
// steps on the link figures, and the cheapest one wins (ties: the simpler route, then larger
// chunks). A staged copy takes about (bytes + chunk) / rate plus a step cost per chunk, so small
// copies get small chunks and large ones large chunks. Staging cannot beat one peer DMA over an
// equally fast link, so peer devices use peer DMA unless their peer link is slow; pageable copies
// are staged once the overlap pays for the extra steps.
#pragma once

#include <hdsm/export.h>

#include <hdsm/stats.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm::transfer {

/// Where one end of a copy lies.
enum class Memory : std::uint8_t { pageable, pinned, device };

struct Endpoint {
  Memory memory = Memory::pageable;
  unsigned device = 0;  // Memory::device: the index in the runtime's device list
  static Endpoint host(bool pinned = false) { return {pinned ? Memory::pinned : Memory::pageable, 0}; }
  static Endpoint on(unsigned device) { return {Memory::device, device}; }
  bool is_device() const { return memory == Memory::device; }
  bool operator==(const Endpoint&) const = default;
};

/// What the planner knows of one device: its copy engines and its host link (GB/s = 1e9 B/s; 0 means
/// unthrottled or unknown, and is planned at the host copy rate).
struct DeviceLink {
  unsigned copy_engines = 2;  // 2: host-to-device and device-to-host transfers overlap
  double h2d_gbps = 0;
  double d2h_gbps = 0;
  double latency_us = 0;  // per transfer
};

/// The machine as the planner sees it: device links, peer access and host-side costs.
struct Topology {
  std::vector<DeviceLink> devices;
  /// peer[dst * devices.size() + src]: dst's queues can copy from src's memory (copy_from_peer).
  std::vector<std::uint8_t> peer;
  /// Peer DMA rate between two devices (0: the slower of the two host links, as the sim models it).
  double peer_gbps = 0;
  double host_gbps = 5;  // CPU copy rate between pageable and pinned host memory (large buffers)
  double step_us = 10;   // host-side cost of one enqueued step (call, event, queue hand-off)
  double setup_us = 20;  // fixed cost of a staged copy (leasing chunks, ordering events)
  std::size_t driver_bounce_bytes = std::size_t{1} << 20;  // a driver's bounce buffer for pageable DMA

  bool can_peer(unsigned dst, unsigned src) const {
    const std::size_t n = devices.size();
    return dst < n && src < n && dst != src && peer[dst * n + src] != 0;
  }
};

/// The knobs of staging (HDSM_COPY_BUFFERS, HDSM_COPY_CHUNK).
struct Options {
  unsigned buffers = 2;  // pinned chunks in flight per staged copy; 0: stage only where no other route exists
  std::size_t chunk_bytes = std::size_t{2} << 20;       // the largest chunk (at most the pool's chunk)
  std::size_t min_chunk_bytes = std::size_t{64} << 10;  // the smallest chunk the planner considers
};

/// Who carries out a step: the calling thread, a queue of the source device or one of the
/// destination device. The copy engine maps the device lanes to queues (copy_engine.hpp).
enum class Lane : std::uint8_t { host, source, destination };

/// What a step reads from or writes to: the copy's source or destination (at the step's offset),
/// or a staging slot (from its start).
enum class Place : std::uint8_t { source, destination, slot };

enum class Op : std::uint8_t {
  host_copy,  // a CPU copy (memmove)
  to_device,  // a DMA from host memory into device memory
  to_host,    // a DMA from device memory into host memory
  on_device,  // a copy within one device's memory
  from_peer,  // a peer DMA into the destination device
};

/// One step: `bytes` bytes at `offset` of the copy (the same offset in source and destination).
struct Step {
  Op op = Op::host_copy;
  Lane lane = Lane::host;
  Place from = Place::source;
  Place to = Place::destination;
  std::size_t offset = 0;
  std::size_t bytes = 0;
  int slot = -1;  // the staging slot read or written, -1: none
  bool operator==(const Step&) const = default;
};

struct CopyPlan {
  CopyRoute route = CopyRoute::host;
  Endpoint src, dst;
  std::size_t bytes = 0;
  unsigned buffers = 0;     // staging slots the steps use (0 unless staged)
  std::size_t chunk = 0;    // the largest chunk (staged), else 0
  double cost_us = 0;       // the model's estimate
  std::vector<Step> steps;  // in the order the copy engine issues them

  /// Bytes that cross a link (DMA and peer steps): what the copy costs the interconnect.
  std::size_t link_bytes() const;
  /// One line for traces and messages: "staged 8 MiB sim0 -> sim1: 12 chunks up to 2 MiB, 2 buffers".
  std::string describe() const;
  bool operator==(const CopyPlan&) const = default;
};

/// The plan for copying `bytes` bytes from `src` to `dst`. Pure: the same inputs give the same plan.
/// Device indices must be in `topology` (std::invalid_argument otherwise); chunk sizes are clamped to
/// at least 1 and min_chunk_bytes to at most chunk_bytes.
CopyPlan plan_copy(const Endpoint& src, const Endpoint& dst, std::size_t bytes, const Topology& topology,
                   const Options& options);

/// The model's time for a plan's steps on `topology` (what plan_copy minimises), in microseconds.
double model_cost_us(const CopyPlan& plan, const Topology& topology);

const char* to_string(Op op) noexcept;

}  // namespace hdsm::transfer

HDSM_VISIBLE_END
