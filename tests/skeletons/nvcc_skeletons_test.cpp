// The skeleton layer compiled by nvcc (skeletons/cuda/nvcc_skeletons.cu, built where nvcc is): its
// calls compute what loops do on the host's sim devices (1 and 2), and every kernel they use carries a
// CUDA body beside its host body. Calls compiled by the host compiler carry none (a launch on CUDA then
// fails naming the kernel).
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "support/test_support.hpp"

#if defined(HDSM_TEST_NVCC_SKELETONS)
#include "skeletons/cuda/nvcc_skeletons.hpp"
#endif

#include <gtest/gtest.h>

#include <memory>

namespace {

HDSM_USER_FUNCTION(gxx_add, long, (long a, long b), { return a + b; })

TEST(NvccSkeletons, CallsCompiledByNvccRunOnSimDevicesAndCarryCudaBodies) {
#if defined(HDSM_TEST_NVCC_SKELETONS)
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  for (const std::vector<unsigned>& devices : {std::vector<unsigned>{0}, std::vector<unsigned>{0, 1}}) {
    SCOPED_TRACE(std::to_string(devices.size()) + " devices");
    const hdsm::test::NvccSkeletonsResult r = hdsm::test::run_skeletons_built_by_nvcc(rt, devices);
    EXPECT_TRUE(r.wrong.empty()) << r.wrong.size() << " wrong, the first: " << r.wrong.front();
    EXPECT_EQ(r.kernels, 14U);
    EXPECT_EQ(r.kernels_with_cuda, r.kernels);
  }
#else
  GTEST_SKIP() << "not built: no nvcc, or a TSan build (see tests/CMakeLists.txt)";
#endif
}

// On a CUDA device (a GPU machine), the same calls run their CUDA bodies.
TEST(NvccSkeletons, cuda) {
#if defined(HDSM_TEST_NVCC_SKELETONS)
  std::unique_ptr<hdsm::Runtime> rt;
  try {
    rt = std::make_unique<hdsm::Runtime>(hdsm::Config::defaults().set("HDSM_DEVICE", "cuda"));
  } catch (const hdsm::NoDevice& e) {
    GTEST_SKIP() << e.what();
  }
  const hdsm::test::NvccSkeletonsResult r =
      hdsm::test::run_skeletons_built_by_nvcc(*rt, {rt->default_device().properties().index});
  EXPECT_TRUE(r.wrong.empty()) << r.wrong.size() << " wrong, the first: " << r.wrong.front();
#else
  GTEST_SKIP() << "not built: no nvcc, or a TSan build (see tests/CMakeLists.txt)";
#endif
}

TEST(NvccSkeletons, CallsCompiledByTheHostCompilerCarryNoCudaBody) {
  EXPECT_EQ((hdsm::detail::ReduceKernel<gxx_add, long>::get().cuda_lookup), nullptr);
}

}  // namespace
