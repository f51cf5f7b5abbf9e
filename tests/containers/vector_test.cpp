// hdsm::Vector and hdsm::Matrix on sim devices: the std::vector interface, element proxies, kernels
// on whole containers and parts, the copies each access makes (the seed's Fig. 2 walkthrough), both
// mechanisms on the seed's two consistency scenarios, eviction under memory pressure, and bad input.
#include <hdsm/hdsm.hpp>

#include "support/death_style.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <list>
#include <memory>
#include <numeric>
#include <ranges>
#include <sstream>
#include <thread>
#include <vector>

namespace {

using hdsm::Access;
using hdsm::Vector;

hdsm::Config sim(unsigned devices = 2, const char* peers = "all", const char* memory = "64MiB") {
  return hdsm::test::fast_sim_config("rolling", "4KiB", memory)
      .set("HDSM_SIM_DEVICES", std::to_string(devices))
      .set("HDSM_SIM_PEER", peers);
}

/// p[i] = p[i] * a + b
const hdsm::Kernel& axpb() {
  static const hdsm::Kernel k =
      hdsm::per_thread("axpb", [](const hdsm::Thread& t, float* p, std::uint64_t n, float a, float b) {
        if (const auto i = t.global_x(); i < n) p[i] = p[i] * a + b;
      });
  return k;
}
/// p[i] = value
const hdsm::Kernel& fill() {
  static const hdsm::Kernel k =
      hdsm::per_thread("fill", [](const hdsm::Thread& t, float* p, std::uint64_t n, float v) {
        if (const auto i = t.global_x(); i < n) p[i] = v;
      });
  return k;
}
/// out[i] = in[i] + in[i]
const hdsm::Kernel& twice() {
  static const hdsm::Kernel k =
      hdsm::per_thread("twice", [](const hdsm::Thread& t, const float* in, float* out, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) out[i] = in[i] + in[i];
      });
  return k;
}

/// Sleeps `ms` milliseconds in thread 0, then p[0] += 1.
const hdsm::Kernel& slow() {
  static const hdsm::Kernel k =
      hdsm::per_thread("slow", [](const hdsm::Thread& t, float* p, std::uint64_t ms) {
        if (t.global_x() == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(ms));
          p[0] += 1;
        }
      });
  return k;
}

hdsm::ContainerOptions on(hdsm::Runtime& rt, hdsm::Mechanism m = hdsm::Mechanism::improved) {
  return {&rt, false, m};
}

TEST(Vector, HasTheInterfaceOfStdVector) {
  hdsm::Runtime rt(sim());
  Vector<int> a(4, on(rt));
  EXPECT_EQ(a.size(), 4u);
  EXPECT_EQ(a[3], 0) << "value-initialized";
  Vector<int> b(3, 7, on(rt));
  EXPECT_EQ(b[2], 7);
  Vector<int> c({1, 2, 3}, on(rt));
  EXPECT_EQ(c[1], 2);
  const std::vector<int> src{5, 6, 7, 8};
  Vector<int> d(src.begin(), src.end(), on(rt));
  EXPECT_EQ(d.size(), 4u);
  EXPECT_EQ(d[3], 8);
  d.push_back(9);
  EXPECT_EQ(d.size(), 5u);
  EXPECT_EQ(d.back(), 9);
  d.erase(d.begin() + 1, d.begin() + 3);
  EXPECT_EQ(std::vector<int>(d.data(), d.data() + d.size()), (std::vector<int>{5, 8, 9}));
  d.resize(5, 1);
  EXPECT_EQ(d[4], 1);
  d.resize(2);
  EXPECT_EQ(d.size(), 2u);
  int sum = 0;
  for (auto it = d.begin(); it != d.end(); ++it) sum += *it;
  EXPECT_EQ(sum, 13);
  EXPECT_EQ(std::accumulate(c.begin(), c.end(), 0), 6);
  c.swap(d);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(d.size(), 3u);
  d.clear();
  EXPECT_TRUE(d.empty());
  Vector<int> e = c;
  e[0] = 100;
  EXPECT_EQ(c[0], 5) << "a copy is deep";
  // Read-only iteration over a const vector, as over a std::vector, after a kernel wrote it.
  Vector<float> k(5, 1.0f, on(rt));
  hdsm::launch(0, axpb(), hdsm::cover(k.size()), hdsm::inout(k), std::uint64_t{k.size()}, 3.0f, 0.0f);
  const Vector<float>& ck = k;
  float total = 0;
  for (const float x : ck) total += x;
  EXPECT_EQ(total, 15.0f);
  EXPECT_EQ(std::accumulate(ck.cbegin(), ck.cend(), 0.0f), 15.0f);
  // From input iterators (one pass, element by element) and converting ones.
  std::istringstream words("3 1 4 1 5");
  Vector<int> f(std::istream_iterator<int>(words), std::istream_iterator<int>(), on(rt));
  EXPECT_EQ(std::vector<int>(f.data(), f.data() + f.size()), (std::vector<int>{3, 1, 4, 1, 5}));
  const std::list<double> halves{0.5, 1.5, 2.5};
  Vector<int> g(halves.begin(), halves.end(), on(rt));
  EXPECT_EQ(std::vector<int>(g.data(), g.data() + g.size()), (std::vector<int>{0, 1, 2}));
  // push_back after a kernel used the vector (its copy is written back), and again once none is left.
  Vector<float> h(3, 1.0f, on(rt));
  hdsm::launch(0, axpb(), hdsm::cover(h.size()), hdsm::inout(h), std::uint64_t{h.size()}, 2.0f, 1.0f);
  h.push_back(7.0f);
  EXPECT_EQ(std::vector<float>(h.data(), h.data() + h.size()), (std::vector<float>{3, 3, 3, 7}));
  for (int i = 0; i < 1000; ++i) h.push_back(static_cast<float>(i));
  EXPECT_EQ(h.size(), 1004u);
  EXPECT_EQ(h[1003], 999.0f);
}

