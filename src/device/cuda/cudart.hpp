// The CUDA runtime API, loaded with dlopen when the cuda backend first opens, not linked. The static
// CUDA runtime that libhdsm linked before brought 12 KiB of initial-exec thread-local storage aligned
// to a page: glibc then refused to load libhdsm with dlopen (a plug-in, Python's ctypes: "cannot
// allocate memory in static TLS block"), and every thread of every program linking libhdsm gave about
// 20 KiB of its stack to it, CUDA used or not. Loaded on demand, the shared runtime costs nothing
// until a program opens the cuda backend, and libhdsm still loads where no CUDA is installed (the
// backend then reports no device, naming the library).
//
// The backend calls cudart().cudaMalloc(...) where it would call cudaMalloc(...): a member per
// function, with the function's own type (the header's macros, cudaMemcpyAsync's per-thread
// variant for one, name the same symbol in both places).
#pragma once

#include <cuda_runtime_api.h>

namespace hdsm::cuda {

// Every CUDA runtime function the backend calls.
// clang-format off
#define HDSM_CUDART_FUNCTIONS(X)                                                                  \
  X(cudaDeviceCanAccessPeer) X(cudaDeviceEnablePeerAccess) X(cudaDeviceGetAttribute)              \
  X(cudaEventCreateWithFlags) X(cudaEventDestroy) X(cudaEventQuery) X(cudaEventRecord)            \
  X(cudaEventSynchronize) X(cudaFree) X(cudaFreeHost) X(cudaFuncGetParamInfo)                     \
  X(cudaGetDeviceCount) X(cudaGetDeviceProperties) X(cudaGetErrorName) X(cudaGetErrorString)      \
  X(cudaGetLastError) X(cudaHostAlloc) X(cudaHostGetDevicePointer) X(cudaHostRegister)            \
  X(cudaHostUnregister) X(cudaKernelSetAttributeForDevice) X(cudaLaunchKernel) X(cudaMalloc)      \
  X(cudaMallocManaged) X(cudaMemAdvise) X(cudaMemPrefetchAsync) X(cudaMemcpyAsync)                \
  X(cudaMemcpyPeerAsync) X(cudaMemsetAsync) X(cudaSetDevice) X(cudaStreamCreateWithFlags)         \
  X(cudaStreamDestroy) X(cudaStreamSynchronize) X(cudaStreamWaitEvent)
// clang-format on

struct Cudart {
// NOLINTNEXTLINE(bugprone-macro-parentheses): a name, declared; parentheses would not compile
#define HDSM_CUDART_MEMBER(function) decltype(&::function) function = nullptr;
  HDSM_CUDART_FUNCTIONS(HDSM_CUDART_MEMBER)
#undef HDSM_CUDART_MEMBER
};

/// Loads the CUDA runtime, once (later calls return at once; one that failed is tried again):
/// NoDevice naming the library and the loader's error where it cannot be loaded or lacks a function.
void load_cudart();
/// The runtime's functions, once load_cudart() has returned.
const Cudart& cudart() noexcept;

}  // namespace hdsm::cuda
