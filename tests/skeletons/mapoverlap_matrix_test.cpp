// MapOverlap on matrices: row-wise, column-wise and 2D stencils with every edge mode, on the host, 1,
// 2 and 3 sim devices (parts split by rows, each fetching its halo rows, and the other end's rows in
// cyclic mode) and PoCL, against loops; the halo rows a two-device call copies; errors.
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "skeletons/opencl_runtime.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace {

// The 1D weighted sum of mapoverlap_test.cpp: every element's position in the window counts.
HDSM_USER_FUNCTION(mm_weigh, long, (const long* w, long r, long k), {
  long sum = k;
  for (long j = -r; j <= r; ++j) sum += (j + r + 1) * w[j];
  return sum;
})

// A 2D weighted sum: the weight of w(di, dj) is 7 di + 3 dj + 100.
HDSM_USER_FUNCTION(mm_weigh2d, long, (const long* w, long stride, long rr, long cr), {
  long sum = 0;
  for (long di = -rr; di <= rr; ++di)
    for (long dj = -cr; dj <= cr; ++dj) sum += (7 * di + 3 * dj + 100) * w[di * stride + dj];
  return sum;
})

// A float 5-point stencil (Jacobi step).
HDSM_USER_FUNCTION(mm_jacobi, float, (const float* w, long stride),
                   { return 0.25f * (w[-stride] + w[stride] + w[-1] + w[1]); })

constexpr long kPad = -9;
constexpr long kUntouched = 123'456;

struct Grid {
  std::size_t rows, cols;
  std::vector<long> v;
  long at(long i, long j, hdsm::Edge edge) const {
    const long r = static_cast<long>(rows), c = static_cast<long>(cols);
    if (i < 0 || i >= r || j < 0 || j >= c) {
      if (edge == hdsm::Edge::pad) return kPad;
      if (edge == hdsm::Edge::cyclic) {
        i = (i + r) % r;
        j = (j + c) % c;
      } else {
        i = std::clamp(i, 0L, r - 1);
        j = std::clamp(j, 0L, c - 1);
      }
    }
    return v[static_cast<std::size_t>(i) * cols + static_cast<std::size_t>(j)];
  }
};

Grid grid(std::size_t rows, std::size_t cols) {
  Grid g{rows, cols, std::vector<long>(rows * cols)};
  for (std::size_t k = 0; k < g.v.size(); ++k) g.v[k] = static_cast<long>((k * 7919) % 1009) - 500;
  return g;
}

// The loop: radius rr over rows and cr over columns; 2D weighs as mm_weigh2d, else as mm_weigh along
// the one direction with a radius.
std::vector<long> loop(const Grid& g, long rr, long cr, bool two_d, hdsm::Edge edge) {
  const long r = static_cast<long>(g.rows), c = static_cast<long>(g.cols);
  std::vector<long> out(g.v.size(), kUntouched);
  for (long i = 0; i < r; ++i)
    for (long j = 0; j < c; ++j) {
      if (edge == hdsm::Edge::none && (i < rr || i + rr >= r || j < cr || j + cr >= c)) continue;
      long sum = two_d ? 0 : 3;
      for (long di = -rr; di <= rr; ++di)
        for (long dj = -cr; dj <= cr; ++dj) {
          const long v = g.at(i + di, j + dj, edge);
          sum += two_d ? (7 * di + 3 * dj + 100) * v : (di + dj + rr + cr + 1) * v;
        }
      out[static_cast<std::size_t>(i * c + j)] = sum;
    }
  return out;
}

enum class Form { rows, cols, two_d };

