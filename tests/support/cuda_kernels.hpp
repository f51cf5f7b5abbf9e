// CUDA bodies of the test kernels (cuda_kernels.cu, built when CMake finds nvcc).
#pragma once

#include <hdsm/device.hpp>

namespace hdsm::test {

#ifdef HDSM_TEST_CUDA_KERNELS
/// The cudaKernel_t of the named test kernel, as Kernel::cuda_function takes it (nullptr for an
/// unknown name). Call it only where a CUDA device is present.
const void* cuda_test_kernel(const char* name);
/// The same as a Kernel::cuda_lookup (hdsm::cuda_lookup of the kernel's __global__ function), which
/// may be set anywhere: it is called at the launch.
const void* (*cuda_test_lookup(const char* name))();
#else
/// This test program was built without nvcc: there are no CUDA bodies.
inline const void* cuda_test_kernel(const char*) { return nullptr; }
inline const void* (*cuda_test_lookup(const char*))() { return nullptr; }
#endif

inline constexpr const char* kNoCudaKernels =
    "this test program has no CUDA kernels (CMake found no CUDA compiler when it was configured)";

/// Gives `kernel` the CUDA body of the same name when it is to run on `device` and that is a CUDA
/// device; false when there is none to give (the test skips with kNoCudaKernels).
inline bool give_cuda_body(Kernel& kernel, const Device& device) {
  if (device.properties().backend != Backend::cuda) return true;
  kernel.cuda_function = cuda_test_kernel(kernel.name.c_str());
  return kernel.cuda_function != nullptr;
}

}  // namespace hdsm::test
