// The numbers of the bench reports: three significant digits below 10, so that a ratio near 1 reads
// the same in a table and in the summary beside it (0.12 against 0.955 before), with its zeros.
#include "common.hpp"

#include <gtest/gtest.h>

namespace {

using hdsm::tool::format_number;

TEST(FormatNumber, KeepsThreeSignificantDigitsBelowTen) {
  EXPECT_EQ(format_number(0), "0");
  EXPECT_EQ(format_number(1), "1.00");
  EXPECT_EQ(format_number(0.9554), "0.955");
  EXPECT_EQ(format_number(0.12), "0.120");
  EXPECT_EQ(format_number(0.0933), "0.0933");
  EXPECT_EQ(format_number(3.516), "3.52");
  EXPECT_EQ(format_number(-1.5), "-1.50");
  EXPECT_EQ(format_number(12.34), "12.3");
  EXPECT_EQ(format_number(1234.4), "1234");
  EXPECT_EQ(format_number(3.2e-7), "3.20e-07");
}

}  // namespace
