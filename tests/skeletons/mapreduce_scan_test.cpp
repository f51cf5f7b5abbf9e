// MapReduce and Scan on every backend: integer results identical on the host and on 1, 2 and 3 sim
// devices (many chunks and few) and equal to a loop, inclusive and exclusive scans with and without
// a start value, several inputs and uniforms, floating-point results close to a loop, PoCL, and the
// errors (empty inputs, sizes that differ, an exclusive scan without a start, in-place scans).
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "skeletons/opencl_runtime.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

HDSM_USER_FUNCTION(mr_add, long, (long a, long b), { return a + b; })
HDSM_USER_FUNCTION(mr_max, long, (long a, long b), { return a > b ? a : b; })
HDSM_USER_FUNCTION(mr_dot, long, (long x, long y, long k), { return x * y + k; })
HDSM_USER_FUNCTION(mr_square, double, (double x), { return x * x; })
HDSM_USER_FUNCTION(mr_addf, double, (double a, double b), { return a + b; })
HDSM_USER_FUNCTION(mr_addi, int, (int a, int b), { return a + b; })

// Two user functions of one name, in two namespaces: a dot product.
namespace mr_times {
HDSM_USER_FUNCTION(f, long, (long a, long b), { return a * b; })
}
namespace mr_plus {
HDSM_USER_FUNCTION(f, long, (long a, long b), { return a + b; })
}
// abs of a long keeps its width (C's ::abs took an int); of an unsigned it is the value (it was
// ambiguous among the signed overloads).
HDSM_USER_FUNCTION(mr_abs, long, (long x), { return abs(x); })
HDSM_USER_FUNCTION(mr_uabs, unsigned long, (unsigned long x), { return abs(x); })

hdsm::Config sim(unsigned devices) {
  return hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", std::to_string(devices));
}

std::vector<hdsm::Vector<long>> two_inputs(hdsm::Runtime& rt, std::size_t n) {
  std::vector<hdsm::Vector<long>> v;
  v.emplace_back(n, hdsm::ContainerOptions{&rt});
  v.emplace_back(n, hdsm::ContainerOptions{&rt});
  for (std::size_t i = 0; i < n; ++i) {
    v[0](i) = static_cast<long>(i * 7919 % 1013) - 500;
    v[1](i) = static_cast<long>(i % 17) - 8;
  }
  return v;
}

TEST(MapReduce, DotProductIsTheSameOnEveryBackendAndDeviceCount) {
  hdsm::Runtime rt(sim(3));
  constexpr std::size_t n = 100'003;
  auto v = two_inputs(rt, n);
  long expect = 0;
  for (std::size_t i = 0; i < n; ++i) expect += v[0](i) * v[1](i) + 3;
  hdsm::MapReduce<mr_dot, mr_add> dot;
  EXPECT_EQ(dot.backend(hdsm::SkeletonBackend::host)(v[0], v[1], 3L), expect);
  dot.backend(hdsm::SkeletonBackend::devices);
  EXPECT_EQ(dot(v[0], v[1], 3L), expect);
  EXPECT_EQ(dot.devices({0, 1})(v[0], v[1], 3L), expect);
  EXPECT_EQ(dot.devices({0, 1, 2}).chunks(5)(v[0], v[1], 3L), expect);
  EXPECT_EQ(dot.chunks(SIZE_MAX)(v[0], v[1], 3L), expect);  // a chunk size that wrapped to 0 before
  dot.chunks(5);
  EXPECT_EQ(dot.start_value(100)(v[0], v[1], 3L), expect + 100);
  long biggest = v[0](0) * v[1](0) + 3;
  for (std::size_t i = 0; i < n; ++i) biggest = std::max(biggest, v[0](i) * v[1](i) + 3);
  EXPECT_EQ((hdsm::MapReduce<mr_dot, mr_max>{}.devices({0, 2})(v[0], v[1], 3L)), biggest);
}

