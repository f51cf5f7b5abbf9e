// MapArray (seed 001 Listing 1 and footnote 7): every element reads any elements of the array operand,
// which is replicated on every device of the call while the other operands are split; two calls in a
// loop that swap the roles of two vectors, in place, on the host and on 1 and 2 sim devices and PoCL,
// equal a loop; the array is copied to each device once per update, not per element; errors.
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "skeletons/opencl_runtime.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

// x / 2 plus the array element that x picks.
HDSM_USER_FUNCTION(ma_mix, long, (HDSM_GLOBAL const long* a, long x, long n), {
  long j = x % n;
  if (j < 0) j += n;
  return x / 2 + a[j];
})

long mix(const std::vector<long>& a, long x) {
  const long n = static_cast<long>(a.size());
  long j = x % n;
  if (j < 0) j += n;
  return x / 2 + a[static_cast<std::size_t>(j)];
}

// Listing 1: maparray1(v0, v1, v1) then maparray2(v1, v0, v0), `iterations` times; returns both.
std::pair<std::vector<long>, std::vector<long>> listing1(hdsm::Runtime& rt, hdsm::MapArray<ma_mix>& maparray,
                                                         std::size_t n, int iterations) {
  hdsm::Vector<long> v0(n, hdsm::ContainerOptions{&rt}), v1(n, hdsm::ContainerOptions{&rt});
  for (std::size_t i = 0; i < n; ++i) {
    v0(i) = static_cast<long>(i * 37 % 1001);
    v1(i) = static_cast<long>(i * 53 % 997) - 400;
  }
  const long size = static_cast<long>(n);
  for (int it = 0; it < iterations; ++it) {
    maparray(v1, v0, v1, size);  // read v0, read-write v1
    maparray(v0, v1, v0, size);  // read v1, read-write v0
  }
  std::vector<long> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = v0[i];
    b[i] = v1[i];
  }
  return {a, b};
}

std::pair<std::vector<long>, std::vector<long>> listing1_loop(std::size_t n, int iterations) {
  std::vector<long> v0(n), v1(n);
  for (std::size_t i = 0; i < n; ++i) {
    v0[i] = static_cast<long>(i * 37 % 1001);
    v1[i] = static_cast<long>(i * 53 % 997) - 400;
  }
  for (int it = 0; it < iterations; ++it) {
    for (long& x : v1) x = mix(v0, x);
    for (long& x : v0) x = mix(v1, x);
  }
  return {v0, v1};
}

TEST(MapArray, Listing1OnEveryBackendAndDeviceCount) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  constexpr std::size_t n = 20'011;
  const auto want = listing1_loop(n, 3);
  hdsm::MapArray<ma_mix> maparray;
  EXPECT_EQ(listing1(rt, maparray.backend(hdsm::SkeletonBackend::host), n, 3), want);
  maparray.backend(hdsm::SkeletonBackend::devices);
  EXPECT_EQ(listing1(rt, maparray.devices({0}), n, 3), want);
  EXPECT_EQ(listing1(rt, maparray.devices({0, 1}), n, 3), want);
}

// Two devices: each holds all of the array and its half of the output; a second call with the array
// unchanged copies nothing more of it.
TEST(MapArray, TheArrayIsReplicatedOnceOnEachDevice) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  constexpr std::size_t n = 8192;
  hdsm::Vector<long> a(n, 3, hdsm::ContainerOptions{&rt}), x(n, 5, hdsm::ContainerOptions{&rt}),
      out(n, hdsm::ContainerOptions{&rt});
  hdsm::MapArray<ma_mix> maparray;
  maparray.devices({0, 1})(out, a, x, static_cast<long>(n));
  EXPECT_EQ(out[n - 1], 5 / 2 + 3);
  EXPECT_EQ(a.stats().host_to_device_bytes, 2 * n * sizeof(long)) << "the whole array on each of two devices";
  EXPECT_EQ(x.stats().host_to_device_bytes, n * sizeof(long)) << "the input split";
  maparray.devices({0, 1})(out, a, x, static_cast<long>(n));
  EXPECT_EQ(a.stats().host_to_device_bytes, 2 * n * sizeof(long)) << "the replicas are still valid";
}

TEST(MapArray, Errors) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config());
  hdsm::Vector<long> a(10, hdsm::ContainerOptions{&rt}), x(10, hdsm::ContainerOptions{&rt}),
      y(11, hdsm::ContainerOptions{&rt});
  hdsm::MapArray<ma_mix> maparray;
  EXPECT_THROW(maparray(y, a, x, 10L), hdsm::InvalidArgument);
  try {
    maparray(a, a, x, 10L);
    FAIL() << "the array as the output was accepted";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("MapArray<ma_mix>"), std::string::npos) << e.what();
  }
}

TEST(MapArrayOnDevices, opencl) {
  std::string why;
  const std::unique_ptr<hdsm::Runtime> rt = hdsm::test::opencl_runtime(why);
  if (!rt) GTEST_SKIP() << why;
  hdsm::MapArray<ma_mix> maparray;
  EXPECT_EQ(listing1(*rt, maparray, 5000, 2), listing1_loop(5000, 2));
}

}  // namespace
