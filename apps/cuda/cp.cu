// cp's CUDA body (apps/parboil/cp.cpp).
#include "apps/cuda/common.cuh"
#include "apps/parboil/cp_kernel.hpp"

#include <cstdint>

namespace hdsm::apps::cuda {
namespace {

using namespace parboil::cp_kernel;

__global__ void cp_energy(float* grid, const AtomInfo* atoms, std::uint32_t count, std::uint32_t nx) {
  add_energy(grid, atoms, count, nx, global_x() * kUnroll, global_y());
}

}  // namespace

// The kernels of the same names find them (<hdsm/cuda.hpp>).
HDSM_CUDA_KERNEL(cp_energy);

}  // namespace hdsm::apps::cuda
