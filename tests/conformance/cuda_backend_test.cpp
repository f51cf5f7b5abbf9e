// The CUDA backend as the runtime opens it (HDSM_CUDA, HDSM_DEVICE=cuda). These tests run
// everywhere: without a driver or a GPU they check the NoDevice error, with one the device list.
#include "support/cuda_kernels.hpp"

#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

hdsm::Config fast_config() {
  auto config = hdsm::Config::defaults();
  config.set("HDSM_SIM_LINK_GBPS", "0").set("HDSM_SIM_LATENCY_US", "0").set("HDSM_CUDA_MEMORY", "256MiB");
  return config;
}

/// A runtime with the CUDA devices opened, or nullptr and the NoDevice message.
std::unique_ptr<hdsm::Runtime> with_cuda(std::string& why) {
  try {
    return std::make_unique<hdsm::Runtime>(fast_config().set("HDSM_CUDA", "on"));
  } catch (const hdsm::NoDevice& e) {
    why = e.what();
    return nullptr;
  }
}

TEST(CudaBackend, OnWithoutDeviceIsNoDeviceElseDevicesAreListed) {
  std::string why;
  const auto runtime = with_cuda(why);
  if (!runtime) {
    EXPECT_NE(why.find("no CUDA device"), std::string::npos) << why;
#ifdef HDSM_TEST_CUDA_TOOLKIT
    EXPECT_NE(why.find("cudaGetDeviceCount"), std::string::npos) << why;
#else
    EXPECT_NE(why.find("without the CUDA toolkit"), std::string::npos) << why;
#endif
    return;
  }
  // The CUDA devices come after the sim devices, named cuda0, cuda1, ... with the GPU's name.
  const auto devices = runtime->devices();
  unsigned cuda = 0;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto& p = devices[i]->properties();
    EXPECT_EQ(p.index, i);
    if (p.backend != hdsm::Backend::cuda) {
      EXPECT_EQ(cuda, 0u) << "a " << hdsm::to_string(p.backend) << " device after the CUDA devices";
      continue;
    }
    EXPECT_EQ(p.name, "cuda" + std::to_string(cuda++));
    EXPECT_FALSE(p.description.empty());
    EXPECT_EQ(p.memory_bytes, std::size_t{256} << 20);  // HDSM_CUDA_MEMORY
    EXPECT_GE(p.copy_engines, 1u);
  }
  EXPECT_GT(cuda, 0u);
}

TEST(CudaBackend, AutoOpensCudaOnlyWhenTheDefaultDeviceIsCuda) {
  hdsm::Runtime runtime(fast_config().set("HDSM_CUDA", "auto").set("HDSM_DEVICE", "sim"));
  for (hdsm::Device* d : runtime.devices())
    EXPECT_NE(d->properties().backend, hdsm::Backend::cuda) << d->name();

  std::string why;
  const bool present = with_cuda(why) != nullptr;
  try {
    hdsm::Runtime named(fast_config().set("HDSM_DEVICE", "cuda"));
    EXPECT_TRUE(present);
    EXPECT_EQ(named.default_device().name(), "cuda0");
  } catch (const hdsm::NoDevice& e) {
    EXPECT_FALSE(present) << e.what();
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}

TEST(CudaBackend, OffNeverOpensCuda) {
  try {
    hdsm::Runtime runtime(fast_config().set("HDSM_CUDA", "off").set("HDSM_DEVICE", "cuda"));
    FAIL() << "HDSM_DEVICE=cuda found a device with HDSM_CUDA=off";
  } catch (const hdsm::NoDevice& e) {
    EXPECT_NE(std::string(e.what()).find("HDSM_DEVICE=cuda: no such device"), std::string::npos) << e.what();
  }
}

/// The first CUDA device of `runtime`.
hdsm::Device& first_cuda(const hdsm::Runtime& runtime) {
  for (hdsm::Device* d : runtime.devices())
    if (d->properties().backend == hdsm::Backend::cuda) return *d;
  throw std::logic_error("the runtime opened no CUDA device");
}

TEST(CudaBackend, KernelWithoutCudaBodyNamesKernelAndBackend) {
  std::string why;
  const auto runtime = with_cuda(why);
  if (!runtime) GTEST_SKIP() << why;
  hdsm::Device& cuda = first_cuda(*runtime);
  auto queue = cuda.create_queue();
  auto host_only = hdsm::per_thread("host_and_opencl_only", [](const hdsm::Thread&, int) {});
  host_only.opencl_source = "__kernel void host_and_opencl_only(int x) {}";
  auto lookup_finds_none = host_only;
  lookup_finds_none.cuda_lookup = [] { return static_cast<const void*>(nullptr); };
  const hdsm::KernelArg args[] = {hdsm::KernelArg::value(1)};
  for (const hdsm::Kernel* kernel : {&host_only, &lookup_finds_none}) {
    try {
      queue->launch(*kernel, hdsm::cover(1), args);
      FAIL() << "a kernel without a CUDA body launched on " << cuda.name();
    } catch (const hdsm::Unsupported& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("host_and_opencl_only"), std::string::npos) << message;
      EXPECT_NE(message.find("backend cuda"), std::string::npos) << message;
    }
  }
  EXPECT_NO_THROW(queue->synchronize());
}

// A kernel whose CUDA body is only a Kernel::cuda_lookup (hdsm::cuda_lookup<f>, as the apps give
// theirs) launches with what the lookup resolves, again and again.
TEST(CudaBackend, KernelWithCudaLookupLaunches) {
  std::string why;
  const auto runtime = with_cuda(why);
  if (!runtime) GTEST_SKIP() << why;
  auto twice = hdsm::per_thread("twice", [](const hdsm::Thread&, const float*, float*, int) {});
  twice.cuda_lookup = hdsm::test::cuda_test_lookup("twice");
  if (twice.cuda_lookup == nullptr) GTEST_SKIP() << hdsm::test::kNoCudaKernels;
  hdsm::Device& cuda = first_cuda(*runtime);
  auto queue = cuda.create_queue();
  const int n = 1000;
  std::vector<float> in(n), out(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i);
  const hdsm::DeviceBuffer x = cuda.alloc(n * sizeof(float)), y = cuda.alloc(n * sizeof(float));
  queue->copy_to_device(x, 0, in.data(), n * sizeof(float));
  const hdsm::KernelArg args[] = {hdsm::KernelArg::buffer(x), hdsm::KernelArg::buffer(y),
                                  hdsm::KernelArg::value(n)};
  for (int round = 0; round < 2; ++round) {
    queue->launch(twice, hdsm::cover(n, 128), args);
    queue->copy_to_host(out.data(), y, 0, n * sizeof(float));
    queue->synchronize();
    for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], 2 * in[i]) << "round " << round << ", element " << i;
  }
  EXPECT_EQ(twice.cuda_lookup(), hdsm::test::cuda_test_kernel("twice"))
      << "the lookup did not keep its handle";
  cuda.free(x);
  cuda.free(y);
}

}  // namespace
