// The mergesort's CUDA bodies (apps/mergesort.cpp): one thread per key, as the host bodies.
#include "apps/cuda/common.cuh"
#include "apps/mergesort_kernel.hpp"

#include <cstdint>

namespace hdsm::apps::cuda {
namespace {

using namespace mergesort_kernel;

__global__ void merge_pass(const std::uint32_t* src, std::uint32_t* dst, std::uint32_t width,
                           std::uint32_t n) {
  if (const auto i = static_cast<std::uint32_t>(global_x()); i < n) merge_point(src, dst, i, width);
}

__global__ void merge_split(const std::uint32_t* mine, const std::uint32_t* theirs, std::uint32_t* out,
                            SplitHalf s) {
  if (const auto t = static_cast<std::uint32_t>(global_x()); t < 2 * s.n)
    split_point(mine, theirs, out, t, s);
}

}  // namespace

// The kernels of the same names find them (<hdsm/cuda.hpp>).
HDSM_CUDA_KERNEL(merge_pass);
HDSM_CUDA_KERNEL(merge_split);

}  // namespace hdsm::apps::cuda
