// How the cuda backend finds a kernel's CUDA body (require_cuda_body in src/device/checks.hpp, which
// its launch calls first): Kernel::cuda_function, else what Kernel::cuda_lookup returns, else an
// Unsupported error naming the kernel and the backend. No CUDA device needed: the lookups here
// return stand-in handles, which nothing launches.
#include "device/checks.hpp"

#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

int lookups = 0;
const int handle = 0, other_handle = 0;  // stand-ins for cudaKernel_t values
const void* counted_lookup() {
  ++lookups;
  return &handle;
}

hdsm::Kernel host_only() {
  return hdsm::per_thread("only_a_host_body", [](const hdsm::Thread&, int) {});
}

void expect_no_cuda_body(const hdsm::Kernel& kernel) {
  try {
    hdsm::require_cuda_body(kernel);
    FAIL() << "a CUDA body was found for " << kernel.name;
  } catch (const hdsm::Unsupported& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'only_a_host_body'"), std::string::npos) << message;
    EXPECT_NE(message.find("no body for backend cuda"), std::string::npos) << message;
    EXPECT_NE(message.find("cuda_lookup"), std::string::npos) << message;
  }
}

TEST(CudaBody, FunctionComesFirstAndTheLookupIsNotCalled) {
  hdsm::Kernel k = host_only();
  k.cuda_function = &other_handle;
  k.cuda_lookup = counted_lookup;
  lookups = 0;
  EXPECT_EQ(hdsm::require_cuda_body(k), &other_handle);
  EXPECT_EQ(lookups, 0);
}

TEST(CudaBody, LookupServesEveryLaunchWithoutAFunction) {
  hdsm::Kernel k = host_only();
  k.cuda_lookup = counted_lookup;
  lookups = 0;
  EXPECT_EQ(hdsm::require_cuda_body(k), &handle);
  EXPECT_EQ(hdsm::require_cuda_body(k), &handle);
  EXPECT_EQ(lookups, 2) << "the backend asks at every launch; the lookup keeps its handle";
  EXPECT_EQ(k.cuda_function, nullptr) << "the kernel is not changed";
}

TEST(CudaBody, NeitherIsUnsupportedNamingKernelAndBackend) {
  expect_no_cuda_body(host_only());
  hdsm::Kernel finds_none = host_only();
  finds_none.cuda_lookup = [] { return static_cast<const void*>(nullptr); };
  expect_no_cuda_body(finds_none);
}

TEST(CudaBody, ErrorOfTheLookupGoesThrough) {
  hdsm::Kernel k = host_only();
  k.cuda_lookup = []() -> const void* { throw hdsm::NoDevice("cudaGetKernel: no CUDA driver"); };
  EXPECT_THROW(hdsm::require_cuda_body(k), hdsm::NoDevice);
}

TEST(CudaBody, KernelsStartWithoutCudaBody) {
  const hdsm::Kernel kernels[] = {host_only(), hdsm::per_block("b", [](hdsm::Block&) {}),
                                  hdsm::cooperative("c", [](hdsm::ThreadCtx&) {})};
  for (const hdsm::Kernel& k : kernels) {
    EXPECT_EQ(k.cuda_function, nullptr) << k.name;
    EXPECT_EQ(k.cuda_lookup, nullptr) << k.name;
  }
}

}  // namespace
