// The runtime: device selection, statistics at exit, tracing and the C API.
#include <hdsm/hdsm.h>
#include <hdsm/hdsm.hpp>

#include "support/death_style.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>

namespace {

hdsm::Config small() {
  auto c = hdsm::Config::defaults();
  c.set("HDSM_SIM_MEMORY", "64MiB").set("HDSM_SIM_LINK_GBPS", "0").set("HDSM_SIM_LATENCY_US", "0");
  return c;
}

TEST(Runtime, DefaultDeviceFollowsHdsmDevice) {
  auto c = small();
  c.set("HDSM_SIM_DEVICES", "3").set("HDSM_DEVICE", "sim:2");
  hdsm::Runtime rt(c);
  EXPECT_EQ(rt.default_device().name(), "sim2");
  EXPECT_EQ(rt.devices().size(), 3u);
  EXPECT_THROW((void)rt.device(3), hdsm::InvalidArgument);
}

TEST(Runtime, MissingDeviceListsWhatExists) {
  auto c = small();
  for (const char* missing : {"cuda", "opencl"}) {  // both backends switched off
    c.set("HDSM_DEVICE", missing).set("HDSM_OPENCL", "off").set("HDSM_CUDA", "off");
    try {
      hdsm::Runtime rt(c);
      FAIL() << missing << " device found where none exists";
    } catch (const hdsm::NoDevice& e) {
      EXPECT_NE(std::string(e.what()).find("sim0"), std::string::npos) << e.what();
    }
  }
  c.set("HDSM_DEVICE", "sim:7");
  try {
    hdsm::Runtime rt{c};
    ADD_FAILURE() << "sim:7 was found";
  } catch (const hdsm::NoDevice& e) {
    // Each device with its own index among its backend's (every one read sim:0 before).
    EXPECT_NE(std::string(e.what()).find("sim0 (sim:0), sim1 (sim:1)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c.set("HDSM_DEVICE", "sim:x"), hdsm::ConfigError);
}

TEST(Runtime, StatsArePrintedAtExitWhenAsked) {
  EXPECT_EXIT(
      {
        auto c = small();
        c.set("HDSM_STATS", "1");
        {
          hdsm::Runtime rt(c);
          auto& d = rt.default_device();
          auto q = d.create_queue();
          auto b = d.alloc(4096);
          char host[4096] = {};
          q->copy_to_device(b, 0, host, sizeof host);
          q->synchronize();
          d.free(b);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "hdsm statistics(.|\n)*sim0 H2D +4096 +1");
}

// A static smart pointer made before the default runtime's first use outlives it at exit: its free
// finds the runtime ended and does nothing (before, it read the destroyed runtime and crashed).
TEST(Runtime, AStaticObjectThatOutlivesTheDefaultRuntimeFreesNothingAtExit) {
  const hdsm::test::DeathTestStyle style("threadsafe");  // a fresh process, whose default runtime is unmade
  EXPECT_EXIT(
      {
        static hdsm::unique_ptr<int> early;  // constructed first, so destroyed after the runtime
        early = hdsm::make_unique<int>(100);
        early[5] = 5;
        if (early[5] != 5) std::_Exit(1);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// Two runtimes made at once by two threads of a fresh process, both opening OpenCL: PoCL's first
// discovery is not thread-safe (it crashed in clGetDeviceInfo, or one runtime found no device), so
// hdsm opens OpenCL once at a time. Five fresh processes: the crash came in most runs.
TEST(Runtime, TwoThreadsMakingRuntimesWithOpenclAtOnceBothGetTheDevice) {
  if (hdsm::test::opencl_only_without_lsan()) GTEST_SKIP() << "OpenCL under ASan runs without LeakSanitizer";
  // The parent probes for a device; the children (which run this body again up to EXPECT_EXIT) must
  // not, or OpenCL would be open before their threads start.
  if (GTEST_FLAG_GET(internal_run_death_test).empty()) try {
      const hdsm::Runtime probe(hdsm::Config::defaults().set("HDSM_DEVICE", "opencl"));
    } catch (const hdsm::NoDevice& e) {
      GTEST_SKIP() << e.what();
    }
  const hdsm::test::DeathTestStyle style("threadsafe");  // each a fresh process: OpenCL not yet opened
  for (int run = 0; run < 5; ++run)
    EXPECT_EXIT(
        {
          std::atomic<int> ready{0};
          std::atomic<int> with_opencl{0};
          const auto make = [&] {
            ready.fetch_add(1);
            while (ready.load() < 2) {
            }
            const hdsm::Runtime rt(hdsm::Config::defaults().set("HDSM_OPENCL", "on"));
            for (const hdsm::Device* d : rt.devices())
              if (d->properties().backend == hdsm::Backend::opencl) {
                with_opencl.fetch_add(1);
                break;
              }
          };
          std::thread a(make);
          std::thread b(make);
          a.join();
          b.join();
          std::exit(with_opencl.load() == 2 ? 0 : 3);
        },
        ::testing::ExitedWithCode(0), "");
}

// A process started with stderr closed (a daemon's 2>&-): the arena's memfd must not become
// descriptor 2, or every message to stderr lands in the first shared objects.
TEST(Runtime, AClosedStderrIsNotTakenByTheArena) {
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_EXIT(
      {
        ::close(STDERR_FILENO);
        hdsm::Runtime rt(small());
        auto* p = static_cast<unsigned char*>(rt.alloc(4096));
        std::memset(p, 7, 4096);
        static constexpr char kText[] = "a message to stderr, which is closed\n";
        (void)::write(STDERR_FILENO, kText, sizeof kText - 1);  // EBADF, as without hdsm
        for (int i = 0; i < 4096; ++i)
          if (p[i] != 7) std::_Exit(1);
        rt.free(p);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(Runtime, TraceHasOneLanePerEngineQueueAndHostThread) {
  char path[] = "hdsm-trace-XXXXXX.json";
  const int fd = ::mkstemps(path, 5);
  ASSERT_GE(fd, 0);
  ::close(fd);
  {
    auto c = small();
    c.set("HDSM_TRACE", path);
    hdsm::Runtime rt(c);
    auto& d = rt.default_device();
    auto q = d.create_queue();
    auto b = d.alloc(1 << 16);
    void* pinned = d.alloc_pinned(1 << 16);
    q->copy_to_device(b, 0, pinned, 1 << 16);
    q->copy_to_host(pinned, b, 0, 1 << 16);
    auto k = hdsm::per_thread("noop", [](const hdsm::Thread&, int) {});
    const hdsm::KernelArg args[] = {hdsm::KernelArg::value(1)};
    q->launch(k, hdsm::cover(64), args);
    q->synchronize();
    d.free_pinned(pinned);
    d.free(b);
  }
  std::ifstream in(path);
  const auto doc = nlohmann::json::parse(in);
  std::remove(path);
  std::map<int, std::string> lanes;
  std::multiset<std::string> spans_by_lane;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") lanes[e["tid"].get<int>()] = e["args"]["name"];
  }
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X")
      spans_by_lane.insert(lanes.at(e["tid"].get<int>()) + ": " + e["name"].get<std::string>());
  EXPECT_EQ(spans_by_lane.count("sim0 H2D engine: H2D 64 KiB"), 1u);
  EXPECT_EQ(spans_by_lane.count("sim0 D2H engine: D2H 64 KiB"), 1u);
  EXPECT_EQ(spans_by_lane.count("sim0 queue 0: kernel noop"), 1u);
  bool host_lane = false;
  for (const auto& s : spans_by_lane)
    host_lane |= s.starts_with("host thread") && s.find("synchronize sim0") != std::string::npos;
  EXPECT_TRUE(host_lane);
}

// The C API uses the implicit default runtime; run it in a child so the settings stay local.
TEST(CApi, ConfigDevicesStatsAndErrors) {
  // A fresh process, whose default runtime is not made yet (a fork of this one may have it).
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_EXIT(
      {
        bool ok = hdsm_config_set("HDSM_SIM_DEVICES", "3") == HDSM_SUCCESS;
        ok &= hdsm_config_set("HDSM_SIM_MEMORY", "32MiB") == HDSM_SUCCESS;
        ok &= hdsm_config_set("HDSM_SIM_DEVICES", "zero") == HDSM_ERROR_CONFIG;
        ok &= std::string(hdsm_last_error()).find("HDSM_SIM_DEVICES=zero") != std::string::npos;
        ok &= hdsm_config_set(nullptr, "1") == HDSM_ERROR_INVALID_ARGUMENT;
        size_t count = 0;
        ok &= hdsm_device_count(&count) == HDSM_SUCCESS && count == 3;
        hdsm_device_info info;
        ok &= hdsm_device_get_info(1, &info) == HDSM_SUCCESS && std::string(info.name) == "sim1" &&
              std::string(info.backend) == "sim" && info.memory_bytes == (32u << 20);
        ok &= hdsm_device_get_info(9, &info) == HDSM_ERROR_INVALID_ARGUMENT;
        ok &= hdsm_config_set("HDSM_SIM_DEVICES", "2") == HDSM_ERROR_CONFIG;  // too late
        hdsm_stats s;
        ok &= hdsm_stats_get(&s) == HDSM_SUCCESS && s.h2d.bytes == 0 && s.kernel_launches == 0;
        ok &= hdsm_stats_reset() == HDSM_SUCCESS;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
