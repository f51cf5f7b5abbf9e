// The table of the apps' CUDA bodies (see apps/cuda.hpp), between the .cu files that define them
// and apps/cuda.cpp. C++17: nvcc compiles it too.
#pragma once

#include <cstddef>

namespace hdsm::apps::cuda {

/// A Kernel::cuda_lookup.
using Lookup = const void* (*)();

/// One __global__ function of the apps, by name.
struct Body {
  const char* name;
  Lookup lookup;
};

/// The CUDA bodies one .cu file defines.
struct Bodies {
  const Body* begin;
  std::size_t count;
};

/// The Kernel::cuda_lookup of the app kernel `name`, or nullptr.
Lookup find_body(const char* name);

// One per .cu file.
Bodies vecadd_bodies();
Bodies stencil_bodies();
Bodies cp_bodies();
Bodies mri_bodies();
Bodies sad_bodies();
Bodies tpacf_bodies();
Bodies pns_bodies();
Bodies rpes_bodies();
Bodies fft_bodies();
Bodies mergesort_bodies();

}  // namespace hdsm::apps::cuda
