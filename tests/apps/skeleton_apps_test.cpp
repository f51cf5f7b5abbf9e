// The skeleton applications (apps/skeleton_apps.cpp) compute their references on the host's workers,
// on 1 and 2 sim devices and on PoCL.
#include "apps/skeleton_apps.hpp"
#include "support/test_support.hpp"

#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace {

using hdsm::apps::Scale;
using hdsm::apps::SkeletonApp;
using hdsm::apps::Where;

class SkeletonApps : public ::testing::TestWithParam<std::size_t> {
 protected:
  const SkeletonApp& app() const { return hdsm::apps::skeleton_apps()[GetParam()]; }
};

TEST_P(SkeletonApps, MatchReferenceOnTheHostAndSimDevices) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  const hdsm::apps::Output want = app().run_reference(Scale::test);
  for (const Where& where :
       {Where{hdsm::SkeletonBackend::host, {}}, Where{hdsm::SkeletonBackend::devices, {0}},
        Where{hdsm::SkeletonBackend::devices, {0, 1}}}) {
    SCOPED_TRACE(where.backend == hdsm::SkeletonBackend::host
                     ? "host"
                     : std::to_string(where.devices.size()) + " devices");
    EXPECT_EQ(hdsm::apps::compare(app().run(rt, where, Scale::test), want, app().tolerance), "")
        << app().name;
  }
}

TEST_P(SkeletonApps, MatchReferenceOnopencl) {
  if (hdsm::test::opencl_only_without_lsan())
    GTEST_SKIP() << "OpenCL under ASan runs in apps.opencl_without_lsan";
  std::unique_ptr<hdsm::Runtime> rt;
  try {
    rt = std::make_unique<hdsm::Runtime>(hdsm::Config::defaults().set("HDSM_DEVICE", "opencl"));
  } catch (const hdsm::NoDevice& e) {
    GTEST_SKIP() << e.what();
  }
  EXPECT_EQ(hdsm::apps::compare(app().run(*rt, Where{}, Scale::test), app().run_reference(Scale::test),
                                app().tolerance),
            "")
      << app().name;
}

INSTANTIATE_TEST_SUITE_P(Apps, SkeletonApps,
                         ::testing::Range<std::size_t>(0, hdsm::apps::skeleton_apps().size()),
                         [](const auto& info) {
                           return std::string(hdsm::apps::skeleton_apps()[info.param].name);
                         });

}  // namespace
