// Statistics and tracing of shared memory: bytes and transfers per coherence action, time in the
// fault handler, trace spans, and the message a stray access to freed memory leaves before dying.
#include "support/death_style.hpp"
#include "support/test_support.hpp"

#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace {

constexpr std::size_t kBlock = 4096;

hdsm::Config stats_config(const std::string& protocol, const std::string& rolling_step = "2") {
  auto c = hdsm::test::fast_sim_config(protocol);
  c.set("HDSM_ROLLING_STEP", rolling_step).set("HDSM_STATS", "1");  // fault_handler_ns counts
  return c;
}

const hdsm::Kernel& increment() {
  static const hdsm::Kernel k =
      hdsm::per_thread("increment", [](const hdsm::Thread& t, int* x, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) x[i] += 1;
      });
  return k;
}

std::uint64_t action_bytes(const hdsm::Stats& s, hdsm::Action a) { return s.action(a).bytes; }

// Every transfer of shared memory is counted under exactly one action, so the actions add up to the
// routes.
void expect_actions_match_routes(const hdsm::Stats& s) {
  EXPECT_EQ(action_bytes(s, hdsm::Action::release) + action_bytes(s, hdsm::Action::evict),
            s.route(hdsm::Route::h2d).bytes);
  EXPECT_EQ(action_bytes(s, hdsm::Action::acquire) + action_bytes(s, hdsm::Action::fault),
            s.route(hdsm::Route::d2h).bytes);
}

TEST(AdsmStats, LazyCountsCallUploadAndFaultFetch) {
  hdsm::Runtime rt{stats_config("lazy")};
  const std::size_t n = 3 * kBlock / sizeof(int);
  int* x = rt.alloc<int>(n);
  rt.reset_stats();
  for (std::size_t i = 0; i < n; ++i) x[i] = 1;  // one write fault on a read-only object
  rt.call(increment(), hdsm::cover(n), x, std::uint64_t{n});
  rt.sync();
  EXPECT_EQ(x[n - 1], 2);  // one read fault fetches the whole object
  const hdsm::Stats s = rt.stats();
  EXPECT_EQ(s.write_faults, 1u);
  EXPECT_EQ(s.read_faults, 1u);
  EXPECT_EQ(action_bytes(s, hdsm::Action::release), n * sizeof(int));
  EXPECT_EQ(s.action(hdsm::Action::release).transfers, 1u);
  EXPECT_EQ(action_bytes(s, hdsm::Action::fault), n * sizeof(int));
  EXPECT_EQ(action_bytes(s, hdsm::Action::acquire), 0u);
  EXPECT_EQ(action_bytes(s, hdsm::Action::evict), 0u);
  EXPECT_GT(s.fault_handler_ns, 0u);
  expect_actions_match_routes(s);
  EXPECT_NE(s.to_string().find("fault fetch"), std::string::npos) << s.to_string();
  rt.reset_stats();
  EXPECT_EQ(rt.stats().fault_handler_ns, 0u);
  EXPECT_EQ(action_bytes(rt.stats(), hdsm::Action::fault), 0u);
  rt.free(x);
}

TEST(AdsmStats, BatchCountsSyncDownload) {
  hdsm::Runtime rt{stats_config("batch")};
  const std::size_t n = 2 * kBlock / sizeof(int);
  int* x = rt.alloc<int>(n);
  rt.reset_stats();
  rt.call(increment(), hdsm::cover(n), x, std::uint64_t{n});
  rt.sync();
  EXPECT_EQ(x[0], 1);
  const hdsm::Stats s = rt.stats();
  EXPECT_EQ(action_bytes(s, hdsm::Action::release), n * sizeof(int));
  EXPECT_EQ(action_bytes(s, hdsm::Action::acquire), n * sizeof(int));
  EXPECT_EQ(s.read_faults + s.write_faults, 0u);
  EXPECT_EQ(s.fault_handler_ns, 0u);
  expect_actions_match_routes(s);
  rt.free(x);
}

