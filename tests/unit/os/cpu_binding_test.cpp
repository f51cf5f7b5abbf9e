// Thread binding: the compact order of a machine's CPUs, the topology Linux gives for them, and a
// binding that gives the thread its CPUs back.
#include "os/cpu_binding.hpp"

#include <hdsm/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sched.h>

namespace {

namespace os = hdsm::os;

TEST(CpuBinding, CompactOrderKeepsPackagesAndCachesTogetherOneThreadPerCoreFirst) {
  // Two packages whose CPUs the kernel numbers alternately, two last-level caches per package, two
  // hardware threads per core (siblings numbered 16 apart), as on many dual-socket servers.
  std::map<int, os::CpuPlace> places;
  std::vector<int> cpus;
  for (int c = 0; c < 32; ++c) {
    const int n = c % 16;                     // CPUs c and c + 16 are one core's two threads
    const int package = n % 2, core = n / 2;  // 8 cores per package
    places[c] = {.package = package, .last_level_cache = package * 2 + core / 4, .core = core};
    cpus.push_back(c);
  }
  const std::vector<int> order = os::compact_order(cpus, [&](int c) { return places.at(c); });
  ASSERT_EQ(order.size(), cpus.size());
  EXPECT_TRUE(std::is_permutation(order.begin(), order.end(), cpus.begin()));
  // One thread of each of the 16 cores first (CPUs 0-15), then their second threads (16-31) in the
  // same order: package 0 first, within it the first cache's cores.
  for (std::size_t i = 0; i < 16; ++i) EXPECT_LT(order[i], 16) << i;
  for (std::size_t i = 16; i < 32; ++i) EXPECT_EQ(order[i], order[i - 16] + 16) << i;
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(places.at(order[i]).package, 0) << i;
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(places.at(order[i]).last_level_cache, 0) << i;
  EXPECT_EQ(order[0], 0);
  EXPECT_EQ(order[1], 2);
  EXPECT_EQ(order[8], 1);  // package 1's first core
}

TEST(CpuBinding, UnknownPlacesFallBackToTheCpuNumbers) {
  const std::vector<int> order = os::compact_order({5, 1, 3}, [](int) { return os::CpuPlace{}; });
  EXPECT_EQ(order, (std::vector<int>{1, 3, 5}));
}

TEST(CpuBinding, TheMachinesOwnTopologyIsRead) {
  if (!std::filesystem::exists("/sys/devices/system/cpu/cpu0/topology"))
    GTEST_SKIP() << "no CPU topology in /sys here";
  const std::vector<int> cpus = os::allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  // -1 where the kernel does not know (some VMs and arm64 machines give no package).
  const os::CpuPlace p = os::cpu_place(cpus[0]);
  EXPECT_GE(p.package, -1);
  EXPECT_GE(p.core, -1);
  EXPECT_GE(p.last_level_cache, -1);
  const std::vector<int> order = os::compact_order(cpus, [](int c) { return os::cpu_place(c); });
  EXPECT_TRUE(std::is_permutation(order.begin(), order.end(), cpus.begin(), cpus.end()));
  const os::CpuPlace missing = os::cpu_place(cpus[0], "/nonexistent");
  EXPECT_EQ(missing.package, -1);
  EXPECT_EQ(missing.last_level_cache, -1);
  EXPECT_EQ(missing.core, -1);
}

TEST(CpuBinding, AScopedBindingGivesTheThreadItsCpusBack) {
  // On a thread of its own, so that the test program's main thread is never bound.
  std::thread([] {
    const std::vector<int> before = os::allowed_cpus();
    {
      const os::ScopedBinding bound(before.back(), "the test's thread");
      EXPECT_EQ(os::allowed_cpus(), std::vector<int>{before.back()});
      EXPECT_EQ(::sched_getcpu(), before.back());
    }
    EXPECT_EQ(os::allowed_cpus(), before);
    {
      const os::ScopedBinding unbound(std::nullopt, "the test's thread");
      EXPECT_EQ(os::allowed_cpus(), before);
    }
  }).join();
}

TEST(CpuBinding, AScopedBindingToACpuTheThreadMayNotUseLeavesItAlone) {
  std::thread([] {
    const std::vector<int> cpus = os::allowed_cpus();
    EXPECT_EQ(os::usable_cpus(), cpus.size());
    if (cpus.size() < 2) GTEST_SKIP() << "one CPU here";
    const os::ScopedBinding outer(cpus[0], "the test's thread");
    EXPECT_EQ(os::usable_cpus(), 1u);
    {
      const os::ScopedBinding inner(cpus[1], "the test's thread");  // not among its CPUs now
      EXPECT_EQ(os::allowed_cpus(), std::vector<int>{cpus[0]});
    }
    EXPECT_EQ(os::allowed_cpus(), std::vector<int>{cpus[0]});
  }).join();
}

TEST(CpuBinding, ACpuOutsideTheMachineIsRefusedByName) {
  try {
    os::bind_thread(::pthread_self(), 1 << 20, "the test's thread");
    FAIL() << "bound to CPU 2^20";
  } catch (const hdsm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("1048576"), std::string::npos) << e.what();
  }
}

}  // namespace
