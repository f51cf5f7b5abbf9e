// Shared memory (ADSM) on every backend present: the same program, one pointer for the CPU and the
// device, under each protocol, host-mapped and the default, auto, included. Backends without a
// device here are skipped, never passed.
#include <hdsm/hdsm.hpp>

#include "support/cuda_kernels.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>

namespace {

const hdsm::Kernel& saxpy() {
  static const hdsm::Kernel k = [] {
    auto kernel = hdsm::per_thread(
        "saxpy", [](const hdsm::Thread& t, float a, const float* x, float* y, std::uint64_t n) {
          if (const auto i = t.global_x(); i < n) y[i] = a * x[i] + y[i];
        });
    kernel.opencl_source = R"(
      __kernel void saxpy(float a, __global const float* x, __global float* y, ulong n) {
        const size_t i = get_global_id(0);
        if (i < n) y[i] = a * x[i] + y[i];
      })";
    return kernel;
  }();
  return k;
}

class AdsmBackends : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    if (std::string(std::get<0>(GetParam())) == "opencl" && hdsm::test::opencl_only_without_lsan())
      GTEST_SKIP() << "OpenCL under ASan runs in conformance.opencl_without_lsan";
    auto config = hdsm::Config::defaults();
    config.set("HDSM_DEVICE", std::get<0>(GetParam()))
        .set("HDSM_PROTOCOL", std::get<1>(GetParam()))
        .set("HDSM_OPENCL_MEMORY", "256MiB")
        .set("HDSM_CUDA_MEMORY", "256MiB")
        .set("HDSM_SIM_LINK_GBPS", "0")
        .set("HDSM_SIM_LATENCY_US", "0")
        .set("HDSM_SIM_POISON", "1");
    try {
      rt_ = std::make_unique<hdsm::Runtime>(config);
    } catch (const hdsm::NoDevice& e) {
      GTEST_SKIP() << "backend " << std::get<0>(GetParam()) << " has no device here: " << e.what();
    }
    if (!hdsm::test::give_cuda_body(saxpy_, rt_->default_device()))
      GTEST_SKIP() << hdsm::test::kNoCudaKernels;
  }
  std::unique_ptr<hdsm::Runtime> rt_;
  hdsm::Kernel saxpy_ = saxpy();  // with its CUDA body on a CUDA device
};

TEST_P(AdsmBackends, IterativeKernelWithCpuUpdatesBetweenCalls) {
  const std::uint64_t n = 100000;  // several blocks, not a multiple of the launch block
  auto* x = static_cast<float*>(rt_->alloc(n * sizeof(float)));
  auto* y = static_cast<float*>(rt_->alloc(n * sizeof(float)));
  for (std::uint64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 100);
    y[i] = 1;
  }
  std::vector<float> ref(n, 1);
  for (int step = 0; step < 3; ++step) {
    rt_->call(saxpy_, hdsm::cover(n), 2.0f, hdsm::in(x), hdsm::inout(y), n);
    rt_->sync();
    for (std::uint64_t i = 0; i < n; ++i) ref[i] = 2.0f * static_cast<float>(i % 100) + ref[i];
    // The CPU changes a few elements between the calls; only their blocks move back.
    y[step * 1000] = -1;
    ref[step * 1000] = -1;
  }
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], ref[i]) << "element " << i;
  EXPECT_EQ(rt_->stats().kernel_launches, 3u);
  rt_->free(x);
  rt_->free(y);
}

// A new object's device copy reads as zero, as its host view does, also where freed objects' device
// buffers held data: a kernel that adds one new object to another gets zeros.
TEST_P(AdsmBackends, NewObjectsReadZeroOnTheDevice) {
  const std::uint64_t n = 300000;
  for (int round = 0; round < 3; ++round) {
    auto* x = static_cast<float*>(rt_->alloc(n * sizeof(float)));
    auto* y = static_cast<float*>(rt_->alloc(n * sizeof(float)));
    rt_->call(saxpy_, hdsm::cover(n), 1.0f, hdsm::in(x), hdsm::inout(y), n);
    rt_->sync();
    for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], 0.0f) << "round " << round << ", element " << i;
    // Leave data in both device buffers before they are freed.
    for (std::uint64_t i = 0; i < n; ++i) x[i] = 5;
    rt_->call(saxpy_, hdsm::cover(n), 1.0f, hdsm::in(x), hdsm::inout(y), n);
    rt_->sync();
    ASSERT_EQ(y[n - 1], 5.0f);
    rt_->free(x);
    rt_->free(y);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, AdsmBackends,
                         ::testing::Combine(::testing::Values("sim", "opencl", "cuda"),
                                            ::testing::Values("batch", "lazy", "rolling", "host-mapped",
                                                              "auto")),
                         [](const auto& info) {
                           std::string protocol = std::get<1>(info.param);
                           if (protocol == "host-mapped") protocol = "host_mapped";
                           return std::get<0>(info.param) + "_" + protocol;
                         });

}  // namespace
