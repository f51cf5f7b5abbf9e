// The CUDA body of hdsm_mpi_transfer's fill kernel (bench/mpi/mpi_transfer.cpp), built when CMake
// finds nvcc: `hdsm bench mpi --device cuda` measures a CUDA device's data.
#include <hdsm/cuda.hpp>

#include <cstdint>

namespace {

__global__ void mpi_bench_fill(unsigned char* p, std::uint64_t n) {
  const std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) p[i] = static_cast<unsigned char>(i * 7 + (i >> 20));
}

}  // namespace

// The kernel of the same name finds it (<hdsm/cuda.hpp>).
HDSM_CUDA_KERNEL(mpi_bench_fill);