// A Vector's iterators are C++20 random-access iterators whose reference is the element proxy, so the
// std::ranges algorithms take them: each element access is a proxy's (checked, coherent) access.
static_assert(std::ranges::random_access_range<Vector<int>>);
static_assert(std::ranges::sized_range<Vector<int>>);
static_assert(std::sortable<Vector<int>::iterator>);
static_assert(std::ranges::contiguous_range<const Vector<int>>);

// The element's operators on the proxy, each a read-write of the element: postfix ++ and -- give the
// value before (they did not compile, nor %=, &=, |=, ^=, <<=, >>=).
TEST(Vector, ProxiesHaveTheElementsOperators) {
  hdsm::Runtime rt(sim());
  Vector<int> v({5, 5, 12, 6}, on(rt));
  EXPECT_EQ(v[0]++, 5);
  EXPECT_EQ(v[0], 6);
  EXPECT_EQ(v[1]--, 5);
  EXPECT_EQ(v[1], 4);
  v[2] %= 5;   // 2
  v[2] |= 8;   // 10
  v[2] ^= 3;   // 9
  v[2] &= 13;  // 9
  EXPECT_EQ(v[2], 9);
  v[3] <<= 2;
  v[3] >>= 1;
  EXPECT_EQ(v[3], 12);
  // After a kernel wrote the element on the device, the operator reads the kernel's value.
  Vector<float> w(2, 1.0f, on(rt));
  hdsm::launch(0, axpb(), hdsm::cover(w.size()), hdsm::inout(w), std::uint64_t{w.size()}, 2.0f, 1.0f);
  EXPECT_EQ(w[0]++, 3.0f);
  EXPECT_EQ(w[0], 4.0f);
}

TEST(Vector, StdRangesAlgorithmsWorkOnItAndSeeKernelResults) {
  hdsm::Runtime rt(sim());
  Vector<float> v(6, on(rt));
  std::ranges::fill(v, 2.0f);
  hdsm::launch(0, axpb(), hdsm::cover(v.size()), hdsm::inout(v.range(0, 3)), std::uint64_t{3}, 3.0f, 1.0f);
  // The kernel wrote elements 0-2 on the device: the algorithms read them through the proxies.
  std::ranges::sort(v);
  EXPECT_EQ(std::vector<float>(v.begin(), v.end()), (std::vector<float>{2, 2, 2, 7, 7, 7}));
  std::ranges::reverse(v);
  EXPECT_EQ(std::ranges::find(v, 2.0f) - v.begin(), 3);
  std::ranges::transform(v, v.begin(), [](float x) { return x + 1; });
  std::vector<float> copied(v.size());
  std::ranges::copy(v, copied.begin());
  EXPECT_EQ(copied, (std::vector<float>{8, 8, 8, 3, 3, 3}));
  // And a kernel after them sees what they wrote.
  hdsm::launch(0, axpb(), hdsm::cover(v.size()), hdsm::inout(v), std::uint64_t{v.size()}, 2.0f, 0.0f);
  EXPECT_EQ(std::ranges::count(v, 16.0f), 3);
  EXPECT_EQ(*std::ranges::min_element(v), 6.0f);
}

// A container alive when its runtime ends is orphaned: its destructor, later, says so and touches
// nothing of the runtime's (before, it crashed with no word). exit() under live containers, which
// ends the default runtime and never destroys them, is quiet and keeps its exit code.
TEST(Vector, AContainerOutlivingItsRuntimeSaysSoWhenDestroyed) {
  auto rt = std::make_unique<hdsm::Runtime>(sim());
  auto v = std::make_unique<Vector<float>>(1000, 1.0f, on(*rt));
  hdsm::launch(0, axpb(), hdsm::cover(v->size()), hdsm::inout(*v), std::uint64_t{v->size()}, 2.0f, 1.0f);
  rt.reset();
  testing::internal::CaptureStderr();
  v.reset();
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("the vector of 1000 elements of 4 B outlived its hdsm::Runtime"), std::string::npos)
      << said;
}

// Any use of such a container is refused with an error naming it (before, a read crashed where
// the newest copy had been on a device, and returned stale data otherwise).
TEST(Vector, AContainerOutlivingItsRuntimeRefusesEveryUse) {
  for (const bool on_device : {true, false}) {
    SCOPED_TRACE(on_device ? "newest copy on a device" : "host copy current");
    auto rt = std::make_unique<hdsm::Runtime>(sim());
    auto v = std::make_unique<Vector<float>>(1000, 1.0f, on(*rt));
    if (on_device)
      hdsm::launch(0, axpb(), hdsm::cover(v->size()), hdsm::inout(*v), std::uint64_t{v->size()}, 2.0f, 1.0f);
    else
      EXPECT_EQ((*v)[3], 1.0f);
    rt.reset();
    const auto refused = [](auto&& use) {
      try {
        use();
      } catch (const hdsm::Unsupported& e) {
        return std::string(e.what()).find("the vector of 1000 elements of 4 B outlived its hdsm::Runtime") !=
               std::string::npos;
      }
      return false;
    };
    EXPECT_TRUE(refused([&] { (void)static_cast<float>((*v)[3]); })) << "an element read";
    EXPECT_TRUE(refused([&] { (*v)[3] = 2.0f; })) << "an element write";
    EXPECT_TRUE(refused([&] { v->flush(); })) << "flush";
    EXPECT_TRUE(refused([&] { v->resize(10); })) << "resize";
    EXPECT_TRUE(refused([&] {
      hdsm::launch(0, axpb(), hdsm::cover(v->size()), hdsm::inout(*v), std::uint64_t{v->size()}, 2.0f, 1.0f);
    })) << "a launch on it (a skeleton's way too)";
    testing::internal::CaptureStderr();
    v.reset();
    (void)testing::internal::GetCapturedStderr();
  }
}

