// Argument checks the backends make before they enqueue anything, with one wording. Header-only and
// free of device APIs, so that unit tests check them without a device.
#pragma once

#include "exec/executor.hpp"

#include <hdsm/error.hpp>
#include <hdsm/kernel.hpp>
#include <hdsm/kernel_registry.hpp>

#include <fmt/format.h>

#include <cstddef>
#include <string>

namespace hdsm {

/// InvalidArgument when a copy of `bytes` > 0 bytes has a null host pointer.
inline void require_host(const void* p, std::size_t bytes, const char* what, const std::string& device) {
  if (p == nullptr && bytes != 0)
    throw InvalidArgument(fmt::format("{} on {}: the host pointer is null", what, device));
}

/// InvalidArgument unless [offset, offset + bytes) lies inside a buffer of `size` bytes.
inline void require_range(const std::string& what, const std::string& device, std::size_t offset,
                          std::size_t bytes, std::size_t size) {
  if (offset > size || bytes > size - offset)
    throw InvalidArgument(fmt::format("{} on {}: bytes [{}, {}) are past the end of a {}-byte buffer", what,
                                      device, offset, offset + bytes, size));
}

/// InvalidArgument naming the kernel and `where` ("on sim0", "in a call") for a launch shape no
/// backend runs (a zero dimension, a block above 1024 threads, too much dynamic shared memory), at
/// the launch or call, not at the synchronize after it.
inline void require_launch(const Kernel& kernel, const Launch& launch, const std::string& where) {
  try {
    exec::validate(launch);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("kernel '{}' {}: {}", kernel.name, where, e.what()));
  }
}

/// InvalidArgument when kernel code (a block the executor runs) is about to wait for device work:
/// the sim devices' kernels run on the executor whose worker runs that block, so the wait would never
/// end (CUDA has no host calls in device code). `what` names the wait.
inline void require_outside_a_kernel(const std::string& what) {
  if (exec::inside_a_block())
    throw InvalidArgument(fmt::format(
        "{} from inside a kernel: kernel code may not wait for device work (the sim devices' kernels run "
        "on the executor whose worker runs this block, so the wait would never end); launch it and wait "
        "from host code",
        what));
}

/// The __global__ function (cudaKernel_t) the cuda backend launches `kernel` with:
/// Kernel::cuda_function, else what Kernel::cuda_lookup returns. Unsupported naming the kernel and
/// the backend when neither gives one; an error of the lookup itself (no driver) goes through.
inline const void* require_cuda_body(const Kernel& kernel) {
  const void* function = kernel.cuda_function;
  if (function == nullptr && kernel.cuda_lookup != nullptr) function = kernel.cuda_lookup();
  if (function == nullptr && kernel.cuda_lookup == nullptr)
    if (const auto registered = detail::registered_cuda_body(kernel.name.c_str())) function = registered();
  if (function == nullptr)
    throw Unsupported(
        fmt::format("kernel '{}' has no body for backend cuda (it needs a __global__ function: "
                    "Kernel::cuda_function = hdsm::cuda_kernel(f), Kernel::cuda_lookup = "
                    "&hdsm::cuda_lookup<f>, or HDSM_CUDA_KERNEL(f) in the .cu file; see <hdsm/cuda.hpp>)",
                    kernel.name));
  return function;
}

}  // namespace hdsm
