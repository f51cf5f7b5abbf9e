// OpenCL programs built once per machine: the first runtime compiles the source and stores the
// binary in HDSM_CACHE_DIR, a later runtime loads it without compiling, and a damaged entry is
// rebuilt from source and replaced. (Test names contain "opencl" for the ASan entry that runs them.)
#include <hdsm/hdsm.hpp>

#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

namespace {

const hdsm::Kernel& scale_kernel() {
  static const hdsm::Kernel k = [] {
    auto kernel = hdsm::per_thread("scale_by_three", [](const hdsm::Thread& t, int* x, std::uint64_t n) {
      if (const auto i = t.global_x(); i < n) x[i] *= 3;
    });
    kernel.opencl_source = R"(
      __kernel void scale_by_three(__global int* x, ulong n) {
        const size_t i = get_global_id(0);
        if (i < n) x[i] *= 3;
      })";
    return kernel;
  }();
  return k;
}

struct Programs {
  std::uint64_t built = 0, loaded = 0;
};

/// Runs scale_by_three once on the first OpenCL device with this cache directory; returns what
/// that device compiled and loaded, after checking the result.
Programs run_once(const std::string& cache_dir) {
  auto config = hdsm::Config::defaults();
  config.set("HDSM_DEVICE", "opencl").set("HDSM_OPENCL_MEMORY", "64MiB").set("HDSM_CACHE_DIR", cache_dir);
  hdsm::Runtime rt(config);
  const std::uint64_t n = 1000;
  auto* x = static_cast<int*>(rt.alloc(n * sizeof(int)));
  for (std::uint64_t i = 0; i < n; ++i) x[i] = static_cast<int>(i);
  rt.call(scale_kernel(), hdsm::cover(n), hdsm::inout(x), n);
  rt.sync();
  for (std::uint64_t i = 0; i < n; ++i) EXPECT_EQ(x[i], static_cast<int>(3 * i)) << "element " << i;
  rt.free(x);
  for (const auto& d : rt.stats().devices)
    if (d.name == "opencl0") return {d.program_builds, d.program_cache_loads};
  ADD_FAILURE() << "no opencl0 in the statistics";
  return {};
}

class ProgramCacheOnDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    if (hdsm::test::opencl_only_without_lsan())
      GTEST_SKIP() << "OpenCL under ASan runs in conformance.opencl_without_lsan";
    auto config = hdsm::Config::defaults();
    config.set("HDSM_DEVICE", "opencl").set("HDSM_OPENCL_MEMORY", "64MiB");
    try {
      hdsm::Runtime probe(config);
    } catch (const hdsm::NoDevice& e) {
      GTEST_SKIP() << "no OpenCL device here: " << e.what();
    }
  }
};

TEST_F(ProgramCacheOnDisk, opencl_second_runtime_loads_the_binary_instead_of_compiling) {
  hdsm::test::ScratchDir dir("opencl_program_cache");
  const Programs first = run_once(dir.path().string());
  EXPECT_EQ(first.built, 1u);
  EXPECT_EQ(first.loaded, 0u);
  ASSERT_EQ(dir.files().size(), 1u) << "the binary was not stored";
  const Programs second = run_once(dir.path().string());
  EXPECT_EQ(second.built, 0u) << "compiled again despite the cache";
  EXPECT_EQ(second.loaded, 1u);
}

TEST_F(ProgramCacheOnDisk, opencl_damaged_entry_is_rebuilt_and_replaced) {
  hdsm::test::ScratchDir dir("opencl_program_cache");
  run_once(dir.path().string());
  ASSERT_EQ(dir.files().size(), 1u);
  const auto entry = dir.path() / dir.files().front();
  const auto size = std::filesystem::file_size(entry);
  std::filesystem::resize_file(entry, size / 2);
  const Programs damaged = run_once(dir.path().string());
  EXPECT_EQ(damaged.built, 1u);
  EXPECT_EQ(damaged.loaded, 0u);
  // The rebuilt binary replaced the entry: the next runtime loads it instead of compiling. (Not its
  // size: PoCL's binaries of one program differ in size from build to build.)
  ASSERT_EQ(dir.files().size(), 1u);
  EXPECT_NE(std::filesystem::file_size(entry), size / 2) << "the damaged entry was not replaced";
  const Programs after = run_once(dir.path().string());
  EXPECT_EQ(after.loaded, 1u) << "the replaced entry does not load";
  EXPECT_EQ(after.built, 0u);
}

TEST_F(ProgramCacheOnDisk, opencl_cache_off_compiles_in_every_runtime) {
  EXPECT_EQ(run_once("off").built, 1u);
  const Programs again = run_once("off");
  EXPECT_EQ(again.built, 1u);
  EXPECT_EQ(again.loaded, 0u);
}

}  // namespace
