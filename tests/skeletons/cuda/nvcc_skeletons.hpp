// Skeleton calls compiled by nvcc (nvcc_skeletons.cu): each skeleton's kernels then carry a CUDA body,
// a __global__ template instantiated for the user function, beside their host and OpenCL bodies.
#pragma once

#include <hdsm/runtime.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace hdsm::test {

struct NvccSkeletonsResult {
  std::size_t kernels = 0;            // kernels the calls used
  std::size_t kernels_with_cuda = 0;  // of them, those with a CUDA body
  std::vector<std::string> wrong;     // results that differ from loops, one line each
};

/// Runs Map (one and two outputs), MapIndex, MapArray, MapArrayIndex (on a user type), Reduce (1D, rows,
/// cols), MapReduce, MapOverlap (1D and column-wise), MapOverlap2D and Scan on `devices` of `runtime`,
/// checks each result against a loop.
NvccSkeletonsResult run_skeletons_built_by_nvcc(Runtime& runtime, const std::vector<unsigned>& devices);

}  // namespace hdsm::test
