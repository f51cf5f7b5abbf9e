// hdsm: one shared memory over host RAM, accelerator memories, several devices and cluster nodes.
// This is the one header C++ programs include for shared memory, containers and kernels; skeletons
// (HDSM_USER_FUNCTION, Map, Reduce...) are in <hdsm/skeletons.hpp>, the cluster runtime in
// <hdsm/cluster.hpp>, CUDA kernel registration in <hdsm/cuda.hpp>.
#pragma once

#include <hdsm/export.h>

#include <hdsm/version.h>
#include <hdsm/adsm.hpp>
#include <hdsm/config.hpp>
#include <hdsm/container.hpp>
#include <hdsm/crc.hpp>
#include <hdsm/device.hpp>
#include <hdsm/error.hpp>
#include <hdsm/kernel.hpp>
#include <hdsm/matrix.hpp>
#include <hdsm/runtime.hpp>
#include <hdsm/stats.hpp>
#include <hdsm/vector.hpp>

HDSM_VISIBLE_BEGIN
namespace hdsm {

/// The library version, "MAJOR.MINOR.PATCH".
const char* version() noexcept;

}  // namespace hdsm

HDSM_VISIBLE_END
