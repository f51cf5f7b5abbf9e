// The vector addition of seed 000, Fig. 11: the CPU initialises two vectors in shared memory, one
// kernel call adds them, the CPU reads the sum. With rolling-update the block size decides how
// many faults the CPU takes and how early (and in how large pieces) the data goes to the device.
#pragma once

#include "apps/app.hpp"

#include <cstddef>

namespace hdsm::apps {

/// The output: the number of wrong elements of the sum the CPU read back, then a few samples.
Output vecadd_adsm(Runtime& runtime, int device, std::size_t n);
Output vecadd_reference(std::size_t n);

}  // namespace hdsm::apps
