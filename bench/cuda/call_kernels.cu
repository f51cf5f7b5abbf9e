// The CUDA body of bench_call.cpp's kernel (built when CMake finds nvcc).
#include <hdsm/cuda.hpp>

#include <cstdint>

namespace {

__global__ void bench_increment(std::uint32_t* p) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *p += 1;
}

}  // namespace

namespace hdsm::bench {

const void* (*increment_cuda_lookup())();
const void* (*increment_cuda_lookup())() { return &hdsm::cuda_lookup<bench_increment>; }

}  // namespace hdsm::bench
