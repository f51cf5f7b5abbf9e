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

TEST(CpuBinding, CompactOrderKeepsPackagesCachesAndCoresTogether) {
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
  // Package 0 first, all of it; within it the first cache's cores; a core's two threads together.
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(places.at(order[i]).package, 0) << i;
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(places.at(order[i]).last_level_cache, 0) << i;
  for (std::size_t i = 0; i < order.size(); i += 2) {
    EXPECT_EQ(places.at(order[i]).core, places.at(order[i + 1]).core) << i;
    EXPECT_EQ(places.at(order[i]).package, places.at(order[i + 1]).package) << i;
  }
  EXPECT_EQ(order[0], 0);
  EXPECT_EQ(order[1], 16);
  EXPECT_EQ(order[2], 2);
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
  const os::CpuPlace p = os::cpu_place(cpus[0]);
  EXPECT_GE(p.package, 0);
  EXPECT_GE(p.core, 0);
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

TEST(CpuBinding, ACpuOutsideTheMachineIsRefusedByName) {
  try {
    os::bind_thread(::pthread_self(), 1 << 20, "the test's thread");
    FAIL() << "bound to CPU 2^20";
  } catch (const hdsm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("1048576"), std::string::npos) << e.what();
  }
}

}  // namespace
