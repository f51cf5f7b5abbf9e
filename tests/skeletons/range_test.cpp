// Skeleton calls on ranges of containers (v.range(first, n), a matrix's row or whole rows, of const
// containers too as inputs) and on
// whole matrices (their elements in row-major order): every 1D skeleton on the host, on 1, 2 and 3
// sim devices and on PoCL, against loops over the same ranges;
// the elements outside a call's ranges are neither changed nor read; a range moves only its own bytes
// to a device; aliasing ranges and non-contiguous parts are named before any work.
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "skeletons/opencl_runtime.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace {

HDSM_USER_FUNCTION(rg_axpy, long, (long x, long y, long a), { return a * x + y; })
HDSM_USER_FUNCTION(rg_twice, long, (long x), { return 2 * x + 1; })
HDSM_USER_FUNCTION(rg_where, long, (unsigned long i, long x), { return (long)i * 1000 + x; })
HDSM_USER_FUNCTION(rg_add, long, (long a, long b), { return a + b; })
HDSM_USER_FUNCTION(rg_max, long, (long a, long b), { return a > b ? a : b; })
HDSM_USER_FUNCTION(rg_mul, long, (long x, long y), { return x * y; })
HDSM_USER_FUNCTION(rg_pick, long, (HDSM_GLOBAL const long* a, long x, long n), {
  long j = x % n;
  if (j < 0) j += n;
  return a[j] + x;
})
HDSM_USER_FUNCTION(rg_window, long, (const long* w),
                   { return w[-2] + 3 * w[-1] + 5 * w[0] + 7 * w[1] + 11 * w[2]; })

constexpr std::size_t kN = 5'003;
// Every element outside a call's ranges holds this, so that a read of one shows in the result.
constexpr long kOutside = 1'000'000'007;

