// The applications of seed 001's evaluation written with hdsm's skeletons on smart containers, each
// with a plain serial reference: Mandelbrot (MapIndex), MSE and PPMCC, two image-processing kernels
// (MapReduce), and the three iterative ones of Table 1: NBody (MapArray, the array and the output
// swapping roles every step, as the seed's Listing 1), SPH (two MapArray calls a step) and LU
// factorization (one MapArrayIndex call per column). Each runs where its Where says: the host's
// worker threads or a list of devices the skeletons split their calls over.
#pragma once

#include "apps/app.hpp"

#include <hdsm/skeletons.hpp>

#include <span>
#include <string_view>
#include <vector>

namespace hdsm::apps {

/// Where a skeleton app runs its skeletons.
struct Where {
  SkeletonBackend backend = SkeletonBackend::devices;
  std::vector<unsigned> devices;  // empty: HDSM_SKELETON_DEVICES
  // Flush every container a skeleton call used after the call: what containers under the initial
  // mechanism need to stay correct across calls that split over devices (seed 001 §4.2).
  bool flush = false;
  // Page-locked main copies (ContainerOptions::pinned) for the app's containers.
  bool pinned = false;
};

struct SkeletonApp {
  std::string_view name;
  std::string_view pattern;  // the skeleton calls, in one line
  Output (*run)(Runtime& runtime, const Where& where, Scale scale);
  Output (*run_reference)(Scale scale);
  double tolerance;  // relative, as App::tolerance
};

/// Mandelbrot, MSE, PPMCC, NBody, SPH, LU.
std::span<const SkeletonApp> skeleton_apps();

/// The apps of Table 1 (NBody, SPH, LU), each at the problem sizes the seed accumulates over: for
/// `scale`, several sizes whose transfers are summed.
struct SizedRun {
  const SkeletonApp* app;
  std::vector<std::size_t> sizes;
  Output (*run_size)(Runtime& runtime, const Where& where, std::size_t size);
};
std::vector<SizedRun> table1_apps(Scale scale);

}  // namespace hdsm::apps