std::vector<long> run(hdsm::Runtime& rt, const Grid& g, Form form, long rr, long cr, hdsm::Edge edge,
                      hdsm::SkeletonBackend backend, const std::vector<unsigned>& devices) {
  const hdsm::ContainerOptions o{&rt};
  hdsm::Matrix<long> in(g.rows, g.cols, o), out(g.rows, g.cols, kUntouched, o);
  std::copy(g.v.begin(), g.v.end(), in.data());
  if (form == Form::two_d) {
    hdsm::MapOverlap2D<mm_weigh2d> mo;
    mo.backend(backend)
        .overlap(static_cast<std::size_t>(rr), static_cast<std::size_t>(cr))
        .edge(edge)
        .pad(kPad);
    if (!devices.empty()) mo.devices(devices);
    mo(out, in, rr, cr);
  } else {
    hdsm::MapOverlap<mm_weigh> mo;
    const long r = form == Form::rows ? cr : rr;
    mo.backend(backend).overlap(static_cast<std::size_t>(r)).edge(edge).pad(kPad);
    if (!devices.empty()) mo.devices(devices);
    if (form == Form::rows)
      mo.rows(out, in, r, 3L);
    else
      mo.cols(out, in, r, 3L);
  }
  return std::vector<long>(out.data(), out.data() + out.size());
}

constexpr hdsm::Edge kEdges[] = {hdsm::Edge::none, hdsm::Edge::cyclic, hdsm::Edge::duplicate,
                                 hdsm::Edge::pad};

void check_all(hdsm::Runtime& rt, hdsm::SkeletonBackend backend, const std::vector<unsigned>& devices,
               const std::string& where) {
  const Grid g = grid(13, 17);
  struct Case {
    Form form;
    long rr, cr;
    const char* name;
  };
  for (const Case& c : {Case{Form::rows, 0, 2, "rows r2"}, Case{Form::rows, 0, 0, "rows r0"},
                        Case{Form::cols, 3, 0, "cols r3"}, Case{Form::cols, 1, 0, "cols r1"},
                        Case{Form::two_d, 1, 1, "2D 1x1"}, Case{Form::two_d, 2, 3, "2D 2x3"},
                        Case{Form::two_d, 0, 2, "2D 0x2"}})
    for (hdsm::Edge edge : kEdges) {
      SCOPED_TRACE(where + ", " + c.name + ", edge " + std::to_string(static_cast<int>(edge)));
      EXPECT_EQ(run(rt, g, c.form, c.rr, c.cr, edge, backend, devices),
                loop(g, c.rr, c.cr, c.form == Form::two_d, edge));
    }
}

TEST(MapOverlapMatrix, EveryFormAndEdgeOnTheHostAndSimDevices) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "3"));
  check_all(rt, hdsm::SkeletonBackend::host, {}, "host");
  check_all(rt, hdsm::SkeletonBackend::devices, {0}, "1 device");
  check_all(rt, hdsm::SkeletonBackend::devices, {0, 1}, "2 devices");
  check_all(rt, hdsm::SkeletonBackend::devices, {2, 0, 1}, "3 devices");
}

// A part of more rows than a grid dimension holds on CUDA (65535): the launch's rows go on in its z
// dimension.
TEST(MapOverlapMatrix, MoreRowsThanAGridDimensionHolds) {
  const Grid g = grid(65535 + 77, 3);
  const std::vector<long> want = loop(g, 1, 1, true, hdsm::Edge::cyclic);
  hdsm::Runtime rt(hdsm::test::fast_sim_config());
  EXPECT_EQ(run(rt, g, Form::two_d, 1, 1, hdsm::Edge::cyclic, hdsm::SkeletonBackend::devices, {0}), want);
  std::string why;
  const std::unique_ptr<hdsm::Runtime> ocl = hdsm::test::opencl_runtime(why);
  if (!ocl) GTEST_SKIP() << why;
  EXPECT_EQ(run(*ocl, g, Form::two_d, 1, 1, hdsm::Edge::cyclic, hdsm::SkeletonBackend::devices, {}), want);
}

