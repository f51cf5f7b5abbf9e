// The applications of seed 001's evaluation written with hdsm's skeletons on smart containers, each
// with a plain serial reference: Mandelbrot (MapIndex), MSE and PPMCC, two image-processing kernels
// (MapReduce), so far; NBody, LU and SPH are still to come. Each runs where its Where says: the
// host's worker threads or a list of devices the skeletons split their calls over.
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
};

struct SkeletonApp {
  std::string_view name;
  std::string_view pattern;  // the skeleton calls, in one line
  Output (*run)(Runtime& runtime, const Where& where, Scale scale);
  Output (*run_reference)(Scale scale);
  double tolerance;  // relative, as App::tolerance
};

/// Mandelbrot, MSE, PPMCC.
std::span<const SkeletonApp> skeleton_apps();

}  // namespace hdsm::apps