long value_of(std::size_t i) { return static_cast<long>(i * 7919 % 10'007) - 5'000; }

// A vector of kN elements, `value_of(i)` inside [first, first + n), kOutside elsewhere.
hdsm::Vector<long> filled(hdsm::Runtime& rt, std::size_t first, std::size_t n, long salt = 0) {
  hdsm::Vector<long> v(kN, kOutside, hdsm::ContainerOptions{&rt});
  for (std::size_t i = first; i < first + n; ++i) v(i) = value_of(i) + salt;
  return v;
}

std::vector<long> values(hdsm::Vector<long>& v) { return std::vector<long>(v.data(), v.data() + v.size()); }

template <class S>
S& place(S& s, hdsm::SkeletonBackend backend, const std::vector<unsigned>& devices) {
  s.backend(backend);
  if (!devices.empty()) s.devices(devices);
  return s;
}

void check_map(hdsm::Runtime& rt, hdsm::SkeletonBackend backend, const std::vector<unsigned>& devices) {
  const std::size_t n = 2'999, a = 17, b = 1'200, c = 2'001;
  hdsm::Vector<long> x = filled(rt, a, n), y = filled(rt, b, n, 3), out = filled(rt, 0, 0);
  hdsm::Map<rg_axpy> axpy;
  const hdsm::Vector<long>& read_only = y;  // a const container's range is an input too
  place(axpy, backend, devices)(out.range(c, n), x.range(a, n), read_only.range(b, n), 4L);
  std::vector<long> expected(kN, kOutside);
  for (std::size_t i = 0; i < n; ++i) expected[c + i] = 4 * value_of(a + i) + value_of(b + i) + 3;
  EXPECT_EQ(values(out), expected) << "Map on three ranges at different offsets";

  // In place on a range, and from one range of a vector into another range of it that is apart.
  hdsm::Map<rg_twice> twice;
  place(twice, backend, devices)(x.range(a, n), x.range(a, n));
  place(twice, backend, devices)(x.range(a + n, 1'000), x.range(a, 1'000));
  std::vector<long> ex(kN, kOutside);
  for (std::size_t i = a; i < a + n; ++i) ex[i] = 2 * value_of(i) + 1;
  for (std::size_t i = 0; i < 1'000; ++i) ex[a + n + i] = 2 * ex[a + i] + 1;
  EXPECT_EQ(values(x), ex) << "in place and between ranges of one vector";

  // MapIndex: the index counts from the range's first element.
  hdsm::MapIndex<rg_where> where;
  hdsm::Vector<long> w = filled(rt, 0, 0);
  place(where, backend, devices)(w.range(100, 500), y.range(b, 500));
  for (std::size_t i = 0; i < kN; ++i) {
    const long e =
        i >= 100 && i < 600 ? static_cast<long>(i - 100) * 1000 + value_of(b + i - 100) + 3 : kOutside;
    ASSERT_EQ(w[i], e) << "MapIndex element " << i;
  }
}

void check_matrix_parts(hdsm::Runtime& rt, hdsm::SkeletonBackend backend,
                        const std::vector<unsigned>& devices) {
  const std::size_t rows = 40, cols = 37;
  hdsm::Matrix<long> m(rows, cols, kOutside, hdsm::ContainerOptions{&rt});
  hdsm::Vector<long> v = filled(rt, 0, kN);
  hdsm::Map<rg_twice> twice;
  // A row, and whole rows 10 to 19 as one run of 370 elements.
  place(twice, backend, devices)(m.row(3), v.range(7, cols));
  place(twice, backend, devices)(m.submatrix(10, 0, 10, cols), v.range(50, 10 * cols));
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < cols; ++j) {
      long e = kOutside;
      if (r == 3) e = 2 * value_of(7 + j) + 1;
      if (r >= 10 && r < 20) e = 2 * value_of(50 + (r - 10) * cols + j) + 1;
      ASSERT_EQ(m.at(r, j), e) << r << ", " << j;
    }
  hdsm::Reduce<rg_add> sum;
  long e = 0;
  for (std::size_t j = 0; j < cols; ++j) e += 2 * value_of(7 + j) + 1;
  EXPECT_EQ(place(sum, backend, devices)(m.row(3)), e) << "Reduce of a matrix row";
  const hdsm::Matrix<long>& read_only = m;
  EXPECT_EQ(place(sum, backend, devices)(read_only.row(3)), e) << "Reduce of a const matrix's row";

  // Whole matrices are operands too: their elements in row-major order, as a vector's.
  hdsm::Matrix<long> x(rows, cols, 0L, hdsm::ContainerOptions{&rt}),
      y(rows, cols, 0L, hdsm::ContainerOptions{&rt});
  hdsm::Matrix<long> out(rows, cols, kOutside, hdsm::ContainerOptions{&rt});
  for (std::size_t i = 0; i < rows * cols; ++i) {
    x(i / cols, i % cols) = value_of(i);
    y(i / cols, i % cols) = value_of(i + 17);
  }
  hdsm::Map<rg_axpy> axpy;
  place(axpy, backend, devices)(out, x, y, 3L);
  hdsm::MapIndex<rg_where> where;
  hdsm::Matrix<long> idx(rows, cols, kOutside, hdsm::ContainerOptions{&rt});
  const hdsm::Matrix<long>& cx = x;
  place(where, backend, devices)(idx, cx);
  long total = 0;
  long dot = 0;
  for (std::size_t i = 0; i < rows * cols; ++i) {
    ASSERT_EQ(out.at(i / cols, i % cols), 3 * value_of(i) + value_of(i + 17)) << "Map element " << i;
    ASSERT_EQ(idx.at(i / cols, i % cols), static_cast<long>(i) * 1000 + value_of(i)) << "MapIndex " << i;
    total += 3 * value_of(i) + value_of(i + 17);
    dot += value_of(i) * value_of(i + 17);
  }
  EXPECT_EQ(sum(out), total) << "Reduce of a whole matrix";
  hdsm::MapReduce<rg_mul, rg_add> mr;
  EXPECT_EQ(place(mr, backend, devices)(x, y), dot) << "MapReduce of whole matrices";
  hdsm::Scan<rg_add> scan;
  place(scan, backend, devices)(idx, x);
  long acc = 0;
  for (std::size_t i = 0; i < rows * cols; ++i)
    ASSERT_EQ(idx.at(i / cols, i % cols), acc += value_of(i)) << "Scan element " << i;
  hdsm::MapArray<rg_pick> pick;
  place(pick, backend, devices)(out, v, x, static_cast<long>(kN));  // the array: any container
  for (std::size_t i = 0; i < rows * cols; ++i) {
    long j = value_of(i) % static_cast<long>(kN);
    if (j < 0) j += static_cast<long>(kN);
    ASSERT_EQ(out.at(i / cols, i % cols), value_of(static_cast<std::size_t>(j)) + value_of(i)) << i;
  }
}

void check_reductions(hdsm::Runtime& rt, hdsm::SkeletonBackend backend,
                      const std::vector<unsigned>& devices) {
  const std::size_t n = 3'001, a = 999, b = 1'500;
  hdsm::Vector<long> x = filled(rt, a, n), y = filled(rt, b, n, -7);
  hdsm::Reduce<rg_add> sum;
  hdsm::Reduce<rg_max> max;
  long s = 0, m = value_of(a);
  for (std::size_t i = a; i < a + n; ++i) {
    s += value_of(i);
    m = std::max(m, value_of(i));
  }
  place(sum, backend, devices);
  place(max, backend, devices);
  EXPECT_EQ(sum(x.range(a, n)), s);
  EXPECT_EQ(sum(x.range(a, n), 11L), s + 11);
  EXPECT_EQ(sum.async(x.range(a, n)).get(), s);
  EXPECT_EQ(max(x.range(a, n)), m);
  EXPECT_EQ(sum(x.range(a, 0), 5L), 5) << "an empty range with an initial value";
  EXPECT_THROW(sum(x.range(a, 0)), hdsm::InvalidArgument) << "an empty range without one";

  hdsm::MapReduce<rg_mul, rg_add> dot;
  place(dot, backend, devices);
  long d = 0;
  for (std::size_t i = 0; i < n; ++i) d += value_of(a + i) * (value_of(b + i) - 7);
  EXPECT_EQ(dot(x.range(a, n), y.range(b, n)), d);

  hdsm::Scan<rg_add> scan;
  place(scan, backend, devices);
  hdsm::Vector<long> out = filled(rt, 0, 0);
  scan(out.range(10, n), x.range(a, n));
  std::vector<long> inclusive(kN, kOutside);
  long acc = 0;
  for (std::size_t i = 0; i < n; ++i) inclusive[10 + i] = acc += value_of(a + i);
  EXPECT_EQ(values(out), inclusive) << "inclusive scan of a range into a range";
  scan.mode(hdsm::ScanMode::exclusive)(out.range(10, n), x.range(a, n), 100L);
  std::vector<long> exclusive(kN, kOutside);
  acc = 100;
  for (std::size_t i = 0; i < n; ++i) {
    exclusive[10 + i] = acc;
    acc += value_of(a + i);
  }
  EXPECT_EQ(values(out), exclusive) << "exclusive scan";
}

void check_maparray(hdsm::Runtime& rt, hdsm::SkeletonBackend backend, const std::vector<unsigned>& devices) {
  const std::size_t n = 2'500, a = 300, table = 701, t = 4'000;
  hdsm::Vector<long> x = filled(rt, a, n), arr = filled(rt, t, table, 9), out = filled(rt, 0, 0);
  hdsm::MapArray<rg_pick> pick;
  // The array is a range too: element j of the user function's array is arr[t + j].
  place(pick, backend, devices)(out.range(2'000, n), arr.range(t, table), x.range(a, n),
                                static_cast<long>(table));
  std::vector<long> expected(kN, kOutside);
  for (std::size_t i = 0; i < n; ++i) {
    long j = value_of(a + i) % static_cast<long>(table);
    if (j < 0) j += static_cast<long>(table);
    expected[2'000 + i] = value_of(t + static_cast<std::size_t>(j)) + 9 + value_of(a + i);
  }
  EXPECT_EQ(values(out), expected);
}

void check_mapoverlap(hdsm::Runtime& rt, hdsm::SkeletonBackend backend,
                      const std::vector<unsigned>& devices) {
  const std::size_t n = 1'003, a = 2'222;
  hdsm::Vector<long> in = filled(rt, a, n);
  for (const hdsm::Edge edge :
       {hdsm::Edge::none, hdsm::Edge::cyclic, hdsm::Edge::duplicate, hdsm::Edge::pad}) {
    SCOPED_TRACE(static_cast<int>(edge));
    hdsm::Vector<long> out = filled(rt, 0, 0);
    hdsm::MapOverlap<rg_window> mo;
    place(mo, backend, devices).overlap(2).edge(edge).pad(-3);
    // The range's ends are the edges: nothing beyond them is read.
    mo(out.range(50, n), in.range(a, n));
    std::vector<long> expected(kN, kOutside);
    const auto at = [&](long j) -> long {
      const long size = static_cast<long>(n);
      if (j >= 0 && j < size) return value_of(a + static_cast<std::size_t>(j));
      if (edge == hdsm::Edge::cyclic) return value_of(a + static_cast<std::size_t>((j + size) % size));
      if (edge == hdsm::Edge::duplicate) return value_of(a + (j < 0 ? 0 : n - 1));
      return -3;
    };
    for (std::size_t i = 0; i < n; ++i) {
      const long g = static_cast<long>(i);
      if (edge == hdsm::Edge::none && (i < 2 || i + 2 >= n)) continue;
      expected[50 + i] = at(g - 2) + 3 * at(g - 1) + 5 * at(g) + 7 * at(g + 1) + 11 * at(g + 2);
    }
    EXPECT_EQ(values(out), expected);
  }
}

void check_all(hdsm::Runtime& rt, hdsm::SkeletonBackend backend, const std::vector<unsigned>& devices,
               const std::string& where) {
  SCOPED_TRACE(where);
  check_map(rt, backend, devices);
  check_matrix_parts(rt, backend, devices);
  check_reductions(rt, backend, devices);
  check_maparray(rt, backend, devices);
  check_mapoverlap(rt, backend, devices);
}

TEST(SkeletonRanges, EverySkeletonOnRangesOnTheHostAndSimDevices) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "3"));
  check_all(rt, hdsm::SkeletonBackend::host, {}, "host");
  check_all(rt, hdsm::SkeletonBackend::devices, {0}, "1 device");
  check_all(rt, hdsm::SkeletonBackend::devices, {0, 1}, "2 devices");
  check_all(rt, hdsm::SkeletonBackend::devices, {2, 0, 1}, "3 devices");
}

