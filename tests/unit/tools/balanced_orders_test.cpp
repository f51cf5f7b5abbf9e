// The run orders of the benchmarks' interleaved versions and their medians (tools/hdsm/measure.hpp).
#include "measure.hpp"

#include <gtest/gtest.h>

#include <map>
#include <utility>

namespace {

using hdsm::tool::balanced_orders;

TEST(BalancedOrders, EveryVersionRunsOnceInEachPositionAndFollowsEveryOtherEquallyOften) {
  for (std::size_t n = 1; n <= 9; ++n) {
    SCOPED_TRACE(n);
    const auto rows = balanced_orders(n);
    const std::size_t squares = n % 2 == 0 || n == 1 ? 1 : 2;
    ASSERT_EQ(rows.size(), squares * n);
    std::map<std::pair<std::size_t, std::size_t>, int> at;       // (position, version) -> count
    std::map<std::pair<std::size_t, std::size_t>, int> follows;  // (before, after) -> count
    for (const auto& row : rows) {
      ASSERT_EQ(row.size(), n);
      for (std::size_t p = 0; p < n; ++p) {
        ASSERT_LT(row[p], n);
        ++at[{p, row[p]}];
        if (p > 0) ++follows[{row[p - 1], row[p]}];
      }
    }
    for (std::size_t p = 0; p < n; ++p)
      for (std::size_t v = 0; v < n; ++v) EXPECT_EQ((at[{p, v}]), static_cast<int>(squares)) << p << " " << v;
    for (std::size_t a = 0; a < n; ++a)
      for (std::size_t b = 0; b < n; ++b)
        EXPECT_EQ((follows[{a, b}]), a == b ? 0 : static_cast<int>(squares)) << a << " " << b;
  }
  EXPECT_TRUE(balanced_orders(0).empty());
}

// The reports' medians of an even number of runs (8 or 6 versions' runs in `bench adsm`).
TEST(Median, OfAnEvenCountIsTheMeanOfTheTwoMiddleSamples) {
  using hdsm::tool::median;
  EXPECT_EQ(median({}), 0.0);
  EXPECT_EQ(median({3.0}), 3.0);
  EXPECT_EQ(median({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(median({8.0, 1.0, 4.0, 2.0}), 3.0);
  EXPECT_EQ(median({1, 2, 3, 4, 5, 6, 7, 100}), 4.5);
}

}  // namespace
