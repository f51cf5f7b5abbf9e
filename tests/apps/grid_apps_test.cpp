// The grid apps (seed 004, Table 2) on one process's executor, the baseline of `hdsm bench cluster`,
// against their references; tests/mpi/cluster_mpi_test.cpp runs them on the cluster runtime.
#include "apps/grid.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace {

class GridApps : public ::testing::TestWithParam<std::string_view> {};

TEST_P(GridApps, BaselineMatchesTheReference) {
  const hdsm::apps::GridApp* app = hdsm::apps::find_grid_app(GetParam());
  ASSERT_NE(app, nullptr);
  hdsm::apps::ProcessTarget target(2);
  EXPECT_EQ(hdsm::apps::compare(app->run(target, hdsm::apps::Scale::test),
                                app->run_reference(hdsm::apps::Scale::test), app->tolerance),
            "")
      << app->name;
}

INSTANTIATE_TEST_SUITE_P(All, GridApps,
                         ::testing::Values("cp", "mri-fhd", "tpacf", "blackscholes", "scan", "mri-q"),
                         [](const auto& info) {
                           std::string name(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(GridApps, TheListIsTheSeedsTable) {
  std::string names;
  for (const auto& app : hdsm::apps::grid_apps()) names += std::string(app.name) + " ";
  EXPECT_EQ(names, "cp mri-fhd tpacf blackscholes scan mri-q ");
  EXPECT_EQ(hdsm::apps::find_grid_app("nope"), nullptr);
}

}  // namespace