// Narrow matrices (one column, four): blocks as wide as the rows, every form, on the host, sim
// devices and OpenCL.
TEST(MapOverlapMatrix, NarrowMatrices) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  std::string why;
  const std::unique_ptr<hdsm::Runtime> ocl = hdsm::test::opencl_runtime(why);
  for (const std::size_t cols : {std::size_t{1}, std::size_t{4}}) {
    const Grid g = grid(3001, cols);
    for (hdsm::Edge edge : kEdges) {
      SCOPED_TRACE(std::to_string(cols) + " columns, edge " + std::to_string(static_cast<int>(edge)));
      const auto want_cols = loop(g, 2, 0, false, edge), want_2d = loop(g, 1, 0, true, edge);
      EXPECT_EQ(run(rt, g, Form::cols, 2, 0, edge, hdsm::SkeletonBackend::host, {}), want_cols);
      EXPECT_EQ(run(rt, g, Form::cols, 2, 0, edge, hdsm::SkeletonBackend::devices, {0, 1}), want_cols);
      EXPECT_EQ(run(rt, g, Form::two_d, 1, 0, edge, hdsm::SkeletonBackend::devices, {1, 0}), want_2d);
      if (ocl) {
        EXPECT_EQ(run(*ocl, g, Form::cols, 2, 0, edge, hdsm::SkeletonBackend::devices, {}), want_cols);
        EXPECT_EQ(run(*ocl, g, Form::two_d, 1, 0, edge, hdsm::SkeletonBackend::devices, {}), want_2d);
      }
    }
  }
}

TEST(MapOverlapMatrix, opencl) {
  std::string why;
  const std::unique_ptr<hdsm::Runtime> rt = hdsm::test::opencl_runtime(why);
  if (!rt) GTEST_SKIP() << why;
  check_all(*rt, hdsm::SkeletonBackend::devices, {}, "OpenCL");
}

// Two devices, a column-wise radius of 2 on 64 rows: each part copies its 32 rows and 2 halo rows of
// the input; a cyclic call also the other end's 2 rows. Row-wise, no halo.
TEST(MapOverlapMatrix, PartsCopyTheirRowsAndTheHaloRows) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  const hdsm::ContainerOptions o{&rt};
  constexpr std::size_t rows = 64, cols = 40, row_bytes = cols * sizeof(long);
  const auto copied = [&](hdsm::Edge edge, bool by_rows) {
    hdsm::Matrix<long> in(rows, cols, 1L, o), out(rows, cols, o);
    hdsm::MapOverlap<mm_weigh> mo;
    mo.devices({0, 1}).overlap(2).edge(edge);
    if (by_rows)
      mo.rows(out, in, 2L, 0L);
    else
      mo.cols(out, in, 2L, 0L);
    EXPECT_EQ(out.at(rows / 2, cols / 2), 15);
    return in.stats().host_to_device_bytes;
  };
  EXPECT_EQ(copied(hdsm::Edge::duplicate, false), (rows + 4) * row_bytes);
  EXPECT_EQ(copied(hdsm::Edge::cyclic, false), (rows + 8) * row_bytes);
  EXPECT_EQ(copied(hdsm::Edge::cyclic, true), rows * row_bytes);
}

