// Splits of a call over several devices: equal parts by default, parts in proportion to given
// weights, or to the devices' speeds measured once per runtime (HDSM_SKELETON_SPLIT=measured or
// .split(hdsm::Split::measured)); every skeleton computes the same on unequal parts (halos and
// partial results included); bad weights are errors.
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace {

HDSM_USER_FUNCTION(sp_twice, long, (long x), { return 2 * x; })
HDSM_USER_FUNCTION(sp_add, long, (long a, long b), { return a + b; })
HDSM_USER_FUNCTION(sp_window, long, (const long* w, long k), { return w[-2] + k * w[0] + 3 * w[2]; })

hdsm::Config sim(unsigned devices) {
  return hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", std::to_string(devices));
}

TEST(SkeletonSplit, EqualByDefaultOrInProportionToTheWeights) {
  hdsm::Runtime rt(sim(3));
  using hdsm::detail::skeleton_parts;
  EXPECT_EQ(skeleton_parts(rt, {0, 1}, {}, 1001).bounds, (std::vector<std::size_t>{0, 500, 1001}));
  EXPECT_EQ(skeleton_parts(rt, {0, 1}, {std::nullopt, {3, 1}}, 1000).bounds,
            (std::vector<std::size_t>{0, 750, 1000}));
  EXPECT_EQ(skeleton_parts(rt, {2, 0, 1}, {std::nullopt, {1, 2, 1}}, 8).bounds,
            (std::vector<std::size_t>{0, 2, 6, 8}));
  EXPECT_EQ(skeleton_parts(rt, {1, 0}, {hdsm::Split::equal, {}}, 10).devices, (std::vector<unsigned>{1, 0}));
  EXPECT_THROW(skeleton_parts(rt, {0, 1}, {std::nullopt, {1, 2, 3}}, 10), hdsm::InvalidArgument);
  EXPECT_THROW(skeleton_parts(rt, {0, 1}, {std::nullopt, {1, 0}}, 10), hdsm::InvalidArgument);
  EXPECT_THROW(skeleton_parts(rt, {0, 1}, {std::nullopt, {1, -2}}, 10), hdsm::InvalidArgument);
}

TEST(SkeletonSplit, MeasuredSpeedsAreMeasuredOnceAndSplitByThem) {
  hdsm::Runtime rt(sim(2).set("HDSM_SKELETON_SPLIT", "measured"));
  const std::vector<double> speeds = hdsm::detail::device_speeds(rt, {0, 1});
  ASSERT_EQ(speeds.size(), 2U);
  EXPECT_GT(speeds[0], 0);
  EXPECT_GT(speeds[1], 0);
  EXPECT_EQ(hdsm::detail::device_speeds(rt, {1, 0}), (std::vector<double>{speeds[1], speeds[0]})) << "kept";
  const hdsm::detail::Parts parts = hdsm::detail::skeleton_parts(rt, {0, 1}, {}, 1'000'000);
  const double share = speeds[0] / (speeds[0] + speeds[1]);
  EXPECT_NEAR(static_cast<double>(parts.bounds[1]), share * 1e6, 1.0);
  EXPECT_EQ(parts.bounds[2], 1'000'000U);
  // A skeleton's own choice wins over the knob.
  EXPECT_EQ(hdsm::detail::skeleton_parts(rt, {0, 1}, {hdsm::Split::equal, {}}, 10).bounds,
            (std::vector<std::size_t>{0, 5, 10}));
}

// A device whose memory the containers' copies fill is measured with what fits, or not at all (an
// equal split): before, the measurement's two 8 MiB buffers, which evict nothing, made the call fail
// with OutOfDeviceMemory.
TEST(SkeletonSplit, AMeasuredSplitOnFullDevicesStillRuns) {
  hdsm::Runtime rt(sim(2).set("HDSM_SKELETON_SPLIT", "measured").set("HDSM_SIM_MEMORY", "8MiB"));
  hdsm::DeviceBuffer held[2] = {rt.device(0).alloc(8 << 20), rt.device(1).alloc((8 << 20) - (256 << 10))};
  EXPECT_TRUE(hdsm::detail::device_speeds(rt, {0, 1}).empty()) << "sim0 has no room to measure";
  EXPECT_EQ(hdsm::detail::skeleton_parts(rt, {0, 1}, {}, 10).bounds, (std::vector<std::size_t>{0, 5, 10}));
  rt.device(0).free(held[0]);
  const std::vector<double> speeds = hdsm::detail::device_speeds(rt, {0, 1});  // sim1 with 64 KiB buffers
  ASSERT_EQ(speeds.size(), 2U);
  EXPECT_GT(speeds[1], 0);
  rt.device(1).free(held[1]);
}

TEST(SkeletonSplit, EverySkeletonComputesTheSameOnUnequalParts) {
  hdsm::Runtime rt(sim(3));
  const hdsm::ContainerOptions o{&rt};
  constexpr std::size_t n = 5003;
  hdsm::Vector<long> in(n, o), twice(n, o), window(n, o), scanned(n, o);
  for (std::size_t i = 0; i < n; ++i) in(i) = static_cast<long>(i * 37 % 1001) - 500;
  const std::vector<double> weights{1, 7, 2};
  hdsm::Map<sp_twice> map;
  map.devices({0, 1, 2}).weights(weights)(twice, in);
  hdsm::Reduce<sp_add> sum;
  const long total = sum.devices({0, 1, 2}).weights(weights)(in);
  hdsm::MapOverlap<sp_window> mo;
  mo.devices({0, 1, 2}).weights(weights).overlap(2).edge(hdsm::Edge::cyclic)(window, in, 5L);
  hdsm::Scan<sp_add> scan;
  scan.devices({0, 1, 2}).weights(weights)(scanned, in);
  long want_total = 0;
  const auto at = [&](long i) {
    return in[static_cast<std::size_t>((i + static_cast<long>(n)) % static_cast<long>(n))];
  };
  for (std::size_t i = 0; i < n; ++i) {
    want_total += in[i];
    ASSERT_EQ(twice[i], 2 * in[i]) << i;
    const long k = static_cast<long>(i);
    ASSERT_EQ(window[i], at(k - 2) + 5 * at(k) + 3 * at(k + 2)) << i;
    ASSERT_EQ(scanned[i], want_total) << i;
  }
  EXPECT_EQ(total, want_total);
  // The output's device copies are the parts: n elements in all.
  EXPECT_EQ(twice.stats().device_allocated_bytes, n * sizeof(long));
}

}  // namespace