TEST(VectorDeathTest, ExitUnderALiveContainerKeepsItsCode) {
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_EXIT(
      {
        Vector<float> v(1000, 1.0f);  // the default runtime's
        v[0] = 2.0f;
        std::exit(3);
      },
      ::testing::ExitedWithCode(3), "");
}

TEST(Vector, ProxiesTellReadsWritesAndReadWrites) {
  hdsm::Runtime rt(sim(1));
  Vector<float> v(8, 1.0f, on(rt));
  hdsm::launch(0, axpb(), hdsm::cover(8), hdsm::inout(v), std::uint64_t{8}, 2.0f, 1.0f);
  hdsm::reset_container_stats(rt);
  v[0] = 5.0f;  // a write of [0,1): the rest of the modified copy goes back, nothing of [0,1)
  EXPECT_EQ(hdsm::container_stats(rt).device_to_host_bytes, 7 * sizeof(float));
  EXPECT_EQ(v[1], 3.0f);
  v[2] += 1.0f;
  EXPECT_EQ(v[2], 4.0f);
  EXPECT_EQ(v(0), 5.0f) << "unchecked access after the main copy is current";
  const Vector<float>& cv = v;
  EXPECT_EQ(cv[0], 5.0f);
}

TEST(Vector, KernelsOnWholeVectorsAndRanges) {
  hdsm::Runtime rt(sim(2));
  constexpr std::size_t n = 1000;
  Vector<float> v(n, 1.0f, on(rt));
  Vector<float> w(n, on(rt));
  hdsm::launch(0, axpb(), hdsm::cover(n), hdsm::inout(v), std::uint64_t{n}, 3.0f, 0.0f);
  hdsm::launch(1, axpb(), hdsm::cover(n / 2), hdsm::inout(v.begin() + n / 2, v.end()), std::uint64_t{n / 2},
               1.0f, 1.0f);
  hdsm::launch(0, twice(), hdsm::cover(n), hdsm::in(v), hdsm::out(w), std::uint64_t{n});
  for (std::size_t i = 0; i < n; ++i) {
    const float expect = i < n / 2 ? 3.0f : 4.0f;
    ASSERT_EQ(v[i], expect) << i;
    ASSERT_EQ(w[i], 2 * expect) << i;
  }
}

TEST(Vector, TheSeedsWalkthroughMakesTwoCopiesInsteadOfSeven) {
  hdsm::Runtime rt(sim(1));
  constexpr std::size_t n = 64;
  Vector<float> v(n, on(rt));
  Vector<float> w(n, on(rt));
  hdsm::launch(0, fill(), hdsm::cover(n), hdsm::out(v), std::uint64_t{n}, 2.0f);  // write only: no copy
  EXPECT_EQ(v[5], 2.0f);                                                          // one copy back
  hdsm::launch(0, axpb(), hdsm::cover(n), hdsm::inout(v), std::uint64_t{n}, 1.0f, 1.0f);
  hdsm::launch(0, twice(), hdsm::cover(n), hdsm::in(v), hdsm::out(w), std::uint64_t{n});
  hdsm::launch(0, twice(), hdsm::cover(n), hdsm::in(v), hdsm::out(w), std::uint64_t{n});
  v[3] = 0.0f;  // the rest of the modified copy goes back
  const hdsm::ContainerStats s = v.stats();
  EXPECT_EQ(s.host_to_device_bytes, 0u);
  EXPECT_EQ(s.write_backs, 2u);
  EXPECT_EQ(s.device_allocations, 1u);
  EXPECT_EQ(v[4], 3.0f);
  EXPECT_EQ(v[3], 0.0f);
}

/// The seed's first scenario on one device: read all, write the last half, read all.
std::vector<float> scenario_one(hdsm::Mechanism m) {
  hdsm::Runtime rt(sim(1));
  Vector<float> v(10, 1.0f, on(rt, m));
  Vector<float> w(10, on(rt, m));
  hdsm::launch(0, twice(), hdsm::cover(10), hdsm::in(v), hdsm::out(w), std::uint64_t{10});
  hdsm::launch(0, fill(), hdsm::cover(5), hdsm::out(v.begin() + 5, v.end()), std::uint64_t{5}, 7.0f);
  hdsm::launch(0, twice(), hdsm::cover(10), hdsm::in(v), hdsm::out(w), std::uint64_t{10});
  return {w.data(), w.data() + 10};
}

TEST(VectorMechanisms, ScenarioOneInitialReadsStaleDataImprovedDoesNot) {
  const std::vector<float> right{2, 2, 2, 2, 2, 14, 14, 14, 14, 14};
  EXPECT_EQ(scenario_one(hdsm::Mechanism::improved), right);
  EXPECT_NE(scenario_one(hdsm::Mechanism::initial), right);
}

