// Containers of HDSM_USER_TYPE structs through the skeletons on every backend (host, 1, 2 and 3 sim
// devices, PoCL): the struct is defined once and its OpenCL C text goes into every generated program;
// MapArrayIndex gives the user function the element's global index on every device part; the math
// functions of a user function's C++ body compute in float for float arguments, as OpenCL C's do.
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "skeletons/opencl_runtime.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace {

// Mixed member sizes: 8-byte members after 4-byte ones, so a layout that differs between C++ and
// OpenCL C shows as wrong values.
HDSM_USER_TYPE(ut_item, int key; float weight; double total; unsigned long count;)

static_assert(sizeof(ut_item) == 24);

// The item moved by `by`: every member changes, each from another member.
HDSM_USER_FUNCTION(ut_step, ut_item, (ut_item a, int by), {
  ut_item b = a;
  b.key = a.key + by;
  b.weight = a.weight * 0.5f + (float)by;
  b.total = a.total + (double)a.key;
  b.count = a.count + 1;
  return b;
})

// The member-wise sum of two items (keys and counts exactly; weights and totals as exact small
// integers here).
HDSM_USER_FUNCTION(ut_add, ut_item, (ut_item a, ut_item b), {
  ut_item c;
  c.key = a.key + b.key;
  c.weight = a.weight + b.weight;
  c.total = a.total + b.total;
  c.count = a.count + b.count;
  return c;
})

// Element i of the output from its index and two items of the array: the next one (cyclic) and the
// one the index's key names.
HDSM_USER_FUNCTION(ut_pick, ut_item, (unsigned long i, HDSM_GLOBAL const ut_item* all, unsigned long n), {
  ut_item r = all[(i + 1) % n];
  r.key = all[i].key * 2 + (int)(i % 7);
  r.count = i;
  return r;
})

ut_item item(std::size_t i) {
  return ut_item{static_cast<int>(i % 1000) - 300, static_cast<float>(i % 64), static_cast<double>(i % 5000),
                 i * 3};
}

void expect_items(const std::vector<ut_item>& got, const std::vector<ut_item>& want,
                  const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i].key != want[i].key || got[i].weight != want[i].weight || got[i].total != want[i].total ||
        got[i].count != want[i].count) {
      if (wrong++ == 0)
        ADD_FAILURE() << where << ": item " << i << " is {" << got[i].key << ", " << got[i].weight << ", "
                      << got[i].total << ", " << got[i].count << "}, want {" << want[i].key << ", "
                      << want[i].weight << ", " << want[i].total << ", " << want[i].count << "}";
    }
  EXPECT_EQ(wrong, 0U) << where;
}

// Map, then MapArrayIndex on its output, then Reduce: the three results against loops.
void check_skeletons(hdsm::Runtime& rt, hdsm::SkeletonBackend backend, const std::vector<unsigned>& devices,
                     const std::string& where) {
  constexpr std::size_t n = 3001;
  hdsm::Vector<ut_item> a(n, hdsm::ContainerOptions{&rt}), b(n, hdsm::ContainerOptions{&rt}),
      c(n, hdsm::ContainerOptions{&rt});
  std::vector<ut_item> want_b(n), want_c(n);
  for (std::size_t i = 0; i < n; ++i) {
    a(i) = item(i);
    want_b[i] = ut_step::call(item(i), 3);
  }
  for (std::size_t i = 0; i < n; ++i) want_c[i] = ut_pick::call(i, want_b.data(), n);
  ut_item want_sum = want_c[0];
  for (std::size_t i = 1; i < n; ++i) want_sum = ut_add::call(want_sum, want_c[i]);

  hdsm::Map<ut_step> step;
  hdsm::MapArrayIndex<ut_pick> pick;
  hdsm::Reduce<ut_add> sum;
  step.backend(backend);
  pick.backend(backend);
  sum.backend(backend);
  if (!devices.empty()) {
    step.devices(devices);
    pick.devices(devices);
    sum.devices(devices);
  }
  step(b, a, 3);
  pick(c, b, std::uint64_t{n});
  const ut_item got_sum = sum(c);
  expect_items(std::vector<ut_item>(b.data(), b.data() + n), want_b, where + ", Map");
  expect_items(std::vector<ut_item>(c.data(), c.data() + n), want_c, where + ", MapArrayIndex");
  expect_items({got_sum}, {want_sum}, where + ", Reduce");
}

