// What the apps' .cu files share: CUDA's built-ins as hdsm::Thread and hdsm::Block name them, and
// the table entries of bodies.hpp.
#pragma once

#include "apps/cuda/bodies.hpp"

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

/// The bodies of one .cu file, from its table.
template <std::size_t N>
Bodies bodies_of(const Body (&table)[N]) {
  return {table, N};
}

}  // namespace hdsm::apps::cuda

/// The table entry of the __global__ function `f`, which is named as its Kernel.
// clang-format off
#define HDSM_APPS_CUDA_BODY(f) ::hdsm::apps::cuda::Body{#f, &::hdsm::cuda_lookup<f>}
// clang-format on