/// part[i] += all[(first + i + 1) % total]: `all` is read at any index (replicated), `part` is split.
const hdsm::Kernel& maparray() {
  static const hdsm::Kernel k =
      hdsm::per_thread("maparray", [](const hdsm::Thread& t, const float* all, float* part,
                                      std::uint64_t first, std::uint64_t n, std::uint64_t total) {
        if (const auto i = t.global_x(); i < n) part[i] += all[(first + i + 1) % total];
      });
  return k;
}

/// The seed's second scenario: two vectors, each in turn read whole on both devices and updated in
/// halves, one half per device.
std::vector<float> scenario_two(hdsm::Mechanism m, int iterations) {
  hdsm::Runtime rt(sim(2));
  constexpr std::size_t n = 10;
  Vector<float> v0(n, on(rt, m));
  Vector<float> v1(n, on(rt, m));
  for (std::size_t i = 0; i < n; ++i) {
    v0[i] = static_cast<float>(i);
    v1[i] = static_cast<float>(100 + i);
  }
  const auto step = [&](Vector<float>& all, Vector<float>& part) {
    for (unsigned d = 0; d < 2; ++d)
      hdsm::launch(d, maparray(), hdsm::cover(n / 2), hdsm::in(all),
                   hdsm::inout(part.range(d * n / 2, n / 2)), std::uint64_t{d * n / 2}, std::uint64_t{n / 2},
                   std::uint64_t{n});
  };
  for (int it = 0; it < iterations; ++it) {
    step(v0, v1);
    step(v1, v0);
  }
  std::vector<float> out(v0.data(), v0.data() + n);
  out.insert(out.end(), v1.data(), v1.data() + n);
  return out;
}

std::vector<float> scenario_two_reference(int iterations) {
  constexpr std::size_t n = 10;
  std::vector<float> v0(n), v1(n);
  for (std::size_t i = 0; i < n; ++i) {
    v0[i] = static_cast<float>(i);
    v1[i] = static_cast<float>(100 + i);
  }
  for (int it = 0; it < iterations; ++it) {
    std::vector<float> a = v0;
    for (std::size_t i = 0; i < n; ++i) v1[i] += a[(i + 1) % n];
    std::vector<float> b = v1;
    for (std::size_t i = 0; i < n; ++i) v0[i] += b[(i + 1) % n];
  }
  std::vector<float> out = v0;
  out.insert(out.end(), v1.begin(), v1.end());
  return out;
}

TEST(VectorMechanisms, ScenarioTwoOnTwoDevicesInitialReadsStaleFullCopies) {
  EXPECT_EQ(scenario_two(hdsm::Mechanism::improved, 3), scenario_two_reference(3));
  EXPECT_EQ(scenario_two(hdsm::Mechanism::initial, 1), scenario_two_reference(1))
      << "first iteration is right";
  EXPECT_NE(scenario_two(hdsm::Mechanism::initial, 3), scenario_two_reference(3));
}

TEST(VectorMechanisms, TheKnobSetsTheDefault) {
  hdsm::Runtime rt(sim(1).set("HDSM_CONTAINER_MECHANISM", "initial"));
  Vector<float> v(4, hdsm::ContainerOptions{&rt});
  EXPECT_EQ(v.mechanism(), hdsm::Mechanism::initial);
  Vector<float> w(4, on(rt, hdsm::Mechanism::improved));
  EXPECT_EQ(w.mechanism(), hdsm::Mechanism::improved);
}

TEST(VectorMemory, AWorkingSetOfOneAndAHalfDevicesIsEvictedWithoutLoss) {
  hdsm::Runtime rt(sim(1, "all", "1MiB"));
  constexpr std::size_t n = 64 * 1024;  // 256 KiB each, six of them
  std::vector<Vector<float>> vs;
  for (int k = 0; k < 6; ++k) vs.emplace_back(n, static_cast<float>(k), on(rt));
  for (int round = 0; round < 3; ++round)
    for (auto& v : vs) hdsm::launch(0, axpb(), hdsm::cover(n), hdsm::inout(v), std::uint64_t{n}, 1.0f, 1.0f);
  for (int k = 0; k < 6; ++k) {
    const float* p = vs[k].data();
    for (std::size_t i = 0; i < n; i += 997) ASSERT_EQ(p[i], static_cast<float>(k + 3)) << k << " " << i;
  }
  const hdsm::ContainerStats s = hdsm::container_stats(rt);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_GE(s.write_backs, s.evictions) << "every evicted copy was modified";
}

TEST(VectorMemory, AnAccessLargerThanTheDeviceFailsAndLosesNothing) {
  hdsm::Runtime rt(sim(1, "all", "1MiB"));
  Vector<float> big(512 * 1024, 2.0f, on(rt));
  EXPECT_THROW(hdsm::launch(0, axpb(), hdsm::cover(512 * 1024), hdsm::inout(big), std::uint64_t{512 * 1024},
                            1.0f, 1.0f),
               hdsm::OutOfDeviceMemory);
  EXPECT_EQ(big[100], 2.0f);
  hdsm::launch(0, axpb(), hdsm::cover(1024), hdsm::inout(big.range(0, 1024)), std::uint64_t{1024}, 1.0f,
               1.0f);
  EXPECT_EQ(big[100], 3.0f);
  EXPECT_EQ(big[2000], 2.0f);
}

TEST(VectorMemory, ACopyInUseByACallInFlightIsEvictedOnlyAfterTheCall) {
  hdsm::Runtime rt(sim(1, "all", "1MiB"));
  Vector<float> busy(128 * 1024, 1.0f, on(rt));  // 512 KiB
  Vector<float> next(160 * 1024, 1.0f, on(rt));  // 640 KiB: both do not fit
  hdsm::launch(0, slow(), hdsm::cover(1), hdsm::inout(busy), std::uint64_t{200});
  hdsm::launch(0, axpb(), hdsm::cover(160 * 1024), hdsm::inout(next), std::uint64_t{160 * 1024}, 2.0f, 0.0f);
  EXPECT_EQ(busy[0], 2.0f) << "the slow call's write survived the eviction of its copy";
  EXPECT_EQ(busy[1], 1.0f);
  EXPECT_EQ(next[5], 2.0f);
  EXPECT_EQ(busy.stats().evictions, 1u);
}