TEST(UserTypes, MapMapArrayIndexAndReduceOnTheHostAndSimDevices) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "3"));
  check_skeletons(rt, hdsm::SkeletonBackend::host, {}, "host");
  check_skeletons(rt, hdsm::SkeletonBackend::devices, {0}, "1 device");
  check_skeletons(rt, hdsm::SkeletonBackend::devices, {0, 1}, "2 devices");
  check_skeletons(rt, hdsm::SkeletonBackend::devices, {2, 0, 1}, "3 devices");
}

TEST(UserTypes, TheGeneratedOpenclProgramDefinesTheTypeOnce) {
  const std::string source = hdsm::detail::opencl_prelude<ut_item, int, ut_item>();
  const std::string definition =
      "typedef struct {int key; float weight; double total; unsigned long count;} ut_item;";
  ASSERT_NE(source.find(definition), std::string::npos) << source;
  EXPECT_EQ(source.find(definition, source.find(definition) + 1), std::string::npos) << source;
  EXPECT_STREQ(hdsm::detail::opencl_type<ut_item>(), "ut_item");
}

TEST(UserTypes, opencl) {
  std::string why;
  const std::unique_ptr<hdsm::Runtime> rt = hdsm::test::opencl_runtime(why);
  if (!rt) GTEST_SKIP() << why;
  check_skeletons(*rt, hdsm::SkeletonBackend::devices, {}, "OpenCL");
}

// Rounds differently when sqrt's result is a double: x * sqrt(x) rounded once instead of twice.
HDSM_USER_FUNCTION(um_root, float, (float x), { return x * sqrt(x) + sqrt(x) / 3.0f; })

static_assert(std::is_same_v<decltype(um_root::sqrt(1.0f)), float>);
static_assert(std::is_same_v<decltype(um_root::pow(1.0f, 2.0f)), float>);
static_assert(std::is_same_v<decltype(um_root::sqrt(1.0)), double>);

TEST(UserMath, HostBodiesRoundAsOpenclDoes) {
  std::string why;
  const std::unique_ptr<hdsm::Runtime> rt = hdsm::test::opencl_runtime(why);
  if (!rt) GTEST_SKIP() << why;
  constexpr std::size_t n = 100'000;
  hdsm::Vector<float> x(n, hdsm::ContainerOptions{rt.get()}), on_host(n, hdsm::ContainerOptions{rt.get()}),
      on_device(n, hdsm::ContainerOptions{rt.get()});
  for (std::size_t i = 0; i < n; ++i) x(i) = static_cast<float>(i) * 0.37f + 0.01f;
  hdsm::Map<um_root> map;
  map.backend(hdsm::SkeletonBackend::host)(on_host, x);
  map.backend(hdsm::SkeletonBackend::devices)(on_device, x);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < n; ++i) differ += on_host[i] != on_device[i] ? 1 : 0;
  EXPECT_EQ(differ, 0U) << "of " << n << " elements";
}

TEST(MapArrayIndex, ErrorsNameTheSkeleton) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config());
  hdsm::Vector<ut_item> all(10, hdsm::ContainerOptions{&rt}), out(10, hdsm::ContainerOptions{&rt});
  hdsm::MapArrayIndex<ut_pick> pick;
  try {
    pick(all, all, std::uint64_t{10});
    FAIL() << "the array as the output was accepted";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("MapArrayIndex<ut_pick>"), std::string::npos) << e.what();
  }
}

}  // namespace