// Steps that alternate two matrices on two devices: a step's input part is the part the previous
// step wrote on the same device, so each step moves the halo rows between the devices and nothing
// else (the input used to be one copy of the part and its halo, which a whole copy of the part on
// the device refilled at every step, and the part's copy twice the device memory). A radius of 2.
TEST(MapOverlapMatrix, AlternatingStepsOnTwoDevicesMoveOnlyTheHaloRows) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  const hdsm::ContainerOptions o{&rt};
  constexpr std::size_t rows = 64, cols = 40, row_bytes = cols * sizeof(long);
  hdsm::Matrix<long> a(rows, cols, 1L, o), b(rows, cols, o);
  hdsm::MapOverlap2D<mm_weigh2d> step;
  step.devices({0, 1}).overlap(2, 1).edge(hdsm::Edge::duplicate);
  step(b, a, 2L, 1L);
  step(a, b, 2L, 1L);
  const hdsm::ContainerStats a0 = a.stats(), b0 = b.stats();
  constexpr int kSteps = 2;  // the weighted sums grow about 1500x a step: 4 steps stay within a long
  for (int k = 0; k < kSteps / 2; ++k) {
    step(b, a, 2L, 1L);
    step(a, b, 2L, 1L);
  }
  for (const auto& [m, before] : {std::pair{&a, a0}, std::pair{&b, b0}}) {
    const hdsm::ContainerStats now = m->stats();
    EXPECT_EQ(now.on_device_bytes - before.on_device_bytes, 0u);
    EXPECT_EQ(now.host_to_device_bytes - before.host_to_device_bytes, 0u);
    // Read as input kSteps / 2 times, each time 2 rows each way between the devices.
    EXPECT_EQ(now.peer_bytes - before.peer_bytes, kSteps / 2 * 2 * 2 * row_bytes);
    EXPECT_EQ(now.device_allocated_bytes - before.device_allocated_bytes, 0u);
  }
  // And the values: every step of the duplicate-edge weighted sum, against the loop.
  Grid g{rows, cols, std::vector<long>(rows * cols, 1L)};
  for (int k = 0; k < kSteps + 2; ++k) g.v = loop(g, 2, 1, true, hdsm::Edge::duplicate);
  EXPECT_EQ(std::vector<long>(a.data(), a.data() + a.size()), g.v);
}

// A user function that keeps the window in a pointer variable reads a private copy on OpenCL (its
// text could not take global memory there), and gives what the loop gives everywhere.
HDSM_USER_FUNCTION(mm_through_pointer, long, (const long* w, long stride, long rr, long cr), {
  const long* centre = w;
  long sum = 0;
  for (long di = -rr; di <= rr; ++di)
    for (long dj = -cr; dj <= cr; ++dj) sum += (7 * di + 3 * dj + 100) * centre[di * stride + dj];
  return sum;
})

// The same through &w[...]: a pointer into the window, which a private pointer variable takes.
HDSM_USER_FUNCTION(mm_through_address, long, (const long* w, long stride, long rr, long cr), {
  const long* centre = &w[0];
  long sum = 0;
  for (long di = -rr; di <= rr; ++di)
    for (long dj = -cr; dj <= cr; ++dj) sum += (7 * di + 3 * dj + 100) * centre[di * stride + dj];
  return sum;
})

// A column-wise call on OpenCL reads the column in place through a copy of F whose every w[k] reads
// w[k * stride] (brackets inside an index included).
HDSM_USER_FUNCTION(mm_nested, long, (const long* w, long r), { return w[w[0] > 0 ? r : -r] + w[(r)]; })

TEST(MapOverlapMatrix, AColumnWiseWindowInPlaceIsStrided) {
  const std::string weigh = hdsm::detail::opencl_strided_variant<mm_weigh>();
  EXPECT_NE(weigh.find("mm_weigh_strided(__global const long* w, long hdsm_stride, long r, long k)"),
            std::string::npos)
      << weigh;
  EXPECT_NE(weigh.find("w[(long)(j) * hdsm_stride]"), std::string::npos) << weigh;
  const std::string nested = hdsm::detail::opencl_strided_variant<mm_nested>();
  EXPECT_NE(nested.find("w[(long)(w[(long)(0) * hdsm_stride] > 0 ? r : -r) * hdsm_stride] + w[(long)((r)) * "
                        "hdsm_stride]"),
            std::string::npos)
      << nested;
}

