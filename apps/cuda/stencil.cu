// The stencil's CUDA bodies (apps/stencil.cpp): one block per row piece of kRow points, as the host bodies.
#include "apps/cuda/common.cuh"
#include "apps/stencil_kernel.hpp"

#include <cstdint>

namespace hdsm::apps::cuda {
namespace {

using namespace stencil_kernel;

__global__ void stencil7(const float* u, float* next, Shape s) {
  const auto x = static_cast<std::uint32_t>(global_x());
  if (x < s.nx) step_point(u, next, s, x, blockIdx.y, blockIdx.z);
}

__global__ void stencil_slab(const float* u, float* next, Shape s, Planes p) {
  const auto x = static_cast<std::uint32_t>(global_x());
  const std::uint32_t z = p.first + blockIdx.z;
  if (x < s.nx)
    step_slab_point(u, next, s, x, blockIdx.y, z,
                    static_cast<std::uint32_t>(static_cast<std::int32_t>(z) + p.origin));
}

}  // namespace

// The kernels of the same names find them (<hdsm/cuda.hpp>).
HDSM_CUDA_KERNEL(stencil7);
HDSM_CUDA_KERNEL(stencil_slab);

}  // namespace hdsm::apps::cuda