TEST(VectorMemory, APinnedMainCopyWorksLikeAPageableOne) {
  hdsm::Runtime rt(sim(2, "none"));
  Vector<float> v(4096, 1.0f, hdsm::ContainerOptions{&rt, true});
  EXPECT_TRUE(v.core().pinned());
  hdsm::launch(0, axpb(), hdsm::cover(4096), hdsm::inout(v), std::uint64_t{4096}, 2.0f, 1.0f);
  hdsm::launch(1, axpb(), hdsm::cover(4096), hdsm::inout(v), std::uint64_t{4096}, 2.0f, 1.0f);
  EXPECT_EQ(v[4095], 7.0f);
  v.resize(8192, 2.0f);
  EXPECT_EQ(v[8191], 2.0f);
  EXPECT_EQ(v[0], 7.0f);
}

TEST(VectorMechanisms, TheStatisticsShowWhatEachMechanismAllocates) {
  // A host write between device reads: the initial mechanism frees every device copy and allocates
  // it again; the improved one invalidates and reuses it.
  const auto allocations = [](hdsm::Mechanism m) {
    hdsm::Runtime rt(sim(1));
    Vector<float> v(256, 1.0f, on(rt, m));
    Vector<float> w(256, on(rt, m));
    for (int round = 0; round < 4; ++round) {
      hdsm::launch(0, twice(), hdsm::cover(256), hdsm::in(v), hdsm::out(w), std::uint64_t{256});
      v[round] = static_cast<float>(round);
    }
    EXPECT_EQ(w[3], 2.0f);
    return v.stats().device_allocations;
  };
  EXPECT_EQ(allocations(hdsm::Mechanism::improved), 1u);
  EXPECT_EQ(allocations(hdsm::Mechanism::initial), 4u);
}

// Mechanism::none keeps nothing on the device between calls: every call uploads its inputs, writes
// its results back and frees its device copies, and the results are the same.
TEST(Vector, TheNoneMechanismCopiesEveryOperandForEveryCall) {
  hdsm::Runtime rt(sim(1));
  Vector<float> v(256, 1.0f, on(rt, hdsm::Mechanism::none));
  Vector<float> w(256, on(rt, hdsm::Mechanism::none));
  for (int round = 0; round < 4; ++round)
    hdsm::launch(0, twice(), hdsm::cover(256), hdsm::in(v), hdsm::out(w), std::uint64_t{256});
  EXPECT_EQ(w[3], 2.0f);
  EXPECT_EQ(v.stats().device_allocations, 4u);
  EXPECT_EQ(v.stats().host_to_device_bytes, 4 * 256 * sizeof(float)) << "the input went up for every call";
  EXPECT_EQ(w.stats().device_to_host_bytes, 4 * 256 * sizeof(float))
      << "the output came back after every call";
  EXPECT_EQ(rt.device(0).memory_used(), 0u) << "no device copy is left";
}

TEST(Vector, AResizeWritesBackAndDropsTheDeviceCopies) {
  hdsm::Runtime rt(sim(1));
  Vector<float> v(100, 1.0f, on(rt));
  hdsm::launch(0, axpb(), hdsm::cover(100), hdsm::inout(v), std::uint64_t{100}, 1.0f, 1.0f);
  v.wait();
  EXPECT_EQ(v.core().device_copies(), 1u);
  v.resize(150);
  EXPECT_EQ(v.core().device_copies(), 0u);
  EXPECT_EQ(v[99], 2.0f);
  EXPECT_EQ(v[149], 0.0f);
}

TEST(Vector, HdsmCallTakesContainersOnTheDefaultDevice) {
  hdsm::Runtime rt(sim(2));
  Vector<float> v(64, 1.0f, on(rt));
  auto k =
      hdsm::per_thread("typed_axpb", [](const hdsm::Thread& t, float* p, std::uint64_t n, float a, float b) {
        if (const auto i = t.global_x(); i < n) p[i] = p[i] * a + b;
      });
  rt.call(k, hdsm::cover(64), hdsm::inout(v), 64, 3.0f, 1.0f);  // 64 and 1.0f convert at compile time
  EXPECT_EQ(v[63], 4.0f);
  rt.call(axpb(), hdsm::cover(32), hdsm::inout(v.begin(), v.begin() + 32), std::uint64_t{32}, 1.0f, 1.0f);
  EXPECT_EQ(v[31], 5.0f);
  EXPECT_EQ(v[32], 4.0f);
}

/// out[i] = in[i] + 1
const hdsm::Kernel& shifted() {
  static const hdsm::Kernel k =
      hdsm::per_thread("shifted", [](const hdsm::Thread& t, float* out, const float* in, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) out[i] = in[i] + 1.0f;
      });
  return k;
}

