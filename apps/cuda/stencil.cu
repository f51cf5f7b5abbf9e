// The stencil's CUDA body (apps/stencil.cpp): one block per row piece of kRow points, as the host body.
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

}  // namespace

Bodies stencil_bodies() {
  static const Body table[] = {HDSM_APPS_CUDA_BODY(stencil7)};
  return bodies_of(table);
}

}  // namespace hdsm::apps::cuda
