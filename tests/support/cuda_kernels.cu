// The test kernels (conformance suite, unified memory) as __global__ functions: the same names, parameters
// and results as their host bodies and OpenCL sources in device_conformance_test.cpp and
// adsm_backends_test.cpp. C++17 (see tests/CMakeLists.txt): it declares what cuda_kernels.hpp, which needs
// C++20, does.
#include <hdsm/cuda.hpp>

#include <cstdint>
#include <cstring>

namespace {

__device__ std::uint64_t global_x() { return std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; }

__global__ void vecadd(const float* x, const float* y, float* z, int count) {
  const std::uint64_t i = global_x();
  if (i < static_cast<std::uint64_t>(count)) z[i] = x[i] + y[i];
}

__global__ void twice(const float* x, float* y, int count) {
  const std::uint64_t i = global_x();
  if (i < static_cast<std::uint64_t>(count)) y[i] = 2 * x[i];
}

__global__ void gather_through_table(const int* const* pointers, int* result) {
  const std::uint64_t i = global_x();
  if (i < 3) result[i] = *pointers[i];
}

// The host-mapping conformance test's kernel: adds one to each element of host memory in place.
__global__ void add_one(int* x, int count) {
  const std::uint64_t i = global_x();
  if (i < static_cast<std::uint64_t>(count)) x[i] += 1;
}

__global__ void two_args(int, int) {}

__global__ void one_arg(int) {}

__global__ void saxpy(float a, const float* x, float* y, std::uint64_t n) {
  const std::uint64_t i = global_x();
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void um_scale_add(const float* x, float* y, std::uint64_t n) {
  const std::uint64_t i = global_x();
  if (i < n) y[i] = 2 * x[i] + y[i];
}

// Reverses each block's chunk of `in` through dynamic shared memory (more than the default 48 KiB
// in the conformance test, so the launch must opt in).
__global__ void reverse_in_shared(const float* in, float* out, unsigned chunk) {
  extern __shared__ float tile[];
  const std::size_t base = std::size_t{blockIdx.x} * chunk;
  for (unsigned i = threadIdx.x; i < chunk; i += blockDim.x) tile[i] = in[base + i];
  __syncthreads();
  for (unsigned i = threadIdx.x; i < chunk; i += blockDim.x) out[base + i] = tile[chunk - 1 - i];
}

// The randomized ADSM model test's kernels (adsm_model_test.cpp): a byte pattern into a range, and
// an FNV-1a checksum of one range stored byte by byte (little-endian) at any byte of an object.
__global__ void model_pattern(unsigned char* dst, std::uint64_t n, std::uint32_t salt) {
  const std::uint64_t i = global_x();
  if (i < n) dst[i] = static_cast<unsigned char>((static_cast<std::uint32_t>(i) * 131u + salt) ^ (i >> 9));
}

__global__ void model_checksum(const unsigned char* src, std::uint64_t n, unsigned char* dst) {
  if (global_x() != 0) return;
  std::uint64_t h = 1469598103934665603ull;
  for (std::uint64_t i = 0; i < n; ++i) h = (h ^ src[i]) * 1099511628211ull;
  for (int b = 0; b < 8; ++b) dst[b] = static_cast<unsigned char>(h >> (8 * b));
}

}  // namespace

namespace hdsm::test {

const void* (*cuda_test_lookup(const char* name))();
const void* cuda_test_kernel(const char* name);

const void* (*cuda_test_lookup(const char* name))() {
  struct Entry {
    const char* name;
    const void* (*lookup)();
  };
  static const Entry table[] = {
      {"vecadd", &hdsm::cuda_lookup<vecadd>},
      {"twice", &hdsm::cuda_lookup<twice>},
      {"gather_through_table", &hdsm::cuda_lookup<gather_through_table>},
      {"add_one", &hdsm::cuda_lookup<add_one>},
      {"two_args", &hdsm::cuda_lookup<two_args>},
      {"one_arg", &hdsm::cuda_lookup<one_arg>},
      {"saxpy", &hdsm::cuda_lookup<saxpy>},
      {"um_scale_add", &hdsm::cuda_lookup<um_scale_add>},
      {"reverse_in_shared", &hdsm::cuda_lookup<reverse_in_shared>},
      {"model_pattern", &hdsm::cuda_lookup<model_pattern>},
      {"model_checksum", &hdsm::cuda_lookup<model_checksum>},
  };
  for (const Entry& e : table)
    if (std::strcmp(e.name, name) == 0) return e.lookup;
  return nullptr;
}

const void* cuda_test_kernel(const char* name) {
  const auto lookup = cuda_test_lookup(name);
  return lookup != nullptr ? lookup() : nullptr;
}

}  // namespace hdsm::test