TEST(VectorLaunch, ALaunchThatFailsChangesNoContainer) {
  hdsm::Runtime rt(sim(1, "all", "1MiB"));
  Vector<float> a(192 * 1024, 3.0f, on(rt));  // 768 KiB
  Vector<float> b(128 * 1024, 1.0f, on(rt));  // 512 KiB: both do not fit
  EXPECT_THROW(hdsm::launch(0, shifted(), hdsm::cover(1024), hdsm::out(a), hdsm::in(b), std::uint64_t{1024}),
               hdsm::OutOfDeviceMemory);
  EXPECT_EQ(a[0], 3.0f) << "the out() operand was not taken as written";
  EXPECT_EQ(a[192 * 1024 - 1], 3.0f);
  Vector<float> other(16, on(rt));
  hdsm::Runtime rt2(sim(1));
  Vector<float> foreign(16, hdsm::ContainerOptions{&rt2});
  EXPECT_THROW(
      hdsm::launch(0, shifted(), hdsm::cover(16), hdsm::out(other), hdsm::in(foreign), std::uint64_t{16}),
      hdsm::InvalidArgument);
  EXPECT_EQ(other[3], 0.0f);
}

TEST(VectorLaunch, ReadsAreMadeCurrentBeforeTheKernelsWrites) {
  hdsm::Runtime rt(sim(1));
  Vector<float> v(64, on(rt));
  for (std::size_t i = 0; i < 64; ++i) v[i] = static_cast<float>(i);
  // The written part comes first: the read of all of v must still come from v's current contents.
  hdsm::launch(0, shifted(), hdsm::cover(10), hdsm::out(v.range(0, 10)), hdsm::in(v), std::uint64_t{10});
  for (std::size_t i = 0; i < 10; ++i) ASSERT_EQ(v[i], static_cast<float>(i) + 1.0f) << i;
  EXPECT_EQ(v[10], 10.0f);
}

TEST(VectorDeviceView, AnOpenViewKeepsItsCopy) {
  hdsm::Runtime rt(sim(1));
  Vector<float> v(64, 1.0f, on(rt));
  hdsm::DeviceView view = v.device_view(0, 0, 64, Access::read_write);
  EXPECT_THROW(v.flush(), hdsm::InvalidArgument);
  EXPECT_THROW(v.resize(10), hdsm::InvalidArgument);
  const hdsm::KernelArg args[] = {view.argument(), hdsm::KernelArg::value(std::uint64_t{64}),
                                  hdsm::KernelArg::value(2.0f), hdsm::KernelArg::value(0.0f)};
  view.queue().launch(axpb(), hdsm::cover(64), args);
  view.done(view.queue().record());
  EXPECT_EQ(v[63], 2.0f) << "the view's copy is the modified one after done()";
  v.flush();
  EXPECT_EQ(v.core().device_copies(), 0u);
}

// Under the none mechanism a view's copy goes at done(), as a launch's copies go after it: left on
// the device, modified, it was written back over a later launch's result when the copy ids fell
// that way (here: after a launch on device 0 that made and freed two copies).
TEST(VectorDeviceView, UnderTheNoneMechanismAViewsCopyGoesAtDone) {
  hdsm::Runtime rt(sim(2));
  Vector<float> v(64, 1.0f, hdsm::ContainerOptions{&rt, false, hdsm::Mechanism::none});
  hdsm::launch(0, axpb(), hdsm::cover(32), hdsm::inout(v.range(0, 32)), std::uint64_t{32}, 1.0f, 0.0f);
  hdsm::launch(0, axpb(), hdsm::cover(32), hdsm::inout(v.range(32, 32)), std::uint64_t{32}, 1.0f, 0.0f);
  {
    hdsm::DeviceView view = v.device_view(1, 0, 64, Access::read_write);
    view.done(view.queue().record());  // no kernel: the contents stay as they are
  }
  EXPECT_EQ(v.core().device_copies(), 0u) << "the none mechanism keeps no copy after a use";
  hdsm::launch(1, axpb(), hdsm::cover(1), hdsm::inout(v.range(0, 1)), std::uint64_t{1}, 3.0f, 4.0f);
  EXPECT_EQ(v[0], 7.0f) << "the launch's result";
  EXPECT_EQ(v[1], 1.0f);
}

TEST(VectorAsync, AHostAccessWaitsOnlyForConflictingCalls) {
  hdsm::Runtime rt(sim(2));
  Vector<float> v0(16, 1.0f, on(rt));
  Vector<float> v1(16, 1.0f, on(rt));
  hdsm::launch(0, axpb(), hdsm::cover(16), hdsm::inout(v0), std::uint64_t{16}, 2.0f, 0.0f);
  v0.wait();  // v0's own call is done; its result is still only on the device
  const auto begin = std::chrono::steady_clock::now();
  hdsm::launch(1, slow(), hdsm::cover(1), hdsm::inout(v1), std::uint64_t{600});
  EXPECT_EQ(v0[3], 2.0f);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_LT(took, 0.4) << "reading v0 waited for the call on v1";
  EXPECT_EQ(v1[0], 2.0f) << "reading v1 waits for its call";
}