TEST(MapReduce, FloatingPointSumOfSquares) {
  hdsm::Runtime rt(sim(2));
  hdsm::Vector<double> x(50'000, hdsm::ContainerOptions{&rt});
  double expect = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    x(i) = 1.0 / static_cast<double>(i + 1);
    expect += x(i) * x(i);
  }
  EXPECT_NEAR((hdsm::MapReduce<mr_square, mr_addf>{}.devices({0, 1})(x)), expect, 1e-12);
  EXPECT_NEAR((hdsm::MapReduce<mr_square, mr_addf>{}.backend(hdsm::SkeletonBackend::host)(x)), expect, 1e-12);
}

TEST(MapReduce, EmptyAndMismatchedInputs) {
  hdsm::Runtime rt(sim(1));
  hdsm::Vector<long> a(0, hdsm::ContainerOptions{&rt}), b(0, hdsm::ContainerOptions{&rt}),
      c(3, hdsm::ContainerOptions{&rt});
  hdsm::MapReduce<mr_dot, mr_add> dot;
  EXPECT_THROW(dot(a, b, 1L), hdsm::InvalidArgument);
  EXPECT_EQ(dot.start_value(9)(a, b, 1L), 9);
  try {
    dot(a, c, 1L);
    FAIL();
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("MapReduce<mr_dot, mr_add>"), std::string::npos) << e.what();
  }
}

// The scans a loop gives.
std::vector<long> inclusive(const hdsm::Vector<long>& in, const long* start) {
  std::vector<long> out(in.size());
  long acc = start != nullptr ? *start : 0;
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = acc += in(i);
  return out;
}
std::vector<long> exclusive(const hdsm::Vector<long>& in, long start) {
  std::vector<long> out(in.size());
  long acc = start;
  for (std::size_t i = 0; i < in.size(); ++i) {
    out[i] = acc;
    acc += in(i);
  }
  return out;
}
std::vector<long> contents(hdsm::Vector<long>& v) {
  std::vector<long> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i];
  return out;
}

TEST(Scan, InclusiveAndExclusiveAreTheSameOnEveryBackendAndDeviceCount) {
  hdsm::Runtime rt(sim(3));
  for (const std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{4096}, std::size_t{77'777}}) {
    SCOPED_TRACE(n);
    auto v = two_inputs(rt, n);
    hdsm::Vector<long>& in = v[0];
    hdsm::Vector<long> out(n, hdsm::ContainerOptions{&rt});
    const long start = 1000;
    hdsm::Scan<mr_add> scan;
    for (const auto backend : {hdsm::SkeletonBackend::host, hdsm::SkeletonBackend::devices}) {
      for (const std::initializer_list<unsigned> devices :
           {std::initializer_list<unsigned>{0}, {0, 1}, {2, 0, 1}}) {
        for (const std::size_t chunks :
             {std::size_t{256}, std::size_t{3}, SIZE_MAX}) {  // SIZE_MAX: a chunk size that wrapped to 0
          scan.backend(backend).devices(devices).chunks(chunks).mode(hdsm::ScanMode::inclusive);
          scan(out, in);
          ASSERT_EQ(contents(out), inclusive(in, nullptr));
          scan(out, in, start);
          ASSERT_EQ(contents(out), inclusive(in, &start));
          scan.mode(hdsm::ScanMode::exclusive)(out, in, start);
          ASSERT_EQ(contents(out), exclusive(in, start));
        }
      }
    }
  }
}

TEST(Scan, FloatingPointSumIsCloseToALoop) {
  hdsm::Runtime rt(sim(2));
  hdsm::Vector<double> in(30'000, hdsm::ContainerOptions{&rt}), out(30'000, hdsm::ContainerOptions{&rt});
  for (std::size_t i = 0; i < in.size(); ++i) in(i) = 1.0 / static_cast<double>(i + 1);
  hdsm::Scan<mr_addf>{}.devices({0, 1})(out, in);
  double acc = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    acc += in(i);
    ASSERT_NEAR(out[i], acc, 1e-12 * static_cast<double>(i + 1)) << i;
  }
}

