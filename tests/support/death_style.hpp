#pragma once

#include <gtest/gtest.h>

#include <string>

namespace hdsm::test {

// gtest's death_test_style for one test, restored when the test ends: the flag is the process's, and
// a process runs many tests (a shard of the sanitizer presets, or a program run by hand). A "fast"
// style left behind by a fork test made later tests' children plain forks of a process whose
// runtime they could not use.
class DeathTestStyle {
 public:
  explicit DeathTestStyle(const char* style) : previous_(GTEST_FLAG_GET(death_test_style)) {
    GTEST_FLAG_SET(death_test_style, style);
  }
  ~DeathTestStyle() { GTEST_FLAG_SET(death_test_style, previous_); }
  DeathTestStyle(const DeathTestStyle&) = delete;
  DeathTestStyle& operator=(const DeathTestStyle&) = delete;

 private:
  std::string previous_;
};

}  // namespace hdsm::test