TEST(VectorErrors, BadInputIsATypedErrorNamingTheContainer) {
  hdsm::Runtime rt(sim(2));
  Vector<float> v(10, on(rt));
  try {
    (void)static_cast<float>(v[10]);
    FAIL();
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "element read: elements [10, 11) outside the vector of 10 elements of 4 B");
  }
  // Ranges whose end wraps, reversed erases and pop_back of an empty vector say what they are.
  try {
    (void)v.range(SIZE_MAX, 2);
    FAIL();
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("2 elements from element 18446744073709551615"), std::string::npos)
        << e.what();
  }
  try {
    v.erase(v.begin() + 5, v.begin() + 3);
    FAIL();
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("[5, 3)"), std::string::npos) << e.what();
  }
  Vector<float> empty(0, on(rt));
  try {
    empty.pop_back();
    FAIL();
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("pop_back of an empty vector"), std::string::npos) << e.what();
  }
  EXPECT_THROW(v.range(8, 3), hdsm::InvalidArgument);
  EXPECT_THROW(v.host_range(11, 0, Access::read), hdsm::InvalidArgument);
  EXPECT_THROW(hdsm::launch(5, fill(), hdsm::cover(10), hdsm::out(v), std::uint64_t{10}, 1.0f),
               hdsm::InvalidArgument);
  EXPECT_THROW(v.device_view(2, 0, 1, Access::read), hdsm::InvalidArgument);
  EXPECT_EQ(v.stats().device_allocations, 0u) << "no state change";
  // A resize waits for the call in flight on the vector (it threw before, or not, by timing).
  hdsm::launch(0, slow(), hdsm::cover(1), hdsm::inout(v), std::uint64_t{300});
  v.resize(20);
  EXPECT_EQ(v.size(), 20u);
  EXPECT_EQ(v[0], 1.0f);
  Vector<float> moved = std::move(v);
  EXPECT_EQ(moved[0], 1.0f);
  EXPECT_THROW((void)v.stats(), hdsm::InvalidArgument);                 // NOLINT(bugprone-use-after-move)
  EXPECT_THROW((void)v.data(), hdsm::InvalidArgument);                  // NOLINT(bugprone-use-after-move)
  EXPECT_THROW((void)static_cast<float>(v[0]), hdsm::InvalidArgument);  // NOLINT(bugprone-use-after-move)
}

TEST(VectorMoves, AMoveKeepsTheDeviceCopies) {
  hdsm::Runtime rt(sim(1));
  Vector<float> v(100, 1.0f, on(rt));
  hdsm::launch(0, axpb(), hdsm::cover(100), hdsm::inout(v), std::uint64_t{100}, 1.0f, 1.0f);
  Vector<float> w = std::move(v);
  EXPECT_EQ(w.core().device_copies(), 1u);
  EXPECT_EQ(w[50], 2.0f);
}

TEST(VectorDiscard, ADiscardedRangeIsNotWrittenBack) {
  hdsm::Runtime rt(sim(2, "none"));
  Vector<float> v(100, 1.0f, on(rt));
  hdsm::launch(0, fill(), hdsm::cover(100), hdsm::out(v), std::uint64_t{100}, 5.0f);
  v.discard(0, 100);
  hdsm::reset_container_stats(rt);
  hdsm::launch(1, fill(), hdsm::cover(50), hdsm::out(v.range(0, 50)), std::uint64_t{50}, 6.0f);
  EXPECT_EQ(v[10], 6.0f);
  EXPECT_EQ(hdsm::container_stats(rt).device_to_host_bytes, 50 * sizeof(float))
      << "only the written half comes back; nothing of device 0's discarded copy";
  EXPECT_EQ(v.stats().device_allocations, 2u) << "discard frees nothing";
}

TEST(VectorDeviceView, AKernelEnqueuedByHandSeesTheRange) {
  hdsm::Runtime rt(sim(1));
  Vector<float> v(64, 1.0f, on(rt));
  {
    hdsm::DeviceView view = v.device_view(0, 16, 32, Access::read_write);
    const hdsm::KernelArg args[] = {view.argument(), hdsm::KernelArg::value(std::uint64_t{32}),
                                    hdsm::KernelArg::value(2.0f), hdsm::KernelArg::value(0.0f)};
    view.queue().launch(axpb(), hdsm::cover(32), args);
    view.done(view.queue().record());
  }
  EXPECT_EQ(v[15], 1.0f);
  EXPECT_EQ(v[16], 2.0f);
  EXPECT_EQ(v[47], 2.0f);
  EXPECT_EQ(v[48], 1.0f);
}

// A copy of a matrix is deep and has its current contents, as a Vector's.
TEST(Matrix, ACopyIsDeepAndCurrent) {
  hdsm::Runtime rt(sim());
  hdsm::Matrix<float> m(3, 4, 1.0f, on(rt));
  hdsm::launch(0, axpb(), hdsm::cover(12), hdsm::inout(m), std::uint64_t{12}, 2.0f, 1.0f);
  hdsm::Matrix<float> c = m;  // waits for the kernel
  EXPECT_EQ(c.rows(), 3u);
  EXPECT_EQ(c.cols(), 4u);
  EXPECT_EQ(c.at(2, 3), 3.0f);
  c.at(0, 0) = 9.0f;
  EXPECT_EQ(m.at(0, 0), 3.0f);
  hdsm::Matrix<float> d(1, 1, on(rt));
  d = m;
  EXPECT_EQ(d.rows(), 3u);
  EXPECT_EQ(d.at(1, 1), 3.0f);
}

