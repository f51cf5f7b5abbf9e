// The models whose objects the host touches directly. HDSM_PROTOCOL=um: shared objects are the
// device's unified memory (on sim, host memory the kernels use directly, as an integrated GPU's;
// on CUDA, cudaMallocManaged memory; OpenCL has none and gets host-mapped). HDSM_PROTOCOL=
// host-mapped: objects are host memory the kernels use in place (sim: its pointers, OpenCL:
// CL_MEM_USE_HOST_PTR buffers, CUDA: mapped memory). These tests check the runtime's side on every
// backend present: the data reaches the kernels and comes back, calls run on the objects' device,
// sync waits, free waits for calls, nothing is copied and nothing faults, errors name what is wrong.
#include <hdsm/hdsm.hpp>

#include "support/cuda_kernels.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

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

// (protocol, backend, prefetch)
class Direct : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {
 protected:
  void SetUp() override {
    const std::string& backend = std::get<1>(GetParam());
    if (backend == "opencl" && hdsm::test::opencl_only_without_lsan())
      GTEST_SKIP() << "OpenCL under ASan runs in runtime.opencl_without_lsan";
    auto config = hdsm::test::fast_sim_config();
    config.set("HDSM_PROTOCOL", std::get<0>(GetParam()))
        .set("HDSM_DEVICE", backend)
        .set("HDSM_OPENCL_MEMORY", "64MiB")
        .set("HDSM_UM_PREFETCH", std::get<2>(GetParam()))
        .set("HDSM_UM_ADVICE", "device");
    try {
      rt_ = std::make_unique<hdsm::Runtime>(config);
    } catch (const hdsm::NoDevice& e) {
      GTEST_SKIP() << "no " << backend << " device here: " << e.what();
    }
    kernel_ = scale_add();
    if (!hdsm::test::give_cuda_body(kernel_, rt_->default_device()))
      GTEST_SKIP() << hdsm::test::kNoCudaKernels;
  }
  bool opencl() const { return std::get<1>(GetParam()) == "opencl"; }
  std::unique_ptr<hdsm::Runtime> rt_;
  hdsm::Kernel kernel_;
};

TEST_P(Direct, KernelsAndTheCpuShareOnePointerAcrossCalls) {
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
  if (opencl())
    EXPECT_THROW(rt_->safe(y + 3), hdsm::Unsupported) << "OpenCL kernels take buffers, not addresses";
  else
    EXPECT_EQ(rt_->safe(y + 3), y + 3) << "the kernels use the host's addresses";
  const hdsm::Stats stats = rt_->stats();
  EXPECT_EQ(stats.kernel_launches, 3u);
  EXPECT_EQ(stats.read_faults + stats.write_faults, 0u) << "hdsm handles no faults here";
  for (int r = 0; r < hdsm::kRouteCount; ++r) EXPECT_EQ(stats.routes[r].bytes, 0u) << "route " << r;
  for (int r = 0; r < hdsm::kCopyRouteCount; ++r) EXPECT_EQ(stats.copies[r].bytes, 0u) << "copy route " << r;
  rt_->free(x);
  rt_->free(y);
}

TEST_P(Direct, FreeWaitsForTheCallsUsingTheObject) {
  const std::uint64_t n = 1 << 20;
  auto* x = rt_->alloc<float>(n);
  auto* y = rt_->alloc<float>(n);
  rt_->call(kernel_, hdsm::cover(n), hdsm::in(x), hdsm::inout(y), n);
  rt_->free(x);  // must not pull the memory from under the kernel
  rt_->sync();
  rt_->free(y);
}

TEST_P(Direct, BadPointersAreErrors) {
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

// No object starts where another ends, so a range's end passed to a kernel names one object: the
// one it ends (safe() says so). Before, page-multiple objects could be adjacent mappings.
TEST_P(Direct, NoObjectStartsWhereAnotherEnds) {
  std::vector<float*> objects;
  for (int i = 0; i < 16; ++i) objects.push_back(rt_->alloc<float>(1024));  // 4 KiB: a page each
  for (float* x : objects) {
    for (float* y : objects) EXPECT_NE(x + 1024, y) << "an object starts at another's end";
  }
  if (!opencl()) {  // OpenCL kernels take buffers: safe() is refused there
    for (float* x : objects) EXPECT_EQ(rt_->safe(x + 1024), rt_->safe(x) + 1024);
  }
  for (float* x : objects) rt_->free(x);
}

TEST_P(Direct, BulkMemoryAndIoArePlainMemoryOperations) {
  auto* p = static_cast<unsigned char*>(rt_->alloc(8192));
  rt_->memset(p, 7, 8192);
  unsigned char back[8192];
  rt_->memcpy(back, p, sizeof back);
  for (unsigned char b : back) ASSERT_EQ(b, 7);
  rt_->free(p);
}

std::string direct_name(const ::testing::TestParamInfo<Direct::ParamType>& info) {
  std::string protocol = std::get<0>(info.param);
  if (protocol == "host-mapped") protocol = "host_mapped";
  return protocol + "_" + std::get<1>(info.param) + (std::get<2>(info.param) == "1" ? "_prefetch" : "");
}

INSTANTIATE_TEST_SUITE_P(Um, Direct,
                         ::testing::Combine(::testing::Values("um"), ::testing::Values("sim", "cuda"),
                                            ::testing::Values("0", "1")),
                         direct_name);
// um on OpenCL, which has no unified memory, is host-mapped.
INSTANTIATE_TEST_SUITE_P(HostMapped, Direct,
                         ::testing::Values(std::tuple("host-mapped", "sim", "0"),
                                           std::tuple("host-mapped", "opencl", "0"),
                                           std::tuple("host-mapped", "cuda", "0"),
                                           std::tuple("um", "opencl", "0")),
                         direct_name);

TEST(DirectErrors, UnknownProtocolListsTheModels) {
  auto config = hdsm::Config::defaults();
  EXPECT_EQ(config.get("HDSM_PROTOCOL"), "auto") << "the documented default";
  EXPECT_THROW(config.set("HDSM_PROTOCOL", "unified"), hdsm::ConfigError);
  for (const char* p : {"auto", "batch", "lazy", "rolling", "um", "host-mapped"})
    EXPECT_NO_THROW(config.set("HDSM_PROTOCOL", p)) << p;
}

}  // namespace
