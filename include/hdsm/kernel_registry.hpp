// The CUDA bodies registered by name: what HDSM_CUDA_KERNEL (<hdsm/cuda.hpp>) adds to, and what the
// CUDA backend consults for a kernel that names no CUDA body of its own. C++17 and free of CUDA
// headers: nvcc compiles it, and so does libhdsm where there is no CUDA toolkit.
#pragma once

#include <hdsm/export.h>

HDSM_VISIBLE_BEGIN
namespace hdsm::detail {

/// A Kernel::cuda_lookup.
using CudaBodyLookup = const void* (*)();

/// Registers `lookup` as the CUDA body of kernels named `name` (a string that lives as long as the
/// program, such as a literal); returns true. A second registration of a name replaces the first.
bool register_cuda_body(const char* name, CudaBodyLookup lookup);

/// The lookup registered for kernels named `name`, or nullptr.
CudaBodyLookup registered_cuda_body(const char* name);

}  // namespace hdsm::detail

HDSM_VISIBLE_END
