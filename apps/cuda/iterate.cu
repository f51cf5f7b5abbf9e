// iterate's CUDA body (apps/iterate.cpp).
#include "apps/cuda/common.cuh"

#include <cstdint>

namespace hdsm::apps::cuda {
namespace {

__global__ void relax(const float* x, float* y, std::uint64_t n) {
  const std::uint64_t i = global_x();
  if (i >= n) return;
  const std::uint64_t left = i == 0 ? 0 : i - 1;
  const std::uint64_t right = i + 1 == n ? i : i + 1;
  y[i] = 0.25f * x[left] + 0.5f * x[i] + 0.25f * x[right];
}

}  // namespace

// The kernels of the same names find them (<hdsm/cuda.hpp>).
HDSM_CUDA_KERNEL(relax);

}  // namespace hdsm::apps::cuda
