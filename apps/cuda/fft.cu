// The FFT's CUDA bodies (apps/fft.cpp): one thread per butterfly or chunk element, as the host bodies.
#include "apps/cuda/common.cuh"
#include "apps/fft_kernel.hpp"

#include <cstdint>

namespace hdsm::apps::cuda {
namespace {

using namespace fft_kernel;

__global__ void fft_stage(Complex* a, std::uint32_t h, std::uint32_t butterflies) {
  if (const auto k = static_cast<std::uint32_t>(global_x()); k < butterflies) butterfly(a, k, h);
}

__global__ void fft_cross(Complex* mine, const Complex* theirs, CrossStage c, std::uint32_t n) {
  if (const auto t = static_cast<std::uint32_t>(global_x()); t < n) cross_point(mine, theirs, t, c);
}

}  // namespace

// The kernels of the same names find them (<hdsm/cuda.hpp>).
HDSM_CUDA_KERNEL(fft_stage);
HDSM_CUDA_KERNEL(fft_cross);

}  // namespace hdsm::apps::cuda
