// vecadd's CUDA body (apps/vecadd.cpp).
#include "apps/cuda/common.cuh"

#include <cstdint>

namespace hdsm::apps::cuda {
namespace {

__global__ void vecadd(const float* a, const float* b, float* c, std::uint64_t n) {
  if (const std::uint64_t i = global_x(); i < n) c[i] = a[i] + b[i];
}

}  // namespace

// The kernels of the same names find them (<hdsm/cuda.hpp>).
HDSM_CUDA_KERNEL(vecadd);

}  // namespace hdsm::apps::cuda