TEST(SkeletonRanges, opencl) {
  std::string why;
  const std::unique_ptr<hdsm::Runtime> rt = hdsm::test::opencl_runtime(why);
  if (!rt) GTEST_SKIP() << why;
  check_all(*rt, hdsm::SkeletonBackend::devices, {}, "OpenCL");
}

TEST(SkeletonRanges, ARangeMovesOnlyItsOwnElements) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  hdsm::Vector<long> x = filled(rt, 0, kN), out = filled(rt, 0, 0);
  hdsm::reset_container_stats(rt);
  hdsm::Map<rg_twice> twice;
  twice.devices({0, 1})(out.range(1'000, 2'000), x.range(3'000, 2'000));
  out.update_host();
  const hdsm::ContainerStats s = hdsm::container_stats(rt);
  // The input's 2000 elements go to the devices, the output's come back; the rest stays put.
  EXPECT_EQ(s.host_to_device_bytes, 2'000 * sizeof(long));
  EXPECT_EQ(s.device_to_host_bytes, 2'000 * sizeof(long));
  EXPECT_EQ(s.device_allocated_bytes, 2 * 2'000 * sizeof(long));
  EXPECT_EQ(out[999], kOutside);
  EXPECT_EQ(out[1'000], 2 * value_of(3'000) + 1);
}

TEST(SkeletonRanges, AliasingAndNonContiguousPartsAreNamedBeforeAnyWork) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  hdsm::Vector<long> v = filled(rt, 0, kN);
  hdsm::Matrix<long> m(8, 8, 1L, hdsm::ContainerOptions{&rt});
  const std::vector<long> before = values(v);
  const auto expect_error = [](const auto& call, const std::string& part) {
    try {
      call();
      ADD_FAILURE() << "accepted; expected an error with \"" << part << "\"";
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  hdsm::Map<rg_twice> twice;
  hdsm::Map<rg_axpy> axpy;
  twice.devices({0, 1});
  // Reading a neighbour that the call also writes would depend on the order of the parts.
  expect_error([&] { twice(v.range(1, 100), v.range(0, 100)); }, "hdsm::Map<rg_twice>: input 0");
  expect_error([&] { axpy(v.range(0, 100), v.range(200, 100), v.range(50, 100), 1L); }, "input 1");
  hdsm::Reduce<rg_add> sum;
  expect_error([&] { (void)sum(m.submatrix(0, 0, 4, 4)); }, "hdsm::Reduce<rg_add>: an operand of 4 x 4");
  expect_error([&] { twice(v.range(0, 8), m.col(2)); }, "not contiguous");
  // Whole matrices of one element count but two shapes: a mistake, named.
  hdsm::Matrix<long> wide(4, 16, 1L, hdsm::ContainerOptions{&rt});
  hdsm::Matrix<long> tall(16, 4, 1L, hdsm::ContainerOptions{&rt});
  expect_error([&] { axpy(tall, m, wide, 1L); }, "hdsm::Map<rg_axpy>: matrices of 16 x 4 and 8 x 8 elements");
  expect_error([&] { (void)hdsm::MapReduce<rg_mul, rg_add>{}(m, tall); }, "8 x 8 and 16 x 4");
  expect_error([&] { hdsm::Scan<rg_add>{}(wide, tall); },
               "hdsm::Scan<rg_add>: matrices of 4 x 16 and 16 x 4");
  EXPECT_EQ(wide.at(0, 0), 1) << "nothing ran";
  hdsm::MapOverlap<rg_window> mo;
  mo.overlap(2);
  expect_error([&] { mo(v.range(0, 100), v.range(99, 100)); }, "hdsm::MapOverlap<rg_window>: out and in");
  hdsm::Scan<rg_add> scan;
  expect_error([&] { scan(v.range(0, 100), v.range(50, 100)); }, "hdsm::Scan<rg_add>: out and in");
  hdsm::MapArray<rg_pick> pick;
  expect_error([&] { pick(v.range(0, 100), v.range(90, 20), v.range(200, 100), 20L); },
               "cannot overlap the array");
  expect_error([&] { twice(v.range(kN - 10, 11), v.range(0, 11)); }, "range");
  EXPECT_EQ(values(v), before) << "nothing ran";
}

// hdsm::launch with an empty operand on OpenCL: the kernel gets a null buffer (a device's share of a
// split that got no elements), and the other operands work as ever.
TEST(EmptyLaunchOperand, opencl) {
  std::string why;
  const std::unique_ptr<hdsm::Runtime> rt = hdsm::test::opencl_runtime(why);
  if (!rt) GTEST_SKIP() << why;
  const auto probe = hdsm::with_opencl(
      "__kernel void probe_null(__global const float* a, __global int* out) { out[0] = a == 0 ? 1 : 2; }",
      hdsm::per_thread("probe_null",
                       [](const hdsm::Thread&, const float* a, int* out) { out[0] = a == nullptr ? 1 : 2; }));
  const hdsm::ContainerOptions o{rt.get()};
  hdsm::Vector<float> v(10, 1.0f, o);
  hdsm::Vector<int> seen(1, 0, o);
  const unsigned device = static_cast<unsigned>(rt->default_device().properties().index);
  hdsm::launch(device, probe, hdsm::cover(1), hdsm::in(v.range(3, 0)), hdsm::out(seen));
  EXPECT_EQ(seen[0], 1);
}

}  // namespace
