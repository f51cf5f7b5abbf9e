// HDSM_PROTOCOL=um: shared objects are the device's unified memory. On sim devices that memory is
// host memory the kernels use directly (an integrated GPU); on CUDA it is cudaMallocManaged memory.
// These tests check the runtime's side on every backend present: pointers pass unchanged, calls run
// on the objects' device, sync waits, free waits for calls, errors name what is wrong.
#include <hdsm/hdsm.hpp>

#include "support/cuda_kernels.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>

namespace {

const hdsm::Kernel& scale_add() {
  static const hdsm::Kernel k = [] {
    auto kernel = hdsm::per_thread("um_scale_add",
                                   [](const hdsm::Thread& t, const float* x, float* y, std::uint64_t n) {
                                     if (const auto i = t.global_x(); i < n) y[i] = 2 * x[i] + y[i];
                                   });
    kernel.opencl_source = R"(
      __kernel void um_scale_add(__global const float* x, __global float* y, ulong n) {
        const size_t i = get_global_id(0);
        if (i < n) y[i] = 2 * x[i] + y[i];
      })";
    return kernel;
  }();
  return k;
}

// (backend, prefetch)
class Unified : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    auto config = hdsm::test::fast_sim_config();
    config.set("HDSM_PROTOCOL", "um")
        .set("HDSM_DEVICE", std::get<0>(GetParam()))
        .set("HDSM_UM_PREFETCH", std::get<1>(GetParam()))
        .set("HDSM_UM_ADVICE", "device");
    try {
      rt_ = std::make_unique<hdsm::Runtime>(config);
    } catch (const hdsm::NoDevice& e) {
      GTEST_SKIP() << "no " << std::get<0>(GetParam()) << " device here: " << e.what();
    }
    kernel_ = scale_add();
    if (!hdsm::test::give_cuda_body(kernel_, rt_->default_device()))
      GTEST_SKIP() << hdsm::test::kNoCudaKernels;
  }
  std::unique_ptr<hdsm::Runtime> rt_;
  hdsm::Kernel kernel_;
};

TEST_P(Unified, KernelsAndTheCpuShareOnePointerAcrossCalls) {
  const std::uint64_t n = 10000;
  auto* x = rt_->alloc<float>(n);
  auto* y = rt_->alloc<float>(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    EXPECT_EQ(y[i], 0.0f) << "new objects are zero-filled";
    x[i] = static_cast<float>(i % 7);
    y[i] = 1;
  }
  rt_->call(kernel_, hdsm::cover(n), hdsm::in(x), hdsm::inout(y), n);
  rt_->call(kernel_, hdsm::cover(n), x, y, n);  // unannotated: the same pointers
  rt_->sync();
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], 4.0f * static_cast<float>(i % 7) + 1) << i;
  y[5] = -1;  // the CPU writes between calls
  rt_->call(kernel_, hdsm::cover(n), hdsm::in(x + 0), hdsm::inout(y), n);
  rt_->sync();
  EXPECT_EQ(y[5], 2.0f * 5 - 1);
  EXPECT_EQ(rt_->safe(y + 3), y + 3) << "unified memory has one address";
  EXPECT_EQ(rt_->stats().kernel_launches, 3u);
  EXPECT_EQ(rt_->stats().read_faults + rt_->stats().write_faults, 0u) << "hdsm handles no faults under um";
  rt_->free(x);
  rt_->free(y);
}

TEST_P(Unified, FreeWaitsForTheCallsUsingTheObject) {
  const std::uint64_t n = 1 << 20;
  auto* x = rt_->alloc<float>(n);
  auto* y = rt_->alloc<float>(n);
  rt_->call(kernel_, hdsm::cover(n), hdsm::in(x), hdsm::inout(y), n);
  rt_->free(x);  // must not pull the memory from under the kernel
  rt_->sync();
  rt_->free(y);
}

TEST_P(Unified, BadPointersAreErrors) {
  auto* x = rt_->alloc<float>(100);
  EXPECT_THROW(rt_->free(x + 1), hdsm::InvalidPointer);
  float host[4] = {};
  EXPECT_THROW(rt_->free(host), hdsm::InvalidPointer);
  EXPECT_THROW(rt_->safe(host), hdsm::InvalidArgument);
  EXPECT_THROW(rt_->call(kernel_, hdsm::cover(4), hdsm::in(host), hdsm::inout(x), std::uint64_t{4}),
               hdsm::InvalidArgument);
  rt_->free(x);
  EXPECT_THROW(rt_->free(x), hdsm::InvalidPointer);
  EXPECT_THROW(rt_->alloc(0), hdsm::InvalidArgument);
}

TEST_P(Unified, BulkMemoryAndIoArePlainMemoryOperations) {
  auto* p = static_cast<unsigned char*>(rt_->alloc(8192));
  rt_->memset(p, 7, 8192);
  unsigned char back[8192];
  rt_->memcpy(back, p, sizeof back);
  for (unsigned char b : back) ASSERT_EQ(b, 7);
  rt_->free(p);
}

INSTANTIATE_TEST_SUITE_P(Backends, Unified,
                         ::testing::Combine(::testing::Values("sim", "cuda"), ::testing::Values("0", "1")),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) == "1" ? "_prefetch" : "");
                         });

TEST(UnifiedErrors, DeviceWithoutUnifiedMemoryIsUnsupportedNamingIt) {
  if (hdsm::test::opencl_only_without_lsan()) GTEST_SKIP() << "OpenCL under ASan runs without LeakSanitizer";
  auto config = hdsm::test::fast_sim_config();
  config.set("HDSM_PROTOCOL", "um").set("HDSM_DEVICE", "opencl").set("HDSM_OPENCL_MEMORY", "64MiB");
  std::unique_ptr<hdsm::Runtime> rt;
  try {
    rt = std::make_unique<hdsm::Runtime>(config);
  } catch (const hdsm::NoDevice& e) {
    GTEST_SKIP() << "no OpenCL device here: " << e.what();
  }
  try {
    rt->alloc(64);
    FAIL() << "alloc on an OpenCL device under um succeeded";
  } catch (const hdsm::Unsupported& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("HDSM_PROTOCOL=um"), std::string::npos) << what;
    EXPECT_NE(what.find("opencl"), std::string::npos) << what;
  }
}

TEST(UnifiedErrors, UnknownProtocolListsUm) {
  auto config = hdsm::Config::defaults();
  EXPECT_THROW(config.set("HDSM_PROTOCOL", "unified"), hdsm::ConfigError);
  EXPECT_NO_THROW(config.set("HDSM_PROTOCOL", "um"));
}

}  // namespace
