// The CUDA body of an hdsm::Kernel, for translation units compiled by nvcc (or any that include
// the CUDA runtime's headers and link a CUDA runtime).
//
// libhdsm loads a CUDA runtime of its own (the shared one), and nvcc links a static one into the
// program. A __global__ function's host stub (&f) is known only to the runtime of the program that
// registered it, so libhdsm cannot launch by it; the
// kernel's cudaKernel_t, which the program's runtime gives for the stub, is valid in every runtime
// of the process. Kernel::cuda_function takes that:
//
//   __global__ void add_kernel(const float* a, float* b, std::uint64_t n) { ... }
//   hdsm::Kernel add = hdsm::per_thread("add", ...);
//   add.cuda_function = hdsm::cuda_kernel(add_kernel);
//
// Call it where a CUDA device is present (the program's runtime loads the driver); arguments
// follow the kernel's parameters in order, a buffer argument being a device pointer. A kernel that
// also runs where there is no driver (on sim or OpenCL devices) names its CUDA body lazily instead:
//
//   add.cuda_lookup = &hdsm::cuda_lookup<add_kernel>;  // resolved at its first launch on CUDA
//
// Or, where the host code cannot see the __global__ function (it is in a .cu file of its own, and
// the kernel is made in C++ code that nvcc does not compile), the .cu file registers it by name,
// and every kernel of that name finds it at its first launch on CUDA:
//
//   __global__ void add(const float* a, float* b, std::uint64_t n) { ... }
//   HDSM_CUDA_KERNEL(add);   // the kernel made by hdsm::per_thread("add", ...) runs it on CUDA
#pragma once

#include <hdsm/error.hpp>
#include <hdsm/kernel_registry.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace hdsm {

template <class... Params>
const void* cuda_kernel(void (*function)(Params...)) {
  cudaKernel_t kernel = nullptr;
  const cudaError_t e = cudaGetKernel(&kernel, reinterpret_cast<const void*>(function));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice ? Errc::no_device : Errc::system,
                std::string("hdsm::cuda_kernel: cudaGetKernel failed: ") + cudaGetErrorString(e) + " (" +
                    cudaGetErrorName(e) + ")");
  }
  return reinterpret_cast<const void*>(kernel);
}

/// A Kernel::cuda_lookup for the __global__ function `function`: its cudaKernel_t, got by
/// cuda_kernel the first time the cuda backend launches the kernel (where a driver is loaded) and
/// kept for the process (a failure throws and is tried again at the next launch).
template <auto function>
const void* cuda_lookup() {
  static const void* const kernel = cuda_kernel(function);
  return kernel;
}

}  // namespace hdsm

/// Registers the __global__ function `function` as the CUDA body of the kernels named as it, when the
/// program (or the library holding this .cu file) loads. At namespace scope, after the function.
// clang-format off
#define HDSM_CUDA_KERNEL(function)                                                      \
  [[maybe_unused]] static const bool hdsm_cuda_kernel_##function =                      \
      ::hdsm::detail::register_cuda_body(#function, &::hdsm::cuda_lookup<function>)
// clang-format on
