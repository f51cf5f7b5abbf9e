// What the apps' kernel headers (<app>_kernel.hpp) build on. A kernel header holds what an app's
// kernel bodies share: the argument types, the constants and the code each thread runs, which the
// host body (apps/**/*.cpp, C++20) and the CUDA body (apps/cuda/*.cu, C++17, nvcc) both call. So a
// kernel header is C++17, includes no hdsm header, and marks its functions HDSM_APPS_HD:
// __host__ __device__ under nvcc, nothing for the host compiler. (nvcc compiles the apps' CUDA code
// with --expt-relaxed-constexpr, so constexpr functions, std::min and std::clamp among them, are
// callable on the device too.)
#pragma once

#if defined(__CUDACC__)
#define HDSM_APPS_HD __host__ __device__
#else
#define HDSM_APPS_HD
#endif
