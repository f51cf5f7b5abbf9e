// sad's CUDA bodies (apps/parboil/sad.cpp). sad_4x4 runs the host body's two phases with a barrier
// between them, the macroblock in a __shared__ array.
#include "apps/cuda/common.cuh"
#include "apps/parboil/sad_kernel.hpp"

#include <cstddef>
#include <cstdint>

namespace hdsm::apps::cuda {
namespace {

using namespace parboil::sad_kernel;

__global__ void sad_4x4(const Pixel* cur, const Pixel* ref, Sad* sad4, Frame f) {
  __shared__ Pixel mb[256];
  const std::uint32_t mx = blockIdx.x * 16, my = blockIdx.y * 16;
  load_macroblock(mb, cur, f, mx, my, rank(), block_size());
  __syncthreads();
  const std::size_t mbi = std::size_t{blockIdx.y} * gridDim.x + blockIdx.x;
  sad4_thread(mb, ref, sad4, f, mx, my, mbi, threadIdx.x, threadIdx.y);
}

__global__ void sad_8x8(const Sad* sad4, Sad* sad8, Frame f) { sad8_element(sad4, sad8, f, global_x()); }

__global__ void sad_16x16(const Sad* sad8, Sad* sad16, Frame f) { sad16_element(sad8, sad16, f, global_x()); }

}  // namespace

// The kernels of the same names find them (<hdsm/cuda.hpp>).
HDSM_CUDA_KERNEL(sad_4x4);
HDSM_CUDA_KERNEL(sad_8x8);
HDSM_CUDA_KERNEL(sad_16x16);

}  // namespace hdsm::apps::cuda
