// Farm: independent tasks on every device of the call and on the host at once; each task runs its
// skeleton where the farm put it, the counts of tasks per place match the kernels each device ran,
// a task's exception comes back after the others finished, and a host-only farm uses no device.
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

HDSM_USER_FUNCTION(farm_scale, long, (long x, long k), { return x * k; })

TEST(Farm, TasksRunOnEveryPlaceAndTheirSkeletonsWhereTheFarmPutThem) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  constexpr std::size_t tasks = 12, n = 20'000;
  std::vector<hdsm::Vector<long>> in, out;
  for (std::size_t t = 0; t < tasks; ++t) {
    in.emplace_back(n, static_cast<long>(t + 1), hdsm::ContainerOptions{&rt});
    out.emplace_back(n, hdsm::ContainerOptions{&rt});
  }
  std::vector<hdsm::Farm::Task> work;
  for (std::size_t t = 0; t < tasks; ++t)
    work.emplace_back([&, t](const hdsm::FarmPlace& place) {
      hdsm::Map<farm_scale> map;
      place.on(map)(out[t], in[t], 3L);
      out[t].wait();
    });
  hdsm::Farm farm;
  const std::vector<std::size_t> ran = farm.devices({0, 1})(rt, work);
  ASSERT_EQ(ran.size(), 3u) << "sim0, sim1 and the host";
  EXPECT_EQ(std::accumulate(ran.begin(), ran.end(), std::size_t{0}), tasks);
  const hdsm::Stats s = rt.stats();
  EXPECT_EQ(s.devices[0].kernel_launches, ran[0]);
  EXPECT_EQ(s.devices[1].kernel_launches, ran[1]);
  for (std::size_t t = 0; t < tasks; ++t) EXPECT_EQ(out[t][n - 1], static_cast<long>(3 * (t + 1))) << t;
}

TEST(Farm, ATasksExceptionComesBackAfterTheOthersFinished) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config());
  std::atomic<int> done{0};
  std::vector<hdsm::Farm::Task> work;
  for (int t = 0; t < 9; ++t)
    work.emplace_back([&, t](const hdsm::FarmPlace&) {
      if (t == 4) throw std::runtime_error("task 4 failed");
      ++done;
    });
  try {
    hdsm::Farm{}(rt, work);
    FAIL() << "the failure was lost";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "task 4 failed");
  }
  EXPECT_EQ(done.load(), 8);
}

TEST(Farm, AHostOnlyFarmUsesNoDevice) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config());
  std::vector<hdsm::Farm::Task> work(
      5, [](const hdsm::FarmPlace& p) { EXPECT_EQ(p.backend, hdsm::SkeletonBackend::host); });
  hdsm::Farm farm;
  EXPECT_EQ(farm.backend(hdsm::SkeletonBackend::host)(rt, work), std::vector<std::size_t>{5});
  EXPECT_EQ(rt.stats().kernel_launches, 0u);
  EXPECT_EQ(hdsm::Farm{}.host(false)(rt, {}), std::vector<std::size_t>{0}) << "the default device alone";
}

}  // namespace
