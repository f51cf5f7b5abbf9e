// The CUDA body of an hdsm::Kernel, for translation units compiled by nvcc (or any that include
// the CUDA runtime's headers and link a CUDA runtime).
//
// libhdsm carries its own, static, CUDA runtime. A __global__ function's host stub (&f) is known
// only to the runtime of the program that registered it, so libhdsm cannot launch by it; the
// kernel's cudaKernel_t, which the program's runtime gives for the stub, is valid in every runtime
// of the process. Kernel::cuda_function takes that:
//
//   __global__ void add_kernel(const float* a, float* b, std::uint64_t n) { ... }
//   hdsm::Kernel add = hdsm::per_thread("add", ...);
//   add.cuda_function = hdsm::cuda_kernel(add_kernel);
//
// Call it where a CUDA device is present (the program's runtime loads the driver); arguments
// follow the kernel's parameters in order, a buffer argument being a device pointer.
#pragma once

#include <hdsm/error.hpp>

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

}  // namespace hdsm
