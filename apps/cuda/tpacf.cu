// tpacf's CUDA body (apps/parboil/tpacf.cpp). As in the OpenCL body, the threads of a block run at
// once and count into the block histogram with shared-memory atomics, in 32 bits (a block counts at
// most block size * partners pairs); the sums are integers, the same whatever the order.
#include "apps/cuda/common.cuh"
#include "apps/parboil/tpacf_kernel.hpp"

#include <cstddef>
#include <cstdint>

namespace hdsm::apps::cuda {
namespace {

using namespace parboil::tpacf_kernel;

struct CountShared {
  unsigned int* h;
  __device__ void operator()(int bin) const { atomicAdd(&h[bin], 1u); }
};

__global__ void tpacf_histogram(const Point* set1, std::uint32_t n, const Point* set2, std::uint32_t partners,
                                std::uint32_t self, const float* binb, std::uint64_t* hist) {
  constexpr std::uint32_t slots = kSlots, bound_count = kBounds;
  __shared__ unsigned int h[slots];
  __shared__ float bounds[bound_count];
  for (std::uint32_t k = rank(); k < slots; k += block_size()) h[k] = 0;
  for (std::uint32_t k = rank(); k < bound_count; k += block_size()) bounds[k] = binb[k];
  __syncthreads();
  if (const std::uint64_t i = global_x(); i < n)
    count_pairs(CountShared{h}, bounds, set1[i], i, set2, n, partners, self);
  __syncthreads();
  for (std::uint32_t k = rank(); k < slots; k += block_size())
    hist[std::size_t{blockIdx.x} * slots + k] = h[k];
}

}  // namespace

// The kernels of the same names find them (<hdsm/cuda.hpp>).
HDSM_CUDA_KERNEL(tpacf_histogram);

}  // namespace hdsm::apps::cuda
