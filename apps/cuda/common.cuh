// What the apps' .cu files share: CUDA's built-ins as hdsm::Thread and hdsm::Block name them.
#pragma once

#include <hdsm/cuda.hpp>

#include <cstddef>
#include <cstdint>

namespace hdsm::apps::cuda {

/// Thread::global_x(), global_y().
__device__ inline std::uint64_t global_x() { return std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; }
__device__ inline std::uint64_t global_y() { return std::uint64_t{blockIdx.y} * blockDim.y + threadIdx.y; }
/// Thread::rank(): the thread's linear index in its block.
__device__ inline std::uint32_t rank() {
  return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
}
/// Block::size(): the threads of a block.
__device__ inline std::uint32_t block_size() { return blockDim.x * blockDim.y * blockDim.z; }

}  // namespace hdsm::apps::cuda
