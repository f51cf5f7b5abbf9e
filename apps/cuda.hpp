// The apps' CUDA kernel bodies. Every app kernel's __global__ function, named as the Kernel, lives
// in apps/cuda/*.cu, which nvcc compiles (C++17, --fmad=false) into hdsm_apps when CMake finds it.
// It takes the same arguments in order (buffers as device pointers, values with the same types,
// from the app's kernel header) and runs the code of the app's kernel header that the host body
// runs, so the two compute alike.
#pragma once

#include <hdsm/kernel.hpp>

namespace hdsm::apps {

/// `kernel` with its CUDA body as Kernel::cuda_lookup, which resolves the __global__ function's
/// cudaKernel_t at the kernel's first launch on a CUDA device (a kernel object serves every backend
/// and is made where there may be no driver). In a build without nvcc the kernel is returned as it
/// is, and a launch on CUDA fails naming it; in a build with nvcc a kernel without a CUDA body is a
/// std::logic_error here.
Kernel with_cuda(Kernel kernel);

/// Whether this build has the CUDA bodies (CMake found nvcc).
bool have_cuda_bodies();

}  // namespace hdsm::apps