// A copy assignment keeps the target's runtime and options, as std::vector keeps its allocator; it
// took the source's (after `a = b` with b of another runtime, a was refused in its own runtime's
// calls and died with the other one; a `none` vector became `improved`).
TEST(Containers, ACopyAssignmentKeepsTheTargetsRuntimeAndOptions) {
  hdsm::Runtime mine(sim());
  auto other = std::make_unique<hdsm::Runtime>(sim());
  Vector<float> a(2, 0.0f, on(mine, hdsm::Mechanism::none));
  hdsm::Matrix<float> m(1, 1, on(mine, hdsm::Mechanism::none));
  {
    const Vector<float> b(5, 3.0f, on(*other, hdsm::Mechanism::improved));
    const hdsm::Matrix<float> mb(2, 3, 4.0f, on(*other, hdsm::Mechanism::improved));
    a = b;
    m = mb;
  }
  EXPECT_EQ(a.mechanism(), hdsm::Mechanism::none);
  EXPECT_EQ(m.mechanism(), hdsm::Mechanism::none);
  // A kernel of this runtime takes them...
  hdsm::launch(0, axpb(), hdsm::cover(a.size()), hdsm::inout(a), std::uint64_t{a.size()}, 2.0f, 1.0f);
  hdsm::launch(0, axpb(), hdsm::cover(6), hdsm::inout(m), std::uint64_t{6}, 2.0f, 1.0f);
  // ...and the other runtime's end leaves them alone.
  other.reset();
  EXPECT_EQ(std::vector<float>(a.begin(), a.end()), std::vector<float>(5, 7.0f));
  EXPECT_EQ(m.rows(), 2u);
  EXPECT_EQ(m.at(1, 2), 9.0f);
  // A moved-from vector has no runtime of its own: it takes the source's.
  Vector<float> moved = std::move(a);
  a = moved;
  EXPECT_EQ(a.size(), 5u);
  EXPECT_EQ(a[4], 7.0f);
}

// swap exchanges shapes, elements and device copies, a kernel on one of them still in flight.
TEST(Matrix, SwapExchangesShapesAndContents) {
  hdsm::Runtime rt(sim());
  hdsm::Matrix<float> a(3, 4, 1.0f, on(rt)), b(2, 5, 7.0f, on(rt));
  hdsm::launch(0, axpb(), hdsm::cover(12), hdsm::inout(a), std::uint64_t{12}, 2.0f, 1.0f);
  swap(a, b);
  EXPECT_EQ(a.rows(), 2u);
  EXPECT_EQ(a.cols(), 5u);
  EXPECT_EQ(a.at(1, 4), 7.0f);
  EXPECT_EQ(b.rows(), 3u);
  EXPECT_EQ(b.cols(), 4u);
  EXPECT_EQ(b.at(2, 3), 3.0f);  // waits for the kernel, which wrote what is now b
  a.swap(b);
  EXPECT_EQ(a.at(0, 0), 3.0f);
  EXPECT_EQ(b.at(0, 0), 7.0f);
}

// Empty operands (a range of no elements, an empty vector) are null pointers: no copy, no wait, no
// error, as skeletons take empty containers; the other operands work as ever.
TEST(Launch, EmptyOperandsAreNullPointers) {
  hdsm::Runtime rt(sim());
  Vector<float> v(10, 1.0f, on(rt)), none(0, on(rt));
  Vector<int> seen(2, 0, on(rt));
  const auto probe =
      hdsm::per_thread("probe_null", [](const hdsm::Thread&, const float* a, float* b, int* out) {
        out[0] = a == nullptr ? 1 : 2;
        out[1] = b == nullptr ? 1 : 2;
      });
  hdsm::launch(0, probe, hdsm::cover(1), hdsm::in(v.range(4, 0)), hdsm::out(none), hdsm::out(seen));
  EXPECT_EQ(seen[0], 1);
  EXPECT_EQ(seen[1], 1);
  EXPECT_EQ(v.core().device_copies(), 0u) << "an empty range makes no device copy";
  EXPECT_THROW(
      hdsm::launch(0, probe, hdsm::cover(1), hdsm::in(v.range(11, 0)), hdsm::out(none), hdsm::out(seen)),
      hdsm::InvalidArgument);
}

TEST(Matrix, SubmatrixCopiesHoldNonContiguousElements) {
  hdsm::Runtime rt(sim(2));
  hdsm::Matrix<float> m(6, 8, 1.0f, {&rt});
  EXPECT_EQ(m.rows(), 6u);
  EXPECT_EQ(m.cols(), 8u);
  // A 3x4 block at (2, 3): the kernel sees it as 12 contiguous floats.
  hdsm::launch(1, axpb(), hdsm::cover(12), hdsm::inout(m.submatrix(2, 3, 3, 4)), std::uint64_t{12}, 5.0f,
               0.0f);
  hdsm::launch(0, axpb(), hdsm::cover(8), hdsm::inout(m.row(0)), std::uint64_t{8}, 1.0f, 1.0f);
  hdsm::launch(0, axpb(), hdsm::cover(6), hdsm::inout(m.col(7)), std::uint64_t{6}, 1.0f, 10.0f);
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 8; ++j) {
      float expect = (i >= 2 && i < 5 && j >= 3 && j < 7) ? 5.0f : 1.0f;
      if (i == 0) expect += 1.0f;
      if (j == 7) expect += 10.0f;
      ASSERT_EQ(m.at(i, j), expect) << i << "," << j;
    }
  EXPECT_THROW(m.submatrix(4, 0, 3, 1), hdsm::InvalidArgument);
  // An empty operand is a null pointer, as a device's share of a split that got no rows.
  hdsm::Matrix<float> empty(3, 0, {&rt});
  EXPECT_NO_THROW(hdsm::launch(0, fill(), hdsm::cover(1), hdsm::out(empty), std::uint64_t{0}, 1.0f).wait());
  EXPECT_THROW(
      hdsm::launch(0, fill(), hdsm::cover(1), hdsm::out(m.submatrix(7, 0, 0, 0)), std::uint64_t{0}, 1.0f),
      hdsm::InvalidArgument);  // past the end, empty or not
  EXPECT_THROW((void)static_cast<float>(m.at(6, 0)), hdsm::InvalidArgument);
  m.resize(3, 10);
  EXPECT_EQ(m.at(0, 0), 2.0f);
  EXPECT_EQ(m.at(2, 9), 0.0f);
  EXPECT_EQ(m.at(2, 3), 5.0f);
}

}  // namespace