TEST(Scan, Errors) {
  hdsm::Runtime rt(sim(1));
  hdsm::Vector<long> a(10, hdsm::ContainerOptions{&rt}), b(11, hdsm::ContainerOptions{&rt});
  hdsm::Scan<mr_add> scan;
  EXPECT_THROW(scan(a, b), hdsm::InvalidArgument);
  EXPECT_THROW(scan(a, a), hdsm::InvalidArgument);
  try {
    scan.mode(hdsm::ScanMode::exclusive)(a, a);
    FAIL();
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("start"), std::string::npos) << e.what();
  }
  hdsm::Vector<long> e0(0, hdsm::ContainerOptions{&rt}), e1(0, hdsm::ContainerOptions{&rt});
  EXPECT_NO_THROW(scan(e0, e1, 5L));
}

TEST(MapReduce, AbsOfALongKeepsItsWidth) {
  hdsm::Runtime rt(sim(2));
  hdsm::Vector<long> v(3, hdsm::ContainerOptions{&rt});
  v[0] = -5'000'000'000L;
  v[1] = 3'000'000'000L;
  v[2] = -7;
  hdsm::MapReduce<mr_abs, mr_add> sum;
  EXPECT_EQ(sum.backend(hdsm::SkeletonBackend::host)(v), 8'000'000'007L);
  EXPECT_EQ(sum.backend(hdsm::SkeletonBackend::devices)(v), 8'000'000'007L);
  EXPECT_EQ(mr_uabs::call(5'000'000'000UL), 5'000'000'000UL);
}

TEST(MapReduceAndScanOnDevices, opencl) {
  std::string why;
  const std::unique_ptr<hdsm::Runtime> rt = hdsm::test::opencl_runtime(why);
  if (!rt) GTEST_SKIP() << why;
  auto v = two_inputs(*rt, 20'000);
  long expect = 0;
  for (std::size_t i = 0; i < v[0].size(); ++i) expect += v[0](i) * v[1](i) + 1;
  EXPECT_EQ((hdsm::MapReduce<mr_dot, mr_add>{}(v[0], v[1], 1L)), expect);
  hdsm::Vector<long> out(v[0].size(), hdsm::ContainerOptions{rt.get()});
  hdsm::Scan<mr_add>{}.chunks(7)(out, v[0]);
  EXPECT_EQ(contents(out), inclusive(v[0], nullptr));
  hdsm::Scan<mr_add>{}.mode(hdsm::ScanMode::exclusive)(out, v[0], 5L);
  EXPECT_EQ(contents(out), exclusive(v[0], 5));
  hdsm::Vector<int> small(1000, 1, hdsm::ContainerOptions{rt.get()}),
      sums(1000, hdsm::ContainerOptions{rt.get()});
  hdsm::Scan<mr_addi>{}(sums, small);
  EXPECT_EQ(sums[999], 1000);
  // One name for two functions cannot be one OpenCL program: an error that says so, not the map
  // function reducing (before, the dot product of 2s and 3s came out 324000, not 6000).
  hdsm::Vector<long> w(1000, 3L, hdsm::ContainerOptions{rt.get()}),
      x(1000, 2L, hdsm::ContainerOptions{rt.get()});
  try {
    const long dot = hdsm::MapReduce<mr_times::f, mr_plus::f>{}(x, w);
    ADD_FAILURE() << "a MapReduce of two functions named f gave " << dot;
  } catch (const hdsm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("both named 'f'"), std::string::npos) << e.what();
  }
  hdsm::Vector<long> one(1, -5'000'000'000L, hdsm::ContainerOptions{rt.get()});
  EXPECT_EQ((hdsm::MapReduce<mr_abs, mr_add>{}(one)), 5'000'000'000L);
}

}  // namespace
