// MapOverlap (1D) with every edge mode and radii 0 to 3: the host, 1, 2 and 3 sim devices (whose
// parts read halos from their neighbours' ranges, and the wrapped ends in cyclic mode) and PoCL equal
// a loop; a part smaller than the radius; errors.
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "skeletons/opencl_runtime.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

// A weighted sum over the window [-r, r] (weights 1, 2, ..., 2r + 1), plus k: exact in integers and
// sensitive to every element's position.
HDSM_USER_FUNCTION(mo_weigh, long, (const long* w, long r, long k), {
  long sum = k;
  for (long j = -r; j <= r; ++j) sum += (j + r + 1) * w[j];
  return sum;
})

std::vector<long> loop(const std::vector<long>& in, long r, hdsm::Edge edge, long pad, long k,
                       const std::vector<long>& before) {
  const long n = static_cast<long>(in.size());
  std::vector<long> out = before;
  for (long i = 0; i < n; ++i) {
    if (edge == hdsm::Edge::none && (i < r || i + r >= n)) continue;
    long sum = k;
    for (long j = -r; j <= r; ++j) {
      long at = i + j;
      long v = pad;
      if (at >= 0 && at < n)
        v = in[static_cast<std::size_t>(at)];
      else if (edge == hdsm::Edge::cyclic)
        v = in[static_cast<std::size_t>((at + n) % n)];
      else if (edge == hdsm::Edge::duplicate)
        v = in[at < 0 ? 0 : static_cast<std::size_t>(n - 1)];
      sum += (j + r + 1) * v;
    }
    out[static_cast<std::size_t>(i)] = sum;
  }
  return out;
}

void check(hdsm::Runtime& rt, hdsm::MapOverlap<mo_weigh>& mo, std::size_t n, long r, hdsm::Edge edge) {
  std::vector<long> data(n), old(n, -7);
  for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<long>(i * 7919 % 101) - 50;
  hdsm::Vector<long> in(data.begin(), data.end(), hdsm::ContainerOptions{&rt});
  hdsm::Vector<long> out(n, -7, hdsm::ContainerOptions{&rt});
  mo.overlap(static_cast<std::size_t>(r)).edge(edge).pad(9)(out, in, r, 3L);
  const std::vector<long> want = loop(data, r, edge, 9, 3, old);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], want[i]) << "element " << i;
}

TEST(MapOverlap, EveryEdgeModeOnEveryBackendAndDeviceCount) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "3"));
  for (const hdsm::Edge edge : {hdsm::Edge::none, hdsm::Edge::cyclic, hdsm::Edge::duplicate, hdsm::Edge::pad})
    for (const long r : {0L, 1L, 3L})
      for (const std::size_t n : {std::size_t{7}, std::size_t{10'007}}) {
        SCOPED_TRACE("edge " + std::to_string(static_cast<int>(edge)) + ", radius " + std::to_string(r) +
                     ", " + std::to_string(n) + " elements");
        hdsm::MapOverlap<mo_weigh> mo;
        check(rt, mo.backend(hdsm::SkeletonBackend::host), n, r, edge);
        mo.backend(hdsm::SkeletonBackend::devices);
        check(rt, mo.devices({0}), n, r, edge);
        check(rt, mo.devices({0, 1}), n, r, edge);
        check(rt, mo.devices({0, 1, 2}), n, r, edge);  // n = 7: parts of 2 and 3, smaller than a 3-halo
      }
}

// Steps that alternate two vectors on two devices move the halo elements between the devices and
// nothing else: a step's input part is the part the previous step wrote on that device.
TEST(MapOverlap, AlternatingStepsOnTwoDevicesMoveOnlyTheHalo) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  constexpr std::size_t n = 10'000;
  constexpr long r = 3;
  std::vector<long> data(n);
  for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<long>(i % 5) - 2;
  hdsm::Vector<long> a(data.begin(), data.end(), hdsm::ContainerOptions{&rt});
  hdsm::Vector<long> b(n, hdsm::ContainerOptions{&rt});
  hdsm::MapOverlap<mo_weigh> mo;
  mo.devices({0, 1}).overlap(r).edge(hdsm::Edge::cyclic);
  mo(b, a, r, 0L);
  mo(a, b, r, 0L);
  const hdsm::ContainerStats a0 = a.stats(), b0 = b.stats();
  constexpr int kSteps = 4;
  for (int k = 0; k < kSteps / 2; ++k) {
    mo(b, a, r, 0L);
    mo(a, b, r, 0L);
  }
  for (const auto& [v, before] : {std::pair{&a, a0}, std::pair{&b, b0}}) {
    const hdsm::ContainerStats now = v->stats();
    EXPECT_EQ(now.on_device_bytes - before.on_device_bytes, 0u);
    EXPECT_EQ(now.host_to_device_bytes - before.host_to_device_bytes, 0u);
    // Per step as input: r elements each way at the parts' border, and the cyclic r at each end.
    EXPECT_EQ(now.peer_bytes - before.peer_bytes, kSteps / 2 * 4 * r * sizeof(long));
  }
  std::vector<long> want = data;
  for (int k = 0; k < kSteps + 2; ++k) want = loop(want, r, hdsm::Edge::cyclic, 0, 0, want);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(a[i], want[i]) << "element " << i;
}

TEST(MapOverlap, Errors) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config());
  hdsm::Vector<long> a(10, hdsm::ContainerOptions{&rt}), b(11, hdsm::ContainerOptions{&rt});
  hdsm::MapOverlap<mo_weigh> mo;
  EXPECT_THROW(mo(a, b, 1L, 0L), hdsm::InvalidArgument);
  EXPECT_THROW(mo(a, a, 1L, 0L), hdsm::InvalidArgument);
  EXPECT_THROW(mo.overlap(33), hdsm::InvalidArgument);
  hdsm::Vector<long> c(2, hdsm::ContainerOptions{&rt}), d(2, hdsm::ContainerOptions{&rt});
  try {
    mo.overlap(3).edge(hdsm::Edge::cyclic)(d, c, 3L, 0L);
    FAIL() << "a cyclic radius above the size was accepted";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("MapOverlap<mo_weigh>"), std::string::npos) << e.what();
  }
}

TEST(MapOverlapOnDevices, opencl) {
  std::string why;
  const std::unique_ptr<hdsm::Runtime> rt = hdsm::test::opencl_runtime(why);
  if (!rt) GTEST_SKIP() << why;
  for (const hdsm::Edge edge :
       {hdsm::Edge::none, hdsm::Edge::cyclic, hdsm::Edge::duplicate, hdsm::Edge::pad}) {
    hdsm::MapOverlap<mo_weigh> mo;
    check(*rt, mo, 4099, 2, edge);
  }
}

}  // namespace
