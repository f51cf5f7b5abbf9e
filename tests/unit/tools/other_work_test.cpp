// The machine's other work during a benchmark suite (tools/hdsm/measure.hpp).
#include "measure.hpp"

#include "os/cpu_binding.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include <sys/resource.h>

namespace {

using hdsm::tool::busy_ticks;

constexpr const char* kStat =
    "cpu  100 0 50 9000 10 0 0 0 0 0\n"
    "cpu0 10 1 5 4000 3 2 1 7 4 0\n"
    "cpu1 20 0 10 5000 7 0 0 0 0 0\n"
    "cpu10 1000 0 0 0 0 0 0 0 0 0\n"
    "intr 12345\n";

TEST(BusyTicks, SumsUserNiceSystemIrqSoftirqAndStealOfTheListedCpusOnly) {
  const std::vector<int> cpu0{0}, cpu1{1}, both{0, 1}, ten{10};
  // guest (4) is already counted in user; idle and iowait are not busy.
  EXPECT_EQ(busy_ticks(kStat, cpu0), 10 + 1 + 5 + 2 + 1 + 7);
  EXPECT_EQ(busy_ticks(kStat, cpu1), 30);
  EXPECT_EQ(busy_ticks(kStat, both), 56);
  EXPECT_EQ(busy_ticks(kStat, ten), 1000);  // "cpu1 " is not a prefix of "cpu10"
}

TEST(BusyTicks, AMissingOrMalformedCpuLineIsNoMeasurement) {
  const std::vector<int> absent{0, 2};
  EXPECT_LT(busy_ticks(kStat, absent), 0);
  const std::vector<int> cpu0{0};
  EXPECT_LT(busy_ticks("cpu0 1 2 3\n", cpu0), 0);
  EXPECT_LT(busy_ticks("cpu0 1 x 3 4 5 6 7 8\n", cpu0), 0);
  EXPECT_LT(busy_ticks("xcpu0 1 2 3 4 5 6 7 8\n", cpu0), 0);
}

double own_cpu_seconds() {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

TEST(OtherWork, ThisProcesssOwnTimeIsNotOtherWork) {
  // One spinning thread per usable core: with this process's time counted as others', the others'
  // share and this process's own would add up to about twice the cores' time. Whatever the machine's
  // other processes do meanwhile, the two together cannot exceed it (plus the clock tick's rounding).
  const unsigned cores = hdsm::os::usable_cpus();
  const double own_before = own_cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  const hdsm::tool::OtherWork others;
  const auto spin = [&] {
    while (std::chrono::steady_clock::now() < start + std::chrono::milliseconds(400)) {
    }
  };
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < cores; ++i) threads.emplace_back(spin);
  spin();
  for (auto& t : threads) t.join();
  const double share = others.share();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double own = (own_cpu_seconds() - own_before) / (wall * cores);
  ASSERT_GE(share, 0.0) << "/proc/stat unreadable";
  EXPECT_GT(own, 0.05);
  EXPECT_LE(share + own, 1.1) << "others " << share << ", own " << own;
}

}  // namespace