TEST(AdsmStats, RollingCountsEvictions) {
  // One object with a step of 1: at most two dirty blocks (the least a window holds: a store may
  // write two blocks).
  hdsm::Runtime rt{stats_config("rolling", "1")};
  const std::size_t blocks = 8, n = blocks * kBlock / sizeof(int);
  int* x = rt.alloc<int>(n);
  rt.reset_stats();
  for (std::size_t i = 0; i < n; ++i) x[i] = 5;
  rt.call(increment(), hdsm::cover(n), x, std::uint64_t{n});
  rt.sync();
  EXPECT_EQ(x[n - 1], 6);
  const hdsm::Stats s = rt.stats();
  EXPECT_EQ(s.action(hdsm::Action::evict).transfers, blocks - 2);
  EXPECT_EQ(action_bytes(s, hdsm::Action::evict), (blocks - 2) * kBlock);
  EXPECT_EQ(action_bytes(s, hdsm::Action::release), 2 * kBlock);  // the blocks still in the window
  EXPECT_EQ(action_bytes(s, hdsm::Action::fault), kBlock);        // rolling fetches only the block read
  expect_actions_match_routes(s);
  rt.free(x);
}

// The tracer writes to a path; a memfd's /proc/self/fd path keeps the test out of shared directories.
class MemfdFile {
 public:
  MemfdFile() : fd_(::memfd_create("hdsm trace test", MFD_CLOEXEC)) {}
  ~MemfdFile() { ::close(fd_); }
  MemfdFile(const MemfdFile&) = delete;
  MemfdFile& operator=(const MemfdFile&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }
  std::string contents() const {
    std::string out;
    char buf[4096];
    for (off_t at = 0;;) {
      const ssize_t n = ::pread(fd_, buf, sizeof buf, at);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
      at += n;
    }
    return out;
  }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

// A sync fetches a small object the host read back after the previous sync, so that the read takes
// no fault; every kSyncPrefetchProbe-th sync leaves it to fault, which tells whether the host still
// reads it. A write after a fetched read still faults (the block is read-only) and reaches the kernel.
TEST(AdsmStats, SyncFetchesSmallObjectsTheHostReadsBack) {
  for (const char* protocol : {"lazy", "rolling"}) {
    SCOPED_TRACE(protocol);
    hdsm::Runtime rt{stats_config(protocol).set("HDSM_SYNC_PREFETCH", "64KiB")};
    const std::size_t n = kBlock / sizeof(int);
    int* x = rt.alloc<int>(n);
    rt.reset_stats();
    constexpr int kRounds = 17;  // faults in rounds 1, 9 and 17; fetched by the syncs of the others
    for (int r = 1; r <= kRounds; ++r) {
      x[n - 1] = 10 * r;  // a write fault: read-only after the fetch, or after the fault's
      rt.call(increment(), hdsm::cover(n), x, std::uint64_t{n});
      rt.sync();
      ASSERT_EQ(x[n - 1], 10 * r + 1);
      ASSERT_EQ(x[0], r);
    }
    const hdsm::Stats s = rt.stats();
    EXPECT_EQ(s.read_faults, 3u);
    EXPECT_EQ(s.write_faults, static_cast<std::uint64_t>(kRounds));
    EXPECT_EQ(s.sync_prefetches, kRounds - 3u);
    EXPECT_EQ(action_bytes(s, hdsm::Action::acquire), (kRounds - 3) * kBlock);
    EXPECT_EQ(action_bytes(s, hdsm::Action::fault), 3 * kBlock);
    expect_actions_match_routes(s);
    rt.free(x);
  }
}

// A call on an object the sync will fetch leaves its host view as it is (no protection change at the
// call, none at the sync): the read after the sync sees the kernel's result without a fault. The
// probing sync protects it at its call, so the read after it faults.
TEST(AdsmStats, AnObjectTheSyncFetchesKeepsItsHostViewThroughTheCall) {
  for (const char* protocol : {"lazy", "rolling"}) {
    SCOPED_TRACE(protocol);
    hdsm::Runtime rt{stats_config(protocol).set("HDSM_SYNC_PREFETCH", "64KiB")};
    const std::size_t n = 2 * kBlock / sizeof(int);
    int* x = rt.alloc<int>(n);
    rt.reset_stats();
    constexpr int kRounds = 17;  // faults in rounds 1, 9 and 17; views kept in the others
    for (int r = 1; r <= kRounds; ++r) {
      rt.call(increment(), hdsm::cover(n), x, std::uint64_t{n});
      rt.sync();
      ASSERT_EQ(x[0], r);
      ASSERT_EQ(x[n - 1], r);
    }
    const hdsm::Stats s = rt.stats();
    EXPECT_EQ(s.read_faults, std::string(protocol) == "rolling" ? 6u : 3u);  // rolling: per block
    EXPECT_EQ(s.write_faults, 0u);
    EXPECT_EQ(s.kept_views, kRounds - 3u);
    EXPECT_EQ(s.sync_prefetches, kRounds - 3u);
    // The host writes again: the view it kept is read-only, so the write faults and reaches the kernel.
    x[1] = 100;
    rt.call(increment(), hdsm::cover(n), x, std::uint64_t{n});
    rt.sync();
    EXPECT_EQ(x[1], 101);
    EXPECT_EQ(rt.stats().write_faults, 1u);
    rt.free(x);
  }
}

// An object the host stops reading is fetched by at most kSyncPrefetchProbe - 1 more syncs; objects
// above HDSM_SYNC_PREFETCH, and every object with HDSM_SYNC_PREFETCH=0, fault at every read.
TEST(AdsmStats, SyncPrefetchStopsAndHasALimit) {
  {
    hdsm::Runtime rt{stats_config("lazy").set("HDSM_SYNC_PREFETCH", "64KiB")};
    int* x = rt.alloc<int>(1);
    *x = 0;
    rt.reset_stats();
    for (int r = 1; r <= 30; ++r) {
      rt.call(increment(), hdsm::cover(1), x, std::uint64_t{1});
      rt.sync();
      if (r <= 2) {  // round 1 faults, round 2's sync fetches; then no more reads
        EXPECT_EQ(*x, r);
      }
    }
    EXPECT_EQ(rt.stats().read_faults, 1u);
    EXPECT_EQ(rt.stats().sync_prefetches, 7u);  // rounds 2 to 8; round 9 probes and sees no fault
    EXPECT_EQ(*x, 30);
    rt.free(x);
  }
  for (const char* limit : {"4KiB", "0"}) {
    SCOPED_TRACE(limit);
    hdsm::Runtime rt{stats_config("lazy").set("HDSM_SYNC_PREFETCH", limit)};
    const std::size_t n = (std::string(limit) == "0" ? 1 : 2) * kBlock / sizeof(int);
    int* x = rt.alloc<int>(n);
    x[0] = 0;
    rt.reset_stats();
    for (int r = 1; r <= 10; ++r) {
      rt.call(increment(), hdsm::cover(n), x, std::uint64_t{n});
      rt.sync();
      ASSERT_EQ(x[0], r);
    }
    EXPECT_EQ(rt.stats().read_faults, 10u);
    EXPECT_EQ(rt.stats().sync_prefetches, 0u);
    rt.free(x);
  }
}

TEST(AdsmStats, TraceShowsReleaseAcquireAndFaults) {
  MemfdFile file;
  ASSERT_TRUE(file.ok());
  {
    auto config = stats_config("rolling");
    config.set("HDSM_TRACE", file.path());
    hdsm::Runtime rt{config};
    int* x = rt.alloc<int>(1024);
    x[3] = 1;
    rt.call(increment(), hdsm::cover(1024), x, std::uint64_t{1024});
    rt.sync();
    EXPECT_EQ(x[3], 2);
    rt.free(x);
  }
  const std::string trace = file.contents();
  EXPECT_NE(trace.find("shared-memory faults"), std::string::npos);
  EXPECT_NE(trace.find("write fault, object #1 block 0"), std::string::npos);
  EXPECT_NE(trace.find("read fault, object #1 block 0"), std::string::npos);
  EXPECT_NE(trace.find("release on device 0"), std::string::npos);
  EXPECT_NE(trace.find("acquire on device 0"), std::string::npos);
}

// A trace path that cannot be written fails the runtime's start, naming the knob and the path,
// instead of a message at the program's end after the whole run was traced for nothing.
TEST(AdsmStats, UnwritableTracePathFailsAtStart) {
  auto config = stats_config("lazy");
  config.set("HDSM_TRACE", "/proc/self/fd/no-such-folder/trace.json");
  try {
    hdsm::Runtime rt{config};
    ADD_FAILURE() << "the runtime started with an unwritable trace path";
  } catch (const hdsm::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("HDSM_TRACE=/proc/self/fd/no-such-folder/trace.json"), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
}

// The trace replaces what the file held: a longer old file leaves no tail behind the JSON.
TEST(AdsmStats, TraceReplacesALongerFile) {
  MemfdFile file;
  ASSERT_TRUE(file.ok());
  {
    const std::string old(1 << 20, 'x');
    std::FILE* f = std::fopen(file.path().c_str(), "w");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(old.data(), 1, old.size(), f), old.size());
    ASSERT_EQ(std::fclose(f), 0);
  }
  {
    auto config = stats_config("lazy");
    config.set("HDSM_TRACE", file.path());
    hdsm::Runtime rt{config};
    int* x = rt.alloc<int>(16);
    x[0] = 1;
    rt.free(x);
  }
  const std::string trace = file.contents();
  ASSERT_FALSE(trace.empty());
  EXPECT_EQ(trace.front(), '{');
  EXPECT_EQ(trace.back(), '}');
  EXPECT_EQ(trace.find('x' + std::string(15, 'x')), std::string::npos);
}

using hdsm::test::default_disposition_under_sanitizers;

[[gnu::noinline]] int read_int(const volatile int* p) { return *p; }

TEST(AdsmStatsDeathTest, TouchingFreedMemoryNamesTheObject) {
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_EXIT(
      {
        default_disposition_under_sanitizers();
        hdsm::Runtime rt{stats_config("lazy")};
        int* keep = rt.alloc<int>(10);
        int* x = rt.alloc<int>(3000);
        x[0] = 1;
        rt.free(x);
        read_int(x + 2000);
        rt.free(keep);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV),
      "invalid (read|unknown) access: 0x[0-9a-f]+ is inside freed object #2 \\(11\\.7 KiB, freed\\) at "
      "offset 8000");
}

}  // namespace

namespace {

// The route table lines up whatever the devices' names: its first column is as wide as the longest
// label (before, "a_long_device_name7 H2D" pushed its row's numbers out of their columns).
TEST(StatsText, TheRouteTableLinesUpForLongDeviceNames) {
  hdsm::Stats s;
  s.devices.resize(2);
  s.devices[0].name = "sim0";
  s.devices[1].name = "a_long_device_name7";
  const std::string text = s.to_string();
  std::istringstream lines(text);
  std::string line;
  std::size_t transfers_end = std::string::npos, rows = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("  route", 0) == 0)
      transfers_end = line.find("transfers") + std::string("transfers").size();
    if (line.find(" H2D ") == std::string::npos && line.find(" D2H ") == std::string::npos) continue;
    ++rows;
    // Under the heading "transfers", each row's transfer count (0), right-aligned.
    ASSERT_NE(transfers_end, std::string::npos) << text;
    ASSERT_LT(transfers_end, line.size()) << text;
    EXPECT_EQ(line[transfers_end - 1], '0') << text;
    EXPECT_EQ(line[transfers_end], ' ') << text;
  }
  EXPECT_EQ(rows, 6u) << text;  // H2D and D2H of both devices and the total
}

}  // namespace
