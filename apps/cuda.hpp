// The apps' CUDA kernel bodies. Every app kernel's __global__ function, named as the Kernel, lives
// in apps/cuda/*.cu, which nvcc compiles (C++17, --fmad=false) into hdsm_apps when CMake finds it,
// and is registered by name there (HDSM_CUDA_KERNEL, <hdsm/cuda.hpp>): the kernel objects made by the
// apps' C++ code find their CUDA bodies at their first launch on a CUDA device. It takes the same
// arguments in order (buffers as device pointers, values with the same types, from the app's kernel
// header) and runs the code of the app's kernel header that the host body runs, so the two compute
// alike.
#pragma once

namespace hdsm::apps {

/// Whether this build has the CUDA bodies (CMake found nvcc). Without them the apps still run on sim
/// and OpenCL devices, and a launch on CUDA fails naming the kernel.
bool have_cuda_bodies();

}  // namespace hdsm::apps