TEST(MapOverlapMatrix, WindowInAPointerVariable) {
  EXPECT_FALSE(hdsm::detail::opencl_window_in_place<mm_through_pointer>());
  EXPECT_FALSE(hdsm::detail::opencl_window_in_place<mm_through_address>());
  EXPECT_TRUE(hdsm::detail::opencl_window_in_place<mm_weigh2d>());
  EXPECT_TRUE(hdsm::detail::opencl_window_in_place<mm_jacobi>());
  const Grid g = grid(23, 9);
  const auto check = [&](hdsm::Runtime& rt, const std::vector<unsigned>& devices, const std::string& where) {
    const hdsm::ContainerOptions o{&rt};
    for (hdsm::Edge edge : kEdges) {
      SCOPED_TRACE(where + ", edge " + std::to_string(static_cast<int>(edge)));
      hdsm::Matrix<long> in(g.rows, g.cols, o), out(g.rows, g.cols, kUntouched, o);
      std::copy(g.v.begin(), g.v.end(), in.data());
      hdsm::MapOverlap2D<mm_through_pointer> mo;
      mo.overlap(2, 1).edge(edge).pad(kPad);
      if (!devices.empty()) mo.devices(devices);
      mo(out, in, 2L, 1L);
      EXPECT_EQ(std::vector<long>(out.data(), out.data() + out.size()), loop(g, 2, 1, true, edge));
      hdsm::Matrix<long> out2(g.rows, g.cols, kUntouched, o);
      hdsm::MapOverlap2D<mm_through_address> mo2;
      mo2.overlap(2, 1).edge(edge).pad(kPad);
      if (!devices.empty()) mo2.devices(devices);
      mo2(out2, in, 2L, 1L);
      EXPECT_EQ(std::vector<long>(out2.data(), out2.data() + out2.size()), loop(g, 2, 1, true, edge));
    }
  };
  hdsm::Runtime sim(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  check(sim, {0, 1}, "2 sim devices");
  std::string why;
  const std::unique_ptr<hdsm::Runtime> ocl = hdsm::test::opencl_runtime(why);
  if (!ocl) GTEST_SKIP() << why;
  check(*ocl, {}, "OpenCL");
}

TEST(MapOverlapMatrix, AJacobiStepInFloat) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  const hdsm::ContainerOptions o{&rt};
  constexpr std::size_t n = 50;
  hdsm::Matrix<float> a(n, n, o), b(n, n, o);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) a(i, j) = static_cast<float>((i * 31 + j * 17) % 23);
  hdsm::MapOverlap2D<mm_jacobi> step;
  step.devices({0, 1}).overlap(1, 1).edge(hdsm::Edge::pad).pad(0.0f);
  step(b, a);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      const float up = i > 0 ? a(i - 1, j) : 0.0f, down = i + 1 < n ? a(i + 1, j) : 0.0f;
      const float left = j > 0 ? a(i, j - 1) : 0.0f, right = j + 1 < n ? a(i, j + 1) : 0.0f;
      ASSERT_EQ(b.at(i, j), 0.25f * (up + down + left + right)) << i << ", " << j;
    }
}

TEST(MapOverlapMatrix, ErrorsNameTheSkeletonAndTheSizes) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config());
  const hdsm::ContainerOptions o{&rt};
  hdsm::Matrix<long> a(4, 6, o), b(4, 6, o), c(5, 6, o);
  hdsm::MapOverlap<mm_weigh> mo;
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const hdsm::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(
      message([&] { mo.overlap(5).cols(b, a, 5L, 0L); }).find("a radius of 5 rows is larger than the 4 x 6"),
      std::string::npos)
      << "column-wise: one radius, of rows";
  EXPECT_NE(
      message([&] { mo.overlap(1).rows(c, a, 1L, 0L); }).find("MapOverlap<mm_weigh>::rows: out is 5 x 6"),
      std::string::npos);
  EXPECT_NE(message([&] { mo.rows(a, a, 1L, 0L); }).find("different matrices"), std::string::npos);
  hdsm::MapOverlap2D<mm_weigh2d> mo2;
  EXPECT_NE(message([&] { mo2.overlap(9, 1); }).find("MapOverlap2D<mm_weigh2d>: overlap 9 x 1"),
            std::string::npos);
  EXPECT_NE(message([&] {
              mo2.overlap(2, 7)(b, a, 2L, 7L);
            }).find("a radius of 2 rows and 7 columns is larger than the 4 x 6 matrix"),
            std::string::npos);
}

}  // namespace
