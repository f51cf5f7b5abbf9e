// pns's CUDA body (apps/parboil/pns.cpp).
#include "apps/cuda/common.cuh"
#include "apps/parboil/pns_kernel.hpp"

#include <cstdint>

namespace hdsm::apps::cuda {
namespace {

using namespace parboil::pns_kernel;

__global__ void pns_simulate(const std::int32_t* arcs, std::int32_t* marking, std::uint64_t* rng,
                             std::uint32_t* sums, std::uint32_t replicas, std::uint32_t transitions,
                             std::uint32_t steps) {
  if (const std::uint64_t r = global_x(); r < replicas)
    simulate(arcs, marking + r * kPlaces, rng[r], sums + r * kPlaces, transitions, steps);
}

}  // namespace

// The kernels of the same names find them (<hdsm/cuda.hpp>).
HDSM_CUDA_KERNEL(pns_simulate);

}  // namespace hdsm::apps::cuda
