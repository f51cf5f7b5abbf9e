// Reduce on every backend: integer sums identical on the host and on 1, 2 and 3 sim devices and
// equal to a loop, a minimum, floating-point sums close to a loop, PoCL, the initial value, and an
// empty vector.
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "skeletons/opencl_runtime.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <numeric>

namespace {

HDSM_USER_FUNCTION(add_i64, long, (long a, long b), { return a + b; })
HDSM_USER_FUNCTION(min_i32, int, (int a, int b), { return a < b ? a : b; })
HDSM_USER_FUNCTION(add_f64, double, (double a, double b), { return a + b; })

hdsm::Config sim(unsigned devices) {
  return hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", std::to_string(devices));
}

TEST(Reduce, IntegerSumsAreTheSameOnEveryBackendAndDeviceCount) {
  hdsm::Runtime rt(sim(3));
  constexpr std::size_t n = 123'457;
  hdsm::Vector<long> v(n, hdsm::ContainerOptions{&rt});
  for (std::size_t i = 0; i < n; ++i) v(i) = static_cast<long>(i * 7919 % 10007) - 5000;
  long expect = 0;
  for (std::size_t i = 0; i < n; ++i) expect += v(i);
  hdsm::Reduce<add_i64> sum;
  EXPECT_EQ(sum.backend(hdsm::SkeletonBackend::host)(v), expect);
  sum.backend(hdsm::SkeletonBackend::devices);
  EXPECT_EQ(sum(v), expect);
  EXPECT_EQ(sum.devices({0, 1})(v), expect);
  EXPECT_EQ(sum.devices({0, 1, 2}).chunks(7)(v), expect);
  EXPECT_EQ(sum(v, 10L), expect + 10);
  // More chunks than elements, up to SIZE_MAX: one element a chunk (the chunk size wrapped to 0 and
  // divided by it before).
  EXPECT_EQ(sum.chunks(n + 1)(v), expect);
  EXPECT_EQ(sum.chunks(SIZE_MAX)(v), expect);
}

TEST(Reduce, MinimumAndFloatingPointSums) {
  hdsm::Runtime rt(sim(2));
  const hdsm::ContainerOptions o{&rt};
  hdsm::Vector<int> v(5000, o);
  for (std::size_t i = 0; i < 5000; ++i) v(i) = static_cast<int>((i * 31) % 977) + 3;
  v[4321] = -12;
  EXPECT_EQ(hdsm::Reduce<min_i32>{}.devices({0, 1})(v), -12);
  hdsm::Vector<double> d(100'000, o);
  for (std::size_t i = 0; i < d.size(); ++i) d(i) = 1.0 / static_cast<double>(i + 1);
  double expect = 0;
  for (std::size_t i = 0; i < d.size(); ++i) expect += d(i);
  EXPECT_NEAR(hdsm::Reduce<add_f64>{}.devices({0, 1})(d), expect, 1e-9);
  EXPECT_NEAR(hdsm::Reduce<add_f64>{}.backend(hdsm::SkeletonBackend::host)(d), expect, 1e-9);
}

TEST(ReduceOnDevices, opencl) {
  std::string why;
  const std::unique_ptr<hdsm::Runtime> rt = hdsm::test::opencl_runtime(why);
  if (!rt) GTEST_SKIP() << why;
  hdsm::Vector<long> v(50'000, hdsm::ContainerOptions{rt.get()});
  for (std::size_t i = 0; i < v.size(); ++i) v(i) = static_cast<long>(i % 1000);
  long expect = 0;
  for (std::size_t i = 0; i < v.size(); ++i) expect += v(i);
  EXPECT_EQ(hdsm::Reduce<add_i64>{}(v), expect);
  hdsm::Vector<int> m(3000, hdsm::ContainerOptions{rt.get()});
  for (std::size_t i = 0; i < m.size(); ++i) m(i) = 5000 - static_cast<int>(i);
  EXPECT_EQ(hdsm::Reduce<min_i32>{}(m), 2001);
}

TEST(Reduce, AnEmptyVectorNeedsAnInitialValue) {
  hdsm::Runtime rt(sim(1));
  hdsm::Vector<long> v(0, hdsm::ContainerOptions{&rt});
  try {
    (void)hdsm::Reduce<add_i64>{}(v);
    FAIL();
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("Reduce<add_i64>"), std::string::npos) << e.what();
  }
  EXPECT_EQ(hdsm::Reduce<add_i64>{}(v, 42L), 42);
}

}  // namespace
