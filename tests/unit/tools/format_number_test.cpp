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

namespace {

// The MPI programs `hdsm bench` starts go through /bin/sh: their paths are quoted, quotes included.
TEST(ShellQuoted, QuotesEveryCharacterTheShellWouldRead) {
  using hdsm::tool::shell_quoted;
  EXPECT_EQ(shell_quoted("/opt/hdsm/libexec/hdsm/hdsm_mpi_transfer"),
            "'/opt/hdsm/libexec/hdsm/hdsm_mpi_transfer'");
  EXPECT_EQ(shell_quoted("/my dir/$x;`y`"), "'/my dir/$x;`y`'");
  EXPECT_EQ(shell_quoted("it's"), "'it'\\''s'");
}

// A program that is neither next to the running executable nor in the libexec directory is named
// with both places (an installed tool used to run programs from the build tree it was made in).
TEST(CompanionProgram, NamesBothPlacesWhenMissing) {
  try {
    (void)hdsm::tool::companion_program("no_such_hdsm_program");
    ADD_FAILURE() << "found a program that does not exist";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_hdsm_program is neither next to "), std::string::npos)
        << e.what();
  }
}

// A device's link in `hdsm info` and in the bench reports alike: a real device's rate is unknown,
// not unthrottled (the reports said "link unthrottled" for PoCL's device).
TEST(LinkText, SimLinksAreModelledAndRealOnesUnknown) {
  hdsm::DeviceProperties p;
  p.backend = hdsm::Backend::sim;
  EXPECT_EQ(hdsm::tool::link_text(p), "unthrottled");
  p.link_gbps = 12;
  EXPECT_EQ(hdsm::tool::link_text(p), "12 GB/s");
  p.link_gbps = 0;
  p.backend = hdsm::Backend::opencl;
  EXPECT_EQ(hdsm::tool::link_text(p), "unknown");
}

}  // namespace
