// An iterative kernel with sparse host reads: a relaxation sweep over a vector, run `steps` times
// in ping-pong buffers, each followed by a sync; after each sweep the CPU reads a few elements
// spread over the result (a convergence check) before the next one starts, or none. A copying model moves the
// probed blocks back at every step and takes a fault for each; where the device shares host memory the
// host-mapped model moves nothing, which is where the original GMAC was 6x faster than hdsm's copying
// protocols.
#pragma once

#include "apps/app.hpp"

#include <cstddef>

namespace hdsm::apps {

struct IterateProblem {
  std::size_t n = 0;    // elements of each buffer
  unsigned steps = 0;   // sweeps
  unsigned probes = 0;  // elements the CPU reads after each sweep (0: none, only the sync)
};

/// 50 sweeps, 16 probes; 50 000 (test), 1 Mi (quick) or 4 Mi (full) elements.
IterateProblem iterate_problem(Scale scale);

/// The output: the sum of the probes after each sweep, then 16 elements of the final vector.
Output iterate_adsm(Runtime& runtime, int device, const IterateProblem& p);
Output iterate_explicit(Device& device, const IterateProblem& p);
Output iterate_reference(const IterateProblem& p);

/// The app in the common form (apps/app.hpp), at the problem sizes of iterate_problem.
App iterate_app();

inline constexpr double kIterateTolerance = 1e-5;

}  // namespace hdsm::apps
