// Every Parboil-like app computes its reference output in the adsm version under every protocol
// (on poisoning sim devices, so data that was never moved shows) and in the explicit-copy version.
#include "apps/app.hpp"
#include "support/test_support.hpp"

#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>

#include <string>
#include <tuple>

namespace {

hdsm::Config app_config(const std::string& protocol, const std::string& block) {
  auto c = hdsm::test::fast_sim_config(protocol, block, "512MiB");
  c.set("HDSM_ARENA_SEGMENT", "4GiB");
  return c;
}

class Parboil : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {};

TEST_P(Parboil, AdsmAndExplicitMatchReference) {
  const auto& [name, protocol, block] = GetParam();
  const hdsm::apps::App* app = hdsm::apps::find_app(name);
  ASSERT_NE(app, nullptr);
  const hdsm::apps::Output want = app->run_reference(hdsm::apps::Scale::test);
  ASSERT_FALSE(want.values.empty());

  hdsm::Runtime rt{app_config(protocol, block)};
  const hdsm::apps::Output adsm = app->run_adsm(rt, 0, hdsm::apps::Scale::test);
  EXPECT_EQ(hdsm::apps::compare(adsm, want, app->tolerance), "") << "adsm, " << protocol;
  const hdsm::apps::Output expl = app->run_explicit(rt.device(0), hdsm::apps::Scale::test);
  EXPECT_EQ(hdsm::apps::compare(expl, want, app->tolerance), "") << "explicit";
  EXPECT_EQ(rt.device(0).memory_used(), 0u) << "the app leaked device memory";
}

INSTANTIATE_TEST_SUITE_P(
    Apps, Parboil,
    ::testing::Combine(::testing::Values("cp", "mri-q", "mri-fhd", "sad", "tpacf", "pns", "rpes"),
                       ::testing::Values("batch", "lazy", "rolling"), ::testing::Values("4KiB", "256KiB")),
    [](const auto& info) {
      std::string s = std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_" + std::get<2>(info.param);
      for (char& ch : s)
        if (ch == '-') ch = '_';
      return s;
    });

}  // namespace
