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

// Table 1's "initial" configuration: containers under the initial mechanism stay correct across the
// split calls of the iterative apps only when the program flushes them after each call, as SkePU's
// programs had to; without the flushes a device reads its stale copy of the other device's half.
TEST(SkeletonAppsInitialMechanism, IterativeAppsNeedTheFlushes) {
  hdsm::Runtime rt(
      hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2").set("HDSM_CONTAINER_MECHANISM", "initial"));
  for (const hdsm::apps::SizedRun& run : hdsm::apps::table1_apps(Scale::test)) {
    SCOPED_TRACE(std::string(run.app->name));
    const hdsm::apps::Output want = run.app->run_reference(Scale::test);
    EXPECT_EQ(hdsm::apps::compare(
                  run.app->run(rt, Where{hdsm::SkeletonBackend::devices, {0, 1}, true}, Scale::test), want,
                  run.app->tolerance),
              "");
    EXPECT_NE(hdsm::apps::compare(
                  run.app->run(rt, Where{hdsm::SkeletonBackend::devices, {0, 1}, false}, Scale::test), want,
                  run.app->tolerance),
              "")
        << "stale copies went unnoticed";
  }
}

// Each Table 1 app at each of its sizes on two devices equals its reference at that size.
TEST(SkeletonAppsTable1, EverySizeMatchesItsReference) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  for (const hdsm::apps::SizedRun& run : hdsm::apps::table1_apps(Scale::test)) {
    ASSERT_NE(run.app, nullptr);
    ASSERT_EQ(run.sizes.size(), 3U);
    for (std::size_t size : run.sizes) {
      SCOPED_TRACE(std::string(run.app->name) + " of " + std::to_string(size));
      const auto got = run.run_size(rt, Where{hdsm::SkeletonBackend::devices, {0, 1}}, size);
      const auto same = run.run_size(rt, Where{hdsm::SkeletonBackend::host, {}}, size);
      EXPECT_EQ(hdsm::apps::compare(got, same, run.app->tolerance), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Apps, SkeletonApps,
                         ::testing::Range<std::size_t>(0, hdsm::apps::skeleton_apps().size()),
                         [](const auto& info) {
                           return std::string(hdsm::apps::skeleton_apps()[info.param].name);
                         });

}  // namespace
