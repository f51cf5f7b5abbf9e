// Row-wise and column-wise reductions of a matrix: on the host, on 1, 2 and 3 sim devices (rows or
// columns split, columns as strided submatrices) and on PoCL they equal a loop; shapes that do not
// fit are errors.
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "skeletons/opencl_runtime.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

HDSM_USER_FUNCTION(r2_add, long, (long a, long b), { return a + b; })
HDSM_USER_FUNCTION(r2_first_odd, long, (long a, long b), { return (a % 2 != 0) ? a : b; })

void check(hdsm::Runtime& rt, hdsm::SkeletonBackend backend, std::initializer_list<unsigned> devices,
           std::size_t rows, std::size_t cols) {
  hdsm::Matrix<long> m(rows, cols, hdsm::ContainerOptions{&rt});
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) m(i, j) = static_cast<long>((i * 131 + j * 17) % 97) - 40;
  hdsm::Vector<long> by_row(rows, hdsm::ContainerOptions{&rt}), by_col(cols, hdsm::ContainerOptions{&rt});
  hdsm::Reduce<r2_add> sum;
  sum.backend(backend).devices(devices);
  sum.rows(by_row, m);
  sum.cols(by_col, m);
  hdsm::Vector<long> odd(rows, hdsm::ContainerOptions{&rt});
  hdsm::Reduce<r2_first_odd> first_odd;  // associative, not commutative: the order of elements counts
  first_odd.backend(backend).devices(devices).rows(odd, m);
  for (std::size_t i = 0; i < rows; ++i) {
    long s = 0, o = m(i, 0);
    for (std::size_t j = 0; j < cols; ++j) {
      s += m(i, j);
      if (j > 0) o = (o % 2 != 0) ? o : m(i, j);
    }
    ASSERT_EQ(by_row[i], s) << "row " << i;
    ASSERT_EQ(odd[i], o) << "row " << i;
  }
  for (std::size_t j = 0; j < cols; ++j) {
    long s = 0;
    for (std::size_t i = 0; i < rows; ++i) s += m(i, j);
    ASSERT_EQ(by_col[j], s) << "column " << j;
  }
}

TEST(Reduce2D, RowsAndColumnsOnEveryBackendAndDeviceCount) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "3"));
  for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{301, 77}, {1, 5}, {6, 1}, {2, 1000}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    check(rt, hdsm::SkeletonBackend::host, {0}, rows, cols);
    check(rt, hdsm::SkeletonBackend::devices, {0}, rows, cols);
    check(rt, hdsm::SkeletonBackend::devices, {0, 1}, rows, cols);
    check(rt, hdsm::SkeletonBackend::devices, {2, 1, 0}, rows, cols);
  }
}

TEST(Reduce2D, ShapesThatDoNotFitAreErrors) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config());
  hdsm::Matrix<long> m(4, 3, hdsm::ContainerOptions{&rt}), empty(4, 0, hdsm::ContainerOptions{&rt});
  hdsm::Vector<long> three(3, hdsm::ContainerOptions{&rt}), four(4, hdsm::ContainerOptions{&rt});
  hdsm::Reduce<r2_add> sum;
  EXPECT_THROW(sum.rows(three, m), hdsm::InvalidArgument);
  EXPECT_THROW(sum.cols(four, m), hdsm::InvalidArgument);
  try {
    sum.rows(four, empty);
    FAIL();
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("Reduce<r2_add>::rows"), std::string::npos) << e.what();
  }
}

TEST(Reduce2DOnDevices, opencl) {
  std::string why;
  const std::unique_ptr<hdsm::Runtime> rt = hdsm::test::opencl_runtime(why);
  if (!rt) GTEST_SKIP() << why;
  check(*rt, hdsm::SkeletonBackend::devices, {}, 129, 65);
}

}  // namespace
