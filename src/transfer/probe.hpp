// Measured link figures for the copy engine's planner and `hdsm info`: what a device's link really
// moves with pinned copies, and how fast the CPU copies host memory.
#pragma once

#include <hdsm/export.h>

#include "transfer/plan.hpp"

#include <hdsm/device.hpp>

#include <cstddef>
#include <span>

HDSM_VISIBLE_BEGIN
namespace hdsm::transfer {

struct LinkRates {
  double h2d_gbps = 0;
  double d2h_gbps = 0;
};

/// Pinned copies of `bytes` each way on a new queue of `device`: one warm-up copy, then the median
/// of `copies` timed ones per direction (1 GB/s = 1e9 B/s). Throws what the device throws (no free
/// memory for the buffer: OutOfDeviceMemory).
LinkRates measure_link(Device& device, std::size_t bytes, int copies);

/// The median rate of `copies` CPU copies of `bytes` between two host buffers, in GB/s.
double measure_host_copy(std::size_t bytes, int copies);

/// `topology` with the link rates of `devices` (on at most `bytes`, half a device's free memory; a
/// device with less than 128 KiB free keeps its stated rates) and the host copy rate measured
/// (latency and peer access as they were).
Topology measured_topology(std::span<Device* const> devices, Topology topology, std::size_t bytes,
                           int copies);

}  // namespace hdsm::transfer

HDSM_VISIBLE_END
