// rpes's CUDA bodies (apps/parboil/rpes.cpp).
#include "apps/cuda/common.cuh"
#include "apps/parboil/rpes_kernel.hpp"

#include <cstdint>

namespace hdsm::apps::cuda {
namespace {

using namespace parboil::rpes_kernel;

__global__ void rpes_pairs(const Shell* shells, ShellPair* pairs, std::uint32_t n) {
  const std::uint64_t j = global_x(), i = global_y();
  if (i < n && j <= i) make_pair(shells[i], shells[j], pairs[pair_index(i, j)]);
}

__global__ void rpes_eri(const ShellPair* pairs, float* out, std::uint64_t first, std::uint64_t npairs) {
  const std::uint64_t kl = global_x(), ij = first + global_y();
  if (ij < npairs && kl <= ij) out[pair_index(ij, kl)] = eri(pairs[ij], pairs[kl]);
}

}  // namespace

// The kernels of the same names find them (<hdsm/cuda.hpp>).
HDSM_CUDA_KERNEL(rpes_pairs);
HDSM_CUDA_KERNEL(rpes_eri);

}  // namespace hdsm::apps::cuda
