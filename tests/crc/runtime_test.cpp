// The CRC runtime on the threads transport: regions, the access functions, locks, barriers, the
// variants, and every misuse the API names.
#include "os/cpu_binding.hpp"
#include "os/spin_wait.hpp"
#include "support/death_style.hpp"
#include "support/test_support.hpp"

#include <hdsm/crc.hpp>
#include <hdsm/error.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace crc = hdsm::crc;

// ThreadSanitizer builds copy every shared page through the home: no zero copy, no direct copies of
// the workers' own (the copies overlap the formal race the version check makes harmless).
#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
constexpr const char* kThroughTheHome =
    "under ThreadSanitizer every copy of a shared page goes through the home";

crc::Options options(int workers, std::size_t page = 4096, std::size_t local_store = 64 << 10) {
  crc::Options o;
  o.workers = workers;
  o.page_size = page;
  o.local_store = local_store;
  o.shared_bytes = 16 << 20;
  o.timeout = std::chrono::milliseconds(20000);  // a cap on any wait: generous under load (TSan, CI)
  return o;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(CrcRuntime, WorkersWriteTheirSharesAndReadEachOthersAfterABarrier) {
  crc::Runtime rt(options(3, 256));
  const std::size_t n = 3000;
  int* a = rt.alloc<int>(n);
  std::vector<long> sums(3, 0);
  rt.run([&] {
    const auto [lo, hi] = crc::share(n);
    for (std::size_t i = lo; i < hi; ++i) crc::write(&a[i], static_cast<int>(i) * 3);
    crc::barrier();
    long sum = 0;
    for (std::size_t i = 0; i < n; ++i) sum += crc::read(&a[i]);
    sums[static_cast<std::size_t>(crc::worker_id())] = sum;
  });
  const long expected = 3L * static_cast<long>(n * (n - 1) / 2);
  for (const long s : sums) EXPECT_EQ(s, expected);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(a[i], static_cast<int>(i) * 3) << i;  // the home reads directly
  const crc::Stats st = rt.stats();
  EXPECT_EQ(st.regions, 1u);
  EXPECT_EQ(st.barriers, 3u);
  EXPECT_GT(st.write_backs, 0u);
  EXPECT_GT(st.read_misses, 0u);
}

TEST(CrcRuntime, FalselySharedPagesMergeEveryWritersBytes) {
  // Every page is written by all workers (interleaved bytes): the multiple-writer protocol merges.
  // No worker writes back before every worker has written (a loaded machine may run them one after
  // the other, and a page whose writers never overlap needs no twin).
  crc::Runtime rt(options(4, 128));
  const std::size_t n = 4096;
  auto* bytes = rt.alloc<std::uint8_t>(n);
  std::atomic<int> written{0};
  rt.run([&] {
    const int w = crc::worker_id();
    for (std::size_t i = static_cast<std::size_t>(w); i < n; i += 4)
      crc::write(&bytes[i], static_cast<std::uint8_t>(i * 7 + 1));
    written.fetch_add(1);
    while (written.load() < crc::worker_count()) std::this_thread::yield();
  });
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bytes[i], static_cast<std::uint8_t>(i * 7 + 1)) << i;
  EXPECT_GT(rt.stats().twins, 0u);
}

TEST(CrcRuntime, ALockProtectedCounterCountsEveryIncrement) {
  crc::Runtime rt(options(3));
  auto* counter = rt.alloc<long>(1);
  const int rounds = 200;
  rt.run([&] {
    for (int i = 0; i < rounds; ++i) {
      crc::lock(7);
      crc::write(counter, crc::read(counter) + 1);
      crc::unlock(7);
    }
  });
  EXPECT_EQ(*counter, 3L * rounds);
  EXPECT_EQ(rt.stats().locks, 3u * rounds);
}

// The home answers a barrier's workers together and wakes those that sleep once all are answered:
// here one worker comes late each round, so the others have stopped spinning and sleep on their
// reply. A wake-up lost would leave them asleep: the watchdog names it instead of a hang.
TEST(CrcRuntime, ABarrierWakesTheWorkersThatSleepOnIt) {
  const int workers = 4, rounds = 12;
  crc::Options o = options(workers, 256);
  o.region_spin = std::chrono::microseconds(0);  // the process-wide budget: the waiters sleep soon
  crc::Runtime rt(o);
  int* slots = rt.alloc<int>(static_cast<std::size_t>(workers) * rounds);
  std::atomic<int> wrong{0};
  std::promise<void> finished;
  std::future<void> done = finished.get_future();
  std::thread region([&] {
    rt.run([&] {
      const int w = crc::worker_id();
      for (int r = 0; r < rounds; ++r) {
        crc::write(&slots[r * workers + w], r * 100 + w);
        if (r % workers == w) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // late
        crc::barrier();
        for (int x = 0; x < workers; ++x)
          if (crc::read(&slots[r * workers + x]) != r * 100 + x) wrong.fetch_add(1);
      }
    });
    finished.set_value();
  });
  if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    std::fprintf(stderr, "ABarrierWakesTheWorkersThatSleepOnIt: the region hangs: a wake-up was lost\n");
    std::abort();
  }
  region.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(rt.stats().barriers, static_cast<std::uint64_t>(workers * rounds));
}

TEST(CrcRuntime, TheRegionSpinComesFromTheEnvironment) {
  EXPECT_EQ(crc::Options{}.region_spin, std::chrono::microseconds(1000));
  ::setenv("HDSM_CRC_SPIN_US", "250", 1);
  EXPECT_EQ(crc::Options::from_environment().region_spin, std::chrono::microseconds(250));
  ::setenv("HDSM_CRC_SPIN_US", "2000000", 1);  // above the range
  EXPECT_THROW((void)crc::Options::from_environment(), hdsm::ConfigError);
  ::unsetenv("HDSM_CRC_SPIN_US");
}

// Knobs a program sets in code reach the crc runtime through a Config (over the environment's).
TEST(CrcRuntime, OptionsFromAConfigTakeTheProgramsSettings) {
  ::setenv("HDSM_CRC_WORKERS", "2", 1);
  const crc::Options o = crc::Options::from_config(
      hdsm::Config::from_environment().set("HDSM_CRC_WORKERS", "3").set("HDSM_CRC_SPIN_US", "0"));
  ::unsetenv("HDSM_CRC_WORKERS");
  EXPECT_EQ(o.workers, 3);
  EXPECT_EQ(o.region_spin, std::chrono::microseconds(0));
  crc::Runtime rt(o);
  EXPECT_EQ(rt.workers(), 3);
  std::atomic<int> ran{0};
  rt.run([&] { ++ran; });  // a region whose waits sleep at once
  EXPECT_EQ(ran.load(), 3);
}

// HDSM_WAIT_POLICY set in a program's Config is the process's while the runtime runs (before, the
// runtime set the environment's over it).
TEST(CrcRuntime, TheWaitPolicyOfAConfigIsTheOneItWaitsBy) {
  const crc::Options o = crc::Options::from_config(
      hdsm::Config::defaults().set("HDSM_WAIT_POLICY", "block").set("HDSM_CRC_WORKERS", "2"));
  EXPECT_EQ(o.wait.kind, hdsm::WaitPolicy::Kind::block);
  {
    crc::Runtime rt(o);
    EXPECT_EQ(hdsm::os::spin_budget(), 0u) << "block: no wait spins";
    std::atomic<int> ran{0};
    rt.run([&] { ++ran; });
    EXPECT_EQ(ran.load(), 2);
  }
  crc::Runtime rt(crc::Options::from_config(hdsm::Config::defaults().set("HDSM_CRC_WORKERS", "1")));
  EXPECT_EQ(hdsm::os::spin_budget(), 50'000u) << "the default: 50 us";
}

TEST(CrcRuntime, CompactBindingGivesTheHomeAndEachWorkerACpu) {
  ::setenv("HDSM_CRC_BIND", "compact", 1);
  EXPECT_EQ(crc::Options::from_environment().bind, crc::Bind::compact);
  ::setenv("HDSM_CRC_BIND", "spread", 1);
  EXPECT_THROW((void)crc::Options::from_environment(), hdsm::ConfigError);
  ::unsetenv("HDSM_CRC_BIND");
  EXPECT_EQ(crc::Options::from_environment().bind, crc::Bind::none);

  const std::vector<int> cpus = hdsm::os::allowed_cpus();
  const std::vector<int> order = hdsm::os::compact_order(cpus, [](int c) { return hdsm::os::cpu_place(c); });
  // One worker more than the CPUs left beside the home's (where there are at most 8): the last wraps
  // around to the home's CPU.
  const int workers = static_cast<int>(std::min<std::size_t>(cpus.size(), 8));
  crc::Options o = options(workers);
  o.bind = crc::Bind::compact;
  crc::Runtime rt(o);
  std::vector<std::vector<int>> seen(static_cast<std::size_t>(workers + 1));
  rt.run_with_home([&] { seen[static_cast<std::size_t>(crc::worker_id())] = hdsm::os::allowed_cpus(); });
  for (int w = 0; w < workers; ++w)
    EXPECT_EQ(seen[static_cast<std::size_t>(w)],
              std::vector<int>{order[static_cast<std::size_t>(w + 1) % order.size()]})
        << "worker " << w;
  EXPECT_EQ(seen[static_cast<std::size_t>(workers)], std::vector<int>{order[0]}) << "the home";
  // The caller's thread has its CPUs back after the region.
  EXPECT_EQ(hdsm::os::allowed_cpus(), cpus);

  // Unbound (the default): every thread may run anywhere the process may.
  crc::Runtime free_rt(options(1));
  std::vector<int> worker_cpus;
  free_rt.run([&] { worker_cpus = hdsm::os::allowed_cpus(); });
  EXPECT_EQ(worker_cpus, cpus);
}

TEST(CrcRuntime, ModifiedPagesEvictedFromAFullBufferReachTheHome) {
  // A local store of 4 pages; every worker writes 64 pages, so most are written back as victims.
  crc::Runtime rt(options(2, 1024, 4 * 1024));
  EXPECT_EQ(rt.frames(), 4u);
  const std::size_t n = 64 * 1024 / sizeof(double);
  double* d = rt.alloc<double>(2 * n);
  rt.run([&] {
    const std::size_t base = static_cast<std::size_t>(crc::worker_id()) * n;
    for (std::size_t i = 0; i < n; ++i) crc::write(&d[base + i], static_cast<double>(base + i) / 2);
    crc::barrier();
    for (std::size_t i = 0; i < 2 * n; i += 97) ASSERT_EQ(crc::read(&d[i]), static_cast<double>(i) / 2);
  });
  for (std::size_t i = 0; i < 2 * n; ++i) ASSERT_EQ(d[i], static_cast<double>(i) / 2) << i;
  EXPECT_GT(rt.stats().flush_fetches, 0u);
  EXPECT_GT(rt.stats().evictions, 0u);
}

TEST(CrcRuntime, AnUpgradeOfAStaleCopyGetsTheOtherWritersBytes) {
  // Worker 1 reads page 0, worker 0 writes byte 0 of it and releases; worker 1, without an acquire,
  // then writes byte 1: its write-back must not bring back the old byte 0.
  crc::Runtime rt(options(2, 128));
  auto* b = rt.alloc<std::uint8_t>(128);
  std::atomic<int> step{0};
  rt.run([&] {
    if (crc::worker_id() == 1) {
      EXPECT_EQ(crc::read(&b[5]), 0);
      step.store(1);
      while (step.load() != 2) std::this_thread::yield();
      crc::write(&b[1], 11);
    } else {
      while (step.load() != 1) std::this_thread::yield();
      crc::write(&b[0], 10);
      crc::flush();
      step.store(2);
    }
  });
  EXPECT_EQ(b[0], 10);
  EXPECT_EQ(b[1], 11);
  EXPECT_EQ(rt.stats().upgrades_with_data, 1u);
}

TEST(CrcRuntime, ReadOnlyAndSingleWriterVariantsSkipTheHandshakes) {
  if (kThreadSanitizer) GTEST_SKIP() << kThroughTheHome;
  crc::Runtime rt(options(2, 512));
  const std::size_t n = 8192;
  float* in = rt.alloc<float>(n);
  float* out = rt.alloc<float>(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i);
  rt.run([&] {
    const auto [lo, hi] = crc::share(n);
    for (std::size_t i = lo; i < hi; ++i) crc::write_single(&out[i], 2 * crc::read_only(&in[i]));
  });
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 2.0f * static_cast<float>(i)) << i;
  const crc::Stats s = rt.stats();
  EXPECT_EQ(s.read_misses, 0u);
  EXPECT_EQ(s.write_faults, 0u);
  EXPECT_EQ(s.write_backs, 0u);
  EXPECT_GT(s.direct_gets, 0u);
  EXPECT_GT(s.direct_puts, 0u);
  // The only messages: each worker's note of its single-writer pages (one for all, at the end) and
  // its done.
  EXPECT_EQ(s.messages, 4u);
}

TEST(CrcRuntime, LocalizedAccessWalksAPageInTheLocalStore) {
  crc::Runtime rt(options(2, 1024));
  const std::size_t n = 5000;
  int* a = rt.alloc<int>(n);
  rt.run([&] {
    const auto [lo, hi] = crc::share(n);
    for (std::size_t i = lo; i < hi;) {
      const crc::Local<int> local = crc::write_local(&a[i]);
      const std::size_t count = std::min(local.count, hi - i);
      for (std::size_t k = 0; k < count; ++k) local.data[k] = static_cast<int>(i + k);
      i += count;
    }
    crc::barrier();
    long sum = 0;
    for (std::size_t i = 0; i < n;) {
      const crc::Local<const int> local = crc::read_local(&a[i]);
      const std::size_t count = std::min(local.count, n - i);
      for (std::size_t k = 0; k < count; ++k) sum += local.data[k];
      i += count;
    }
    EXPECT_EQ(sum, static_cast<long>(n * (n - 1) / 2));
  });
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(a[i], static_cast<int>(i));
}

// Zero copy (threads): the localized read-only and single-writer variants hand out the shared
// space itself; with it off they copy through the local store, as the seed's workers did.
TEST(CrcRuntime, LocalizedVariantsWorkInPlaceUnlessZeroCopyIsOff) {
  if (kThreadSanitizer) GTEST_SKIP() << kThroughTheHome;
  for (const bool zero_copy : {true, false}) {
    crc::Options o = options(2, 1024);
    o.zero_copy = zero_copy;
    crc::Runtime rt(o);
    const std::size_t n = 4096;
    double* in = rt.alloc<double>(n);
    double* out = rt.alloc<double>(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<double>(i);
    std::atomic<int> in_shared_space{0}, elsewhere{0};
    rt.run([&] {
      const auto [lo, hi] = crc::share(n, rt.page_size() / sizeof(double));
      for (std::size_t i = lo; i < hi;) {
        const crc::Local<const double> x = crc::read_only_local(&in[i]);
        const crc::Local<double> y = crc::overwrite_local(&out[i]);
        ((x.data == &in[i] && y.data == &out[i]) ? in_shared_space : elsewhere).fetch_add(1);
        for (std::size_t k = 0; k < y.count; ++k) y.data[k] = 3 * x.data[k];
        i += y.count;
      }
    });
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 3.0 * static_cast<double>(i)) << i;
    const crc::Stats s = rt.stats();
    if (zero_copy) {
      EXPECT_EQ(elsewhere.load(), 0);
      EXPECT_EQ(s.in_place, 2 * n * sizeof(double) / 1024);
      EXPECT_EQ(s.direct_gets + s.direct_puts, 0u);
    } else {
      EXPECT_EQ(in_shared_space.load(), 0);
      EXPECT_EQ(s.in_place, 0u);
      EXPECT_EQ(s.direct_gets, n * sizeof(double) / 1024);  // `out` is not fetched: overwritten
      EXPECT_EQ(s.direct_puts, n * sizeof(double) / 1024);
    }
  }
}

// An overwrite from the middle of a page keeps the page's bytes before it, in place or through the
// local store, whatever the frame held before (before, a miss fetched nothing and the release put
// the frame's stale bytes back over them).
TEST(CrcRuntime, AnOverwriteFromMidPageKeepsTheBytesBeforeIt) {
  if (kThreadSanitizer) GTEST_SKIP() << kThroughTheHome;
  for (const bool zero_copy : {true, false}) {
    SCOPED_TRACE(zero_copy ? "in place" : "through the local store");
    crc::Options o = options(1, 1024);
    o.zero_copy = zero_copy;
    crc::Runtime rt(o);
    int* a = rt.alloc<int>(256);  // one page
    int* other = rt.alloc<int>(16384);
    for (int i = 0; i < 256; ++i) a[i] = i;
    for (int i = 0; i < 16384; ++i) other[i] = -7;
    rt.run([&] {
      for (int i = 0; i < 16384; i += 256) (void)crc::read(&other[i]);  // every frame holds -7s
      const crc::Local<int> l = crc::overwrite_local(&a[128]);
      ASSERT_EQ(l.count, 128u);
      for (std::size_t k = 0; k < l.count; ++k) l.data[k] = 1000;
    });
    for (int i = 0; i < 256; ++i) ASSERT_EQ(a[i], i < 128 ? i : 1000) << i;
  }
}

// A page written in place, or put back by a single writer, reaches the home at the release (in one
// note), so the copies other workers keep are dropped at their next acquire.
TEST(CrcRuntime, ASingleWritersPageInvalidatesTheCopiesOfOtherWorkers) {
  if (kThreadSanitizer) GTEST_SKIP() << kThroughTheHome;
  for (const bool zero_copy : {true, false}) {
    SCOPED_TRACE(zero_copy ? "in place" : "put back");
    crc::Options o = options(2, 1024);
    o.zero_copy = zero_copy;
    crc::Runtime rt(o);
    int* a = rt.alloc<int>(256);  // one page
    for (int i = 0; i < 256; ++i) a[i] = i;
    std::vector<int> seen(256, -1);
    rt.run([&] {
      if (crc::worker_id() == 1) (void)crc::read(&a[5]);  // a copy of the page in worker 1's buffer
      crc::barrier();
      if (crc::worker_id() == 0) {
        const crc::Local<int> l = crc::overwrite_local(&a[0]);
        for (std::size_t k = 0; k < l.count; ++k) l.data[k] = 1000 + static_cast<int>(k);
      }
      crc::barrier();
      if (crc::worker_id() == 1)
        for (int i = 0; i < 256; ++i) seen[static_cast<std::size_t>(i)] = crc::read(&a[i]);
    });
    for (int i = 0; i < 256; ++i) ASSERT_EQ(seen[static_cast<std::size_t>(i)], 1000 + i) << i;
    EXPECT_EQ(rt.stats().in_place, zero_copy ? 1u : 0u);
    EXPECT_EQ(rt.stats().direct_puts, zero_copy ? 0u : 1u);
    EXPECT_GE(rt.stats().invalidations, 1u);
  }
}

// Every region notes its single writers' pages anew, however often a page was noted before (in
// this phase, or in an earlier region at another page size): a note the home never gets would let
// worker 1 keep its stale copy.
TEST(CrcRuntime, SingleWriterNotesStartAfreshInEveryPhaseAndRegion) {
  crc::Options o = options(2, 1024);
  o.zero_copy = false;
  crc::Runtime rt(o);
  constexpr int kN = 8 << 10;  // 32 KiB: every page stays in worker 1's 64 KiB local store
  int* a = rt.alloc<int>(kN);
  std::vector<int> wrong;
  for (const std::size_t page : {1024, 1024, 512, 2048}) {
    rt.page_size(page);
    const int round = static_cast<int>(wrong.size());
    wrong.push_back(0);
    rt.run([&] {
      for (int phase = 1; phase <= 2; ++phase) {
        const int value = round * 10 + phase;
        if (crc::worker_id() == 1)
          for (int i = 0; i < kN; i += 64) (void)crc::read(&a[i]);  // copies of every page
        crc::barrier();
        // Worker 0 writes every page as its single writer, twice over (each page noted twice).
        if (crc::worker_id() == 0)
          for (int pass = 0; pass < 2; ++pass)
            for (int i = 0; i < kN; i += 64) crc::write_single(&a[i], value);
        crc::barrier();
        if (crc::worker_id() == 1)
          for (int i = 0; i < kN; i += 64) wrong.back() += crc::read(&a[i]) != value ? 1 : 0;
        crc::barrier();
      }
    });
    EXPECT_EQ(wrong.back(), 0) << "round " << round << ", " << page << " B pages";
  }
}

// A page this worker holds in its buffer, written there, stays the one it uses: the in-place
// pointer would miss its own buffered writes.
TEST(CrcRuntime, ABufferedPageIsUsedWhereItIsNotInPlace) {
  crc::Runtime rt(options(1, 1024));
  int* a = rt.alloc<int>(256);
  rt.run([&] {
    crc::write_single(&a[0], 7);  // the page comes into the buffer, written
    const crc::Local<int> l = crc::write_single_local(&a[1]);
    EXPECT_NE(l.data, &a[1]);
    EXPECT_EQ(l.data[-1], 7);
    l.data[0] = 8;
  });
  EXPECT_EQ(a[0], 7);
  EXPECT_EQ(a[1], 8);
  EXPECT_EQ(rt.stats().in_place, 0u);
}

// The reverse order: a page written in place, then reached by element accesses while the run is
// still in use. They go to the shared page too (before, the element access brought a copy into the
// buffer: the run's later writes missed it, and at the release the copy went back over them).
TEST(CrcRuntime, ElementAccessesToAPageWrittenInPlaceKeepTheRunsWrites) {
  if (kThreadSanitizer) GTEST_SKIP() << kThroughTheHome;
  for (const int variant : {0, 1, 2}) {
    SCOPED_TRACE(variant == 0 ? "write_single" : variant == 1 ? "write" : "write_single, read");
    crc::Runtime rt(options(1, 1024));
    int* a = rt.alloc<int>(256);
    int seen = -1;
    rt.run([&] {
      const crc::Local<int> run = crc::write_single_local(&a[0]);
      ASSERT_EQ(run.data, &a[0]);  // in place
      run.data[1] = 7;
      if (variant == 1)
        crc::write(&a[2], 9);
      else
        crc::write_single(&a[2], 9);
      run.data[3] = 11;
      if (variant == 2) seen = crc::read(&a[3]);
      EXPECT_EQ(crc::read_only(&a[2]), 9);
      EXPECT_EQ(crc::write_single_local(&a[4]).data, &a[4]);  // still in place
    });
    EXPECT_EQ(a[1], 7);
    EXPECT_EQ(a[2], 9);
    EXPECT_EQ(a[3], 11);
    if (variant == 2) {
      EXPECT_EQ(seen, 11);
    }
  }
}

// A single writer's bytes reach the shared page while another worker may be copying it for a read
// miss (threads: the worker copies, the home only counts it). When the home takes the writer's note
// before it counts the reader, the reader must copy again: it is not listed for invalidation, and
// kept stale bytes for good before (up to 3200 phases of 4000 here).
TEST(CrcRuntime, AReadMissCopyRacingASingleWritersUpdateIsNeverKeptStale) {
  constexpr int kPhases = 2000;
  for (const bool in_place : {true, false}) {
    SCOPED_TRACE(in_place ? "in place" : "put back");
    crc::Options o = options(3, 4096);
    o.shared_bytes = std::size_t{kPhases + 16} * 4096;
    crc::Runtime rt(o);
    constexpr std::size_t ints = 1024;
    int* a = rt.alloc<int>(std::size_t{kPhases} * ints);
    int* busy = rt.alloc<int>(8 * ints);
    std::atomic<int> stale{0};
    rt.run([&] {
      const int me = crc::worker_id();
      std::uint32_t seed = 12345u + static_cast<std::uint32_t>(me);
      for (int i = 0; i < kPhases; ++i) {
        int* p = a + static_cast<std::size_t>(i) * ints;
        if (me == 0) {
          if (in_place)
            crc::write_single_local(&p[0]).data[0] = i + 1;
          else
            crc::write_single(&p[0], i + 1);
        } else if (me == 1) {
          seed = seed * 1103515245u + 12345u;  // a random start, so the copy overlaps the update
          const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds((seed >> 16) % 1500);
          while (std::chrono::steady_clock::now() < until) {
          }
          (void)crc::read(&p[512]);  // a read miss: worker 1 copies the page itself
        } else {
          for (int k = 0; k < 6; ++k) {  // keeps the home busy, so notes overtake requests
            crc::write(&busy[static_cast<std::size_t>(k % 8) * ints + 1], i);
            crc::flush();
          }
        }
        crc::barrier();
        if (me == 1 && crc::read(&p[0]) != i + 1) stale.fetch_add(1);
      }
    });
    EXPECT_EQ(stale.load(), 0);
  }
}

// Stats::twins counts each region's twins once.
TEST(CrcRuntime, TwinsAreCountedOncePerRegion) {
  crc::Runtime rt(options(2, 4096));
  int* a = rt.alloc<int>(1024);
  std::atomic<int> writing{0};
  rt.run([&] {
    crc::write(&a[crc::worker_id()], 1);
    // Both are writers before either releases: the first write-back makes the other's twin.
    writing.fetch_add(1);
    while (writing.load() < 2) std::this_thread::yield();
    crc::barrier();
  });
  EXPECT_EQ(rt.stats().twins, 1u);
  rt.run([&] { crc::barrier(); });
  EXPECT_EQ(rt.stats().twins, 1u);  // before, the first region's twin was added again
  rt.reset_stats();
  rt.run([&] { crc::barrier(); });
  EXPECT_EQ(rt.stats().twins, 0u);
}

struct Odd {
  char c[3];
  double d;
  bool operator==(const Odd&) const = default;
};

TEST(CrcRuntime, EveryScalarTypeAndStraddlingStructs) {
  crc::Runtime rt(options(1, 128));
  auto* raw = static_cast<std::byte*>(rt.allocate(4096));
  rt.run([&] {
    crc::write(reinterpret_cast<char*>(raw), 'x');
    crc::write(reinterpret_cast<short*>(raw + 2), short{-3});
    crc::write(reinterpret_cast<int*>(raw + 4), -70000);
    crc::write(reinterpret_cast<long*>(raw + 8), -(1L << 40));
    crc::write(reinterpret_cast<long long*>(raw + 16), 1LL << 50);
    crc::write(reinterpret_cast<float*>(raw + 24), 1.5f);
    crc::write(reinterpret_cast<double*>(raw + 32), -2.25);
    // Straddles the pages at 128 and 256.
    auto* odd = reinterpret_cast<Odd*>(raw + 120);
    crc::write(odd, Odd{{'a', 'b', 'c'}, 3.5});
    auto* wide = reinterpret_cast<Odd*>(raw + 250);
    crc::write(wide, Odd{{'d', 'e', 'f'}, -1.0});
    crc::barrier();
    EXPECT_EQ(crc::read(reinterpret_cast<const long*>(raw + 8)), -(1L << 40));
    EXPECT_EQ(crc::read(odd), (Odd{{'a', 'b', 'c'}, 3.5}));
    EXPECT_EQ(crc::read(wide), (Odd{{'d', 'e', 'f'}, -1.0}));
  });
  EXPECT_EQ(*reinterpret_cast<char*>(raw), 'x');
  EXPECT_EQ(*reinterpret_cast<short*>(raw + 2), -3);
  EXPECT_EQ(*reinterpret_cast<int*>(raw + 4), -70000);
  EXPECT_EQ(*reinterpret_cast<long long*>(raw + 16), 1LL << 50);
  EXPECT_EQ(*reinterpret_cast<float*>(raw + 24), 1.5f);
  EXPECT_EQ(*reinterpret_cast<double*>(raw + 32), -2.25);
  Odd got{};
  std::memcpy(&got, raw + 250, sizeof got);
  EXPECT_EQ(got, (Odd{{'d', 'e', 'f'}, -1.0}));
}

TEST(CrcRuntime, PageSizeChangesBetweenRegions) {
  crc::Runtime rt(options(2, 4096, 64 << 10));
  int* a = rt.alloc<int>(10000);
  for (const std::size_t page : {128u, 1024u, 16384u, 65536u}) {
    rt.page_size(page);
    EXPECT_EQ(rt.page_size(), page);
    EXPECT_GT(4 * rt.sets(), rt.frames());
    rt.run([&] {
      const auto [lo, hi] = crc::share(10000);
      for (std::size_t i = lo; i < hi; ++i) crc::write(&a[i], static_cast<int>(i + page));
    });
    for (std::size_t i = 0; i < 10000; ++i) ASSERT_EQ(a[i], static_cast<int>(i + page)) << page;
  }
  EXPECT_THROW(rt.page_size(100), hdsm::InvalidArgument);
  EXPECT_THROW(rt.page_size(1 << 17), hdsm::InvalidArgument);
  EXPECT_EQ(rt.page_size(), 65536u);  // unchanged by the refusals
}

// Resident memory of this process, from /proc/self/statm.
std::size_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

TEST(CrcRuntime, ALargeSharedSpaceCostsMemoryOnlyForThePagesItUses) {
  // The home's directory and the workers' bitmaps are sized for every page of the space at the
  // smallest page size a region has had: built eagerly, 16 GiB of 1 KiB pages took 470 MiB (and
  // a 1 TiB space 8 GiB and a minute). They are committed as their entries are used.
  crc::Options o = options(2, 4096, 64 << 10);
  o.shared_bytes = std::size_t{16} << 30;
  const std::size_t before = resident_bytes();
  ASSERT_GT(before, 0u);
  crc::Runtime rt(o);
  int* a = rt.alloc<int>(100000);
  for (const std::size_t page : {4096u, 1024u}) {
    rt.page_size(page);
    rt.run([&] {
      const auto [lo, hi] = crc::share(100000);
      for (std::size_t i = lo; i < hi; ++i) crc::write(&a[i], static_cast<int>(i + page));
    });
    for (std::size_t i = 0; i < 100000; i += 997) ASSERT_EQ(a[i], static_cast<int>(i + page)) << page;
  }
  const std::size_t grown = resident_bytes() - before;
  EXPECT_LT(grown, std::size_t{64} << 20) << "resident memory grew by " << grown << " bytes";
}

TEST(CrcRuntime, TasksByNumber) {
  crc::Runtime rt(options(2));
  int* a = rt.alloc<int>(2);
  rt.define(0, [&] { crc::write(&a[crc::worker_id()], 5); });
  rt.run(0);
  EXPECT_EQ(a[0] + a[1], 10);
  EXPECT_THROW(rt.run(1), hdsm::InvalidArgument);
}

// Misuse: typed errors naming the address, the page and the worker.
// With fewer frames than the four runs a worker may hold, every frame holds one of the last pages
// to come in: the oldest gives way, so three runs at a time stay valid in three frames (before, the
// round-robin frame did, which could be the run fetched just before: optimized STREAM, three runs
// at a time, summed wrong at 16 KiB pages in a 48 KiB store).
TEST(CrcRuntime, WithThreeFramesThreeRunsAtATimeStayValid) {
  crc::Options o = options(1, 1024, 3 << 10);
  o.zero_copy = false;  // in place, runs take no frame
  crc::Runtime rt(o);
  ASSERT_EQ(rt.frames(), 3u);
  constexpr int kPages = 10;
  int* a = rt.alloc<int>(kPages * 256);
  rt.run([&] {
    // Page 0 alone first, then three at a time: the round-robin frame of the third page's miss is
    // the second's (all three frames recent).
    const crc::Local<int> first = crc::write_single_local(&a[0]);
    for (std::size_t i = 0; i < first.count; ++i) first.data[i] = static_cast<int>(i);
    for (int p = 1; p + 2 < kPages; p += 3) {
      const crc::Local<int> runs[3] = {crc::write_single_local(&a[p * 256]),
                                       crc::write_single_local(&a[(p + 1) * 256]),
                                       crc::write_single_local(&a[(p + 2) * 256])};
      for (int k = 0; k < 3; ++k)
        for (std::size_t i = 0; i < runs[k].count; ++i)
          runs[k].data[i] = (p + k) * 1000 + static_cast<int>(i);
    }
  });
  for (int p = 0; p < kPages; ++p)
    for (int i = 0; i < 256; i += 51) ASSERT_EQ(a[p * 256 + i], p * 1000 + i) << "page " << p;
}

// A run handed out on a hit is kept like one from a miss: a table page read with every output page
// (a hit each time after the first) stays in its frame while the output pages stream through the
// buffer (before, its frame kept the stamp of when the page came in, and round-robin replacement
// took it from under the run: 1280 of 10240 elements were wrong).
TEST(CrcRuntime, ARunFromABufferHitStaysValidWhileThreePagesComeIn) {
  crc::Options o = options(1, 1024, 8 << 10);  // 8 frames
  o.zero_copy = false;                         // in place, runs take no frame
  crc::Runtime rt(o);
  int* table = rt.alloc<int>(256);
  constexpr int kOut = 40 * 256;
  int* out = rt.alloc<int>(kOut);
  for (int i = 0; i < 256; ++i) table[i] = 1000 + i;
  rt.run([&] {
    for (int i = 0; i < kOut;) {
      const crc::Local<const int> t = crc::read_local(&table[0]);
      const crc::Local<int> y = crc::write_local(&out[i]);  // a miss: one other page comes in
      for (std::size_t k = 0; k < y.count; ++k) y.data[k] = t.data[k];
      i += static_cast<int>(y.count);
    }
  });
  int wrong = 0;
  for (int i = 0; i < kOut; ++i) wrong += out[i] != 1000 + i % 256 ? 1 : 0;
  EXPECT_EQ(wrong, 0);
}

// Four runs from four misses stay valid together: a run's page that just came in takes no second
// tick of the buffer's clock (which aged the first run out after two more misses: its write was lost).
TEST(CrcRuntime, FourRunsFromMissesStayValidTogether) {
  crc::Options o = options(1, 1024, 5 << 10);  // 5 frames
  o.zero_copy = false;
  crc::Runtime rt(o);
  int* a = rt.alloc<int>(16 * 256);
  const auto page = [&](int p) { return &a[p * 256]; };
  rt.run([&] {
    for (const int p : {0, 1, 2}) crc::write_single_local(page(p)).data[0] = 1;  // unregistered frames
    crc::write(page(3), 1);
    crc::write(page(4), 1);
    for (const int p : {5, 6}) crc::write_single_local(page(p)).data[0] = 1;  // capacity misses
    crc::barrier();  // the unregistered frames are free again; round-robin goes on from frame 2
    const crc::Local<int> runs[4] = {crc::write_single_local(page(10)), crc::write_single_local(page(11)),
                                     crc::write_single_local(page(12)), crc::write_single_local(page(13))};
    for (int k = 0; k < 4; ++k) runs[k].data[5] = 10 + k;
  });
  for (int p = 10; p < 14; ++p) EXPECT_EQ(a[p * 256 + 5], p) << "page " << p;
}

// A run stays valid while three other distinct pages come in or are handed out, however often they
// are handed out again: a write run on a table page, then input and output pages localized twice
// each, then a miss (before, each hand-out took a tick of the clock, and the miss took the table's
// frame: the write through its run was lost).
TEST(CrcRuntime, ARunOutlivesPagesHandedOutAgain) {
  crc::Options o = options(1, 4096, 8 * 4096);  // 8 frames
  o.zero_copy = false;
  crc::Runtime rt(o);
  int* a = rt.alloc<int>(1024 * 16);
  rt.run([&] {
    for (int p = 0; p < 8; ++p) (void)crc::read(&a[p * 1024]);  // the buffer full
    const crc::Local<int> table = crc::write_local(&a[0]);      // a hit (an upgrade)
    for (int i = 0; i < 2; ++i) {
      (void)crc::read_local(&a[1024 + i]);
      (void)crc::read_local(&a[2048 + i]);
    }
    const crc::Local<const int> next = crc::read_local(&a[8 * 1024]);  // a miss: the third page after
    table.data[5] = 42;
    EXPECT_EQ(next.data[5], 0);
  });
  EXPECT_EQ(a[5], 42);
  EXPECT_EQ(a[8 * 1024 + 5], 0);
}

TEST(CrcErrors, AnAccessOutsideTheSharedSpace) {
  crc::Runtime rt(options(2));
  int local = 0;
  const std::string what = error_of([&] {
    rt.run([&] {
      if (crc::worker_id() == 1) crc::write(&local, 1);
    });
  });
  EXPECT_NE(what.find("crc worker 1"), std::string::npos) << what;
  EXPECT_NE(what.find("outside the shared space"), std::string::npos) << what;
  EXPECT_NE(what.find("page"), std::string::npos) << what;
  EXPECT_THROW(rt.run([&] { crc::read(&local); }), hdsm::InvalidPointer);
  // The runtime goes on after a failed region.
  int* a = rt.alloc<int>(1);
  rt.run([&] {
    if (crc::worker_id() == 0) crc::write(a, 3);
  });
  EXPECT_EQ(*a, 3);
}

// An access to shared memory that was freed (or never allocated) is an error naming the worker, the
// address and the page, whatever the access: before, a read gave zeros and a write was lost.
TEST(CrcErrors, AnAccessToFreedSharedMemory) {
  crc::Runtime rt(options(2));
  int* a = rt.alloc<int>(1024);
  int* b = rt.alloc<int>(1024);
  rt.free(a);
  const std::string what = error_of([&] {
    rt.run([&] {
      if (crc::worker_id() == 1) (void)crc::read(&a[3]);
    });
  });
  EXPECT_NE(what.find("crc worker 1: read of 4 B at"), std::string::npos) << what;
  EXPECT_NE(what.find("is in shared memory that is not allocated"), std::string::npos) << what;
  EXPECT_THROW(rt.run([&] {
    if (crc::worker_id() == 0) crc::write(&a[0], 1);
  }),
               hdsm::InvalidPointer);
  EXPECT_THROW(rt.run([&] {
    if (crc::worker_id() == 0) (void)crc::read_local(&a[0]);
  }),
               hdsm::InvalidPointer);
  rt.run([&] {
    if (crc::worker_id() == 0) crc::write(&b[5], 5);
  });
  EXPECT_EQ(b[5], 5);
  // An access that straddles from b's last granule into memory never allocated: the error names the
  // access the task made and where the unallocated bytes begin (it named the second piece alone).
  struct Eight {
    char c[8];
  };
  const auto* end = reinterpret_cast<const Eight*>(reinterpret_cast<const char*>(b) + (64 << 10) - 4);
  const std::string straddling = error_of([&] {
    rt.run([&] {
      if (crc::worker_id() == 0) (void)crc::read(end);
    });
  });
  EXPECT_NE(
      straddling.find(fmt::format("crc worker 0: read of 8 B at {}: its bytes from {}",
                                  static_cast<const void*>(end), static_cast<const void*>(b + (16 << 10)))),
      std::string::npos)
      << straddling;
}

TEST(CrcErrors, AnUnlockOfALockTheWorkerDoesNotHold) {
  crc::Runtime rt(options(2));
  const std::string what = error_of([&] {
    rt.run([&] {
      if (crc::worker_id() == 0) crc::unlock(3);
    });
  });
  EXPECT_NE(what.find("crc worker 0: unlock 3"), std::string::npos) << what;
  EXPECT_NE(what.find("nobody holds it"), std::string::npos) << what;
}

TEST(CrcErrors, ABarrierThatAWorkerSkipsEndsTheRegionAtOnce) {
  crc::Runtime rt(options(3));
  const auto start = std::chrono::steady_clock::now();
  const std::string what = error_of([&] {
    rt.run([&] {
      if (crc::worker_id() != 2) crc::barrier();
    });
  });
  EXPECT_NE(what.find("worker 2 ended its task without coming"), std::string::npos) << what;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));  // not the timeout
}

TEST(CrcErrors, ABarrierThatSeveralWorkersSkipNamesThemAll) {
  crc::Runtime rt(options(4));
  const std::string what = error_of([&] {
    rt.run([&] {
      if (crc::worker_id() >= 2) return;
      // Workers 2 and 3 have ended by the time the first of 0 and 1 comes.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      crc::barrier();
    });
  });
  EXPECT_NE(what.find("workers 2, 3 ended their tasks without coming"), std::string::npos) << what;
}

// A worker that waits for another's write without an acquire reads its buffered copy for good: the
// home, having heard nothing for a whole HDSM_CRC_TIMEOUT while tasks run, says so once on stderr
// (the region goes on: a task may compute that long on what it holds).
TEST(CrcErrors, AHomeThatHearsNothingForATimeoutSaysWhy) {
  crc::Options o = options(2);
  o.timeout = std::chrono::milliseconds(100);
  crc::Runtime rt(o);
  int* flag = rt.alloc<int>(1);
  std::atomic<bool> read_first{false};
  testing::internal::CaptureStderr();
  rt.run([&] {
    if (crc::worker_id() == 1) {
      while (!read_first.load()) std::this_thread::yield();
      crc::write(flag, 1);  // released at the task's end
      return;
    }
    // Worker 0 spins on the copy it read first, without an acquire: it never sees the 1.
    int seen = crc::read(flag);
    read_first.store(true);
    for (auto t0 = std::chrono::steady_clock::now();
         std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(600);)
      seen = crc::read(flag);
    EXPECT_EQ(seen, 0);
  });
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("no worker has asked the home anything for 100 ms (HDSM_CRC_TIMEOUT) while worker 0 is "
                      "still in its task"),
            std::string::npos)
      << said;
  EXPECT_EQ(said.find("no worker has asked", said.find("no worker has asked") + 1), std::string::npos)
      << "said twice: " << said;
  EXPECT_EQ(*flag, 1);
}

TEST(CrcErrors, ABarrierThatAWorkerReachesTooLateTimesOut) {
  crc::Options o = options(2);
  o.timeout = std::chrono::milliseconds(100);
  crc::Runtime rt(o);
  const std::string what = error_of([&] {
    rt.run([&] {
      if (crc::worker_id() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(600));
      crc::barrier();
    });
  });
  EXPECT_NE(what.find("worker 1 did not come (worker 0 waited) within 100 ms"), std::string::npos) << what;
}

// The timeout counts from when a worker began to wait, not from the home's last request: a worker
// that misses its buffer over and over (it reads more pages than its store holds) kept the home
// busy, and the others waited at the barrier, or for the lock it held, for as long as it went on.
TEST(CrcErrors, AWorkerThatKeepsAskingDoesNotHoldOffTheTimeout) {
  crc::Options o = options(2, 128, 1024);  // 8 frames: every read of 64 pages in turn misses
  o.timeout = std::chrono::milliseconds(200);
  crc::Runtime rt(o);
  constexpr std::size_t kInts = 64 * 128 / sizeof(int);
  int* data = rt.alloc<int>(kInts);
  for (const bool at_barrier : {true, false}) {
    SCOPED_TRACE(at_barrier ? "a barrier" : "a lock");
    const auto start = std::chrono::steady_clock::now();
    std::atomic<bool> holding{false};
    const std::string what = error_of([&] {
      rt.run([&] {
        if (crc::worker_id() == 0) {
          if (at_barrier) {
            crc::barrier();
          } else {
            while (!holding.load()) std::this_thread::yield();
            crc::lock(1);  // worker 1 holds it
            crc::unlock(1);
          }
          return;
        }
        if (!at_barrier) crc::lock(1);
        holding.store(true);
        long sum = 0;
        for (auto t0 = std::chrono::steady_clock::now();
             std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3);)
          for (std::size_t i = 0; i < kInts; i += 128 / sizeof(int)) sum += crc::read(data + i);
        EXPECT_EQ(sum, 0);
        if (at_barrier)
          crc::barrier();
        else
          crc::unlock(1);
      });
    });
    EXPECT_NE(
        what.find(at_barrier ? "worker 1 did not come (worker 0 waited) within 200 ms"
                             : "crc lock 1: worker 0 waited for it for more than 200 ms (worker 1 holds it)"),
        std::string::npos)
        << what;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2500));  // not 3 s
  }
}

// A worker that never comes to the barrier and asks the home nothing (it spins on a flag read
// without an acquire, which a data-race-free program never does, and hits its buffer every time) is
// stopped once the barrier timed out: its next access ends its task, and the region ends with the
// timeout's error (before, the home decided the error and then waited for the worker for good).
TEST(CrcErrors, AWorkerThatOnlyHitsItsBufferIsStoppedWhenTheRegionFails) {
  crc::Options o = options(2);
  o.timeout = std::chrono::milliseconds(200);
  crc::Runtime rt(o);
  int* flag = rt.alloc<int>(1);
  const auto start = std::chrono::steady_clock::now();
  std::atomic<bool> buffered{false};  // worker 1 holds the flag's page (as 0) before worker 0 writes it
  const std::string what = error_of([&] {
    rt.run([&] {
      if (crc::worker_id() == 0) {
        while (!buffered.load()) std::this_thread::yield();
        crc::write(flag, 1);
        crc::barrier();
      } else {
        int seen = crc::read(flag);
        buffered.store(true);
        while (seen == 0) seen = crc::read(flag);
        crc::barrier();
      }
    });
  });
  EXPECT_NE(what.find("worker 1 did not come (worker 0 waited) within 200 ms"), std::string::npos) << what;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  rt.run([&] {  // the runtime goes on
    if (crc::worker_id() == 1) crc::write(flag, 7);
  });
  EXPECT_EQ(*flag, 7);
}

// An hdsm error a task throws or causes, not from the worker's own accesses (which name it), reaches
// the home with the worker's number and its type.
TEST(CrcErrors, AnHdsmErrorFromATaskNamesTheWorker) {
  crc::Runtime rt(options(3));
  try {
    rt.run([&] {
      if (crc::worker_id() == 2) throw hdsm::InvalidArgument("input file is empty");
    });
    FAIL() << "no error";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "crc worker 2: input file is empty");
  }
  const std::string what = error_of([&] {
    rt.run([&] {
      if (crc::worker_id() == 1) (void)crc::share(10, 0);
    });
  });
  EXPECT_TRUE(what.starts_with("crc worker 1: crc::share(n, 0)")) << what;
  // Types that cannot be rebuilt with the number keep their type.
  EXPECT_THROW(rt.run([&] {
    if (crc::worker_id() == 0) throw hdsm::SystemError("open", "input.dat", ENOENT);
  }),
               hdsm::SystemError);
}

TEST(CrcErrors, AWorkerThatThrowsEndsTheRegionWithItsNumber) {
  crc::Runtime rt(options(3));
  try {
    rt.run([&] {
      if (crc::worker_id() == 1) throw std::runtime_error("bad input");
      crc::barrier();  // the others wait here and are released
    });
    FAIL() << "no error";
  } catch (const hdsm::KernelFailure& e) {
    EXPECT_NE(std::string(e.what()).find("crc worker 1: the task threw: bad input"), std::string::npos)
        << e.what();
    try {
      std::rethrow_if_nested(e);
      FAIL() << "the worker's own exception is not nested";
    } catch (const std::runtime_error& inner) {
      EXPECT_STREQ(inner.what(), "bad input");
    }
  }
}

// A lock guard (lock in its constructor, unlock in its destructor) on a worker whose region fails
// while it waits: the unlock during the unwinding did not throw RegionAborted again from a
// destructor (std::terminate, on threads and over MPI). The region's error is the thrower's, and the
// runtime goes on, with the lock free.
TEST(CrcErrors, ALockGuardUnwoundByAFailedRegionEndsQuietly) {
  struct Guard {
    int id;
    explicit Guard(int i) : id(i) { crc::lock(id); }
    ~Guard() { crc::unlock(id); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
  };
  crc::Runtime rt(options(3));
  int* counter = rt.alloc<int>(1);
  for (int round = 0; round < 5; ++round) {
    const std::string error = error_of([&] {
      rt.run([&] {
        if (crc::worker_id() == 0) throw std::runtime_error("worker 0 gives up");
        const Guard g(7);
        crc::write(counter, crc::read(counter) + 1);
        crc::barrier();  // worker 0 never comes: the region fails here, under the guard
      });
    });
    EXPECT_NE(error.find("crc worker 0: the task threw: worker 0 gives up"), std::string::npos) << error;
  }
  // Lock 7 is free again: every worker takes it in the next region.
  *counter = 0;
  rt.run([&] {
    const Guard g(7);
    crc::write(counter, crc::read(counter) + 1);
  });
  EXPECT_EQ(*counter, 3);
  rt.free(counter);
}

// A worker that goes on after its accesses fail (another worker threw, so the region ends and
// every miss is refused) keeps its page buffer whole: each refused miss gives its frame back
// (before, the frames leaked one a miss, and a capacity miss then evicted a way of -1).
TEST(CrcErrors, MissesRefusedAfterAFailureGiveTheirFramesBack) {
  crc::Runtime rt(options(2, 1024, 8 << 10));  // 8 frames
  int* a = rt.alloc<int>(256 * 64);            // 64 pages
  std::atomic<int> refused{0};
  const std::string what = error_of([&] {
    rt.run([&] {
      if (crc::worker_id() == 1) throw std::runtime_error("bad input");
      for (int n = 0, i = 0; refused.load() < 100 && n < 1'000'000; ++n, i = (i + 256) % (256 * 64)) {
        try {
          (void)crc::read(&a[i]);
        } catch (...) {  // NOLINT(bugprone-empty-catch): the test goes on after the error
          refused.fetch_add(1);
        }
      }
    });
  });
  EXPECT_NE(what.find("crc worker 1: the task threw: bad input"), std::string::npos) << what;
  EXPECT_GE(refused.load(), 100);
  rt.run([&] { (void)crc::read(&a[0]); });  // the runtime goes on
}

TEST(CrcErrors, AccessOutsideATaskAndBadOptions) {
  crc::Runtime rt(options(1));
  int* a = rt.alloc<int>(4);
  EXPECT_THROW(crc::read(a), hdsm::InvalidArgument);
  EXPECT_THROW(crc::write(a, 1), hdsm::InvalidArgument);
  EXPECT_THROW(crc::barrier(), hdsm::InvalidArgument);
  EXPECT_EQ(crc::worker_id(), -1);
  EXPECT_THROW(crc::Runtime(options(1, 4096, 2048)), hdsm::InvalidArgument);  // store below one page
  EXPECT_THROW(crc::Runtime(options(65)), hdsm::InvalidArgument);
  try {  // a local store smaller than one page says which two settings to change
    crc::Runtime small(options(1, 4096, 2048));
    ADD_FAILURE() << "a 2 KiB local store with 4 KiB pages was accepted";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "crc local store of 2048 B holds no page of 4096 B: give it at least one page (HDSM_CRC_LOCAL_STORE, "
        "Options::local_store), or use smaller pages (HDSM_CRC_PAGE_SIZE, Options::page_size)");
  }
  for (const long ms : {0L, -5L, 86'400'001L}) {  // the knobs' ranges hold for Options too
    crc::Options o = options(1);
    o.timeout = std::chrono::milliseconds(ms);
    EXPECT_THROW(crc::Runtime{o}, hdsm::InvalidArgument) << ms;
  }
  {
    crc::Options o = options(1);
    o.timeout = std::chrono::milliseconds(0);
    EXPECT_EQ(
        error_of([&] { crc::Runtime{o}; }),
        "crc::Options::timeout = 0 ms is out of range: HDSM_CRC_TIMEOUT accepts 1..86400000 (milliseconds)");
  }
  for (const long us : {-1L, 1'000'001L}) {  // a negative spin was a budget that never sleeps
    crc::Options o = options(1);
    o.region_spin = std::chrono::microseconds(us);
    EXPECT_THROW(crc::Runtime{o}, hdsm::InvalidArgument) << us;
  }
  // Every option set in code has its knob's range (a TiB store took minutes of page-buffer tables,
  // and an unknown transport became MPI); the message names the option and the knob.
  const std::vector<std::pair<std::string, std::function<void(crc::Options&)>>> bad = {
      {"crc::Options::local_store = 1 TiB is out of range: HDSM_CRC_LOCAL_STORE accepts 1KiB..1GiB",
       [](crc::Options& o) { o.local_store = std::size_t{1} << 40; }},
      {"crc::Options::shared_bytes = 0 B is out of range: HDSM_CRC_SHARED accepts 1MiB..1TiB",
       [](crc::Options& o) { o.shared_bytes = 0; }},
      {"crc::Options::wait.spin_us = 4000000000 is out of range: HDSM_WAIT_SPIN_US accepts 0..100000",
       [](crc::Options& o) { o.wait.spin_us = 4'000'000'000U; }},
      {"crc::Options::wait.kind = 7 is no WaitPolicy::Kind",
       [](crc::Options& o) { o.wait.kind = static_cast<hdsm::WaitPolicy::Kind>(7); }},
      {"crc::Options::transport = 9 is no Transport",
       [](crc::Options& o) { o.transport = static_cast<crc::Transport>(9); }},
      {"crc::Options::bind = 5 is no Bind", [](crc::Options& o) { o.bind = static_cast<crc::Bind>(5); }}};
  for (const auto& [want, spoil] : bad) {
    crc::Options o = options(1);
    spoil(o);
    const std::string got = error_of([&] { crc::Runtime{o}; });
    EXPECT_NE(got.find(want), std::string::npos) << got;
  }
  // A count whose bytes overflow is as much too large as it is, not a few bytes.
  EXPECT_THROW((void)rt.alloc<double>(SIZE_MAX / sizeof(double) + 2), hdsm::OutOfDeviceMemory);
  EXPECT_THROW(rt.free(a + 1), hdsm::InvalidPointer);
  std::atomic<bool> refused{false};
  rt.run([&] {
    try {
      rt.free(a);
    } catch (const hdsm::InvalidArgument&) {
      refused = true;  // a free inside a region would race with the home's heap
    }
  });
  EXPECT_TRUE(refused.load());
  // define() inside a region: a task redefining itself destroyed the function it ran (a crash), and
  // workers defining at once raced on the table.
  rt.define(7, [] {});
  std::atomic<int> define_refused{0};
  rt.run(7);
  rt.run([&] {
    try {
      rt.define(7, [] {});
    } catch (const hdsm::InvalidArgument& e) {
      if (std::string(e.what()) == "crc::Runtime::define inside a region: define tasks between regions")
        ++define_refused;
    }
  });
  EXPECT_EQ(define_refused.load(), 1);
  rt.free(a);
  rt.free(nullptr);  // nothing, as std::free(nullptr)
  // A second host thread's region (or change) while one runs is named as such, not as nesting.
  std::atomic<bool> started{false};
  std::atomic<bool> release{false};
  std::thread first([&] {
    rt.run([&] {
      started = true;
      while (!release.load()) std::this_thread::yield();
    });
  });
  while (!started.load()) std::this_thread::yield();
  for (const auto& [call, attempt] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"run", [&] { rt.run([] {}); }}, {"page_size", [&] { rt.page_size(4096); }}}) {
    try {
      attempt();
      ADD_FAILURE() << call << " went through while another thread's region ran";
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()),
                "crc::Runtime::" + call +
                    " while another thread runs a region of this runtime: a runtime runs "
                    "one region at a time, and is changed between them");
    }
  }
  release = true;
  first.join();
  rt.run([] {});  // and once it has ended, any thread's
  try {
    rt.allocate(std::size_t{1} << 40);
    ADD_FAILURE() << "allocated a TiB";
  } catch (const hdsm::OutOfDeviceMemory& e) {  // names the setting that raises the space
    EXPECT_NE(std::string(e.what()).find("out of memory in the crc shared space"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("raise HDSM_CRC_SHARED"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

TEST(CrcHomeWorks, TheHomeRunsTheTaskTooInARegionThatNeedsNoServicing) {
  crc::Runtime rt(options(2, 1024));
  const std::size_t n = 3 * 4096;
  double* in = rt.alloc<double>(n);
  double* out = rt.alloc<double>(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<double>(i);
  std::atomic<int> seen_count{0}, home_ran{0};
  rt.run_with_home([&] {
    seen_count.store(crc::worker_count());
    if (crc::worker_id() == rt.workers()) home_ran.store(1);
    const auto [lo, hi] = crc::share(n, rt.page_size() / sizeof(double));
    for (std::size_t i = lo; i < hi;) {
      const crc::Local<double> d = crc::overwrite_local(&out[i]);
      const crc::Local<const double> s = crc::read_only_local(&in[i]);
      const std::size_t m = std::min({d.count, s.count, hi - i});
      for (std::size_t k = 0; k < m; ++k) d.data[k] = 2 * s.data[k];
      i += m;
    }
  });
  EXPECT_EQ(seen_count.load(), 3);
  EXPECT_EQ(home_ran.load(), 1);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 2.0 * static_cast<double>(i)) << i;
  EXPECT_EQ(rt.stats().write_faults + rt.stats().read_misses, 0u);
  // A plain region afterwards has the workers alone again.
  rt.run([&] { seen_count.store(crc::worker_count()); });
  EXPECT_EQ(seen_count.load(), 2);
}

// The home's own task fails as a worker's does: a KernelFailure naming it, the original nested
// (before, the original escaped as it was, where a worker's error is wrapped).
TEST(CrcHomeWorks, TheHomesTaskErrorIsAKernelFailureNamingIt) {
  crc::Runtime rt(options(1));
  for (const bool standard : {true, false}) {
    try {
      rt.run_with_home([&] {
        if (crc::worker_id() == rt.workers()) {
          if (standard) throw std::runtime_error("home says no");
          throw 42;
        }
      });
      FAIL() << "no error";
    } catch (const hdsm::KernelFailure& e) {
      const std::string want =
          standard ? "crc worker 1: the task threw: home says no"
                   : "crc worker 1: the task threw: an exception that is not a std::exception";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      if (standard) {
        try {
          std::rethrow_if_nested(e);
          ADD_FAILURE() << "nothing nested";
        } catch (const std::runtime_error& nested) {
          EXPECT_STREQ(nested.what(), "home says no");
        }
      }
    }
  }
}

TEST(CrcHomeWorks, AnAccessOfTheHomesThatNeedsServingIsUnsupported) {
  crc::Runtime rt(options(1));
  int* a = rt.alloc<int>(16);
  try {
    rt.run_with_home([&] {
      if (crc::worker_id() == rt.workers()) crc::write(&a[0], 1);  // a write fault: needs the home
    });
    FAIL() << "no error";
  } catch (const hdsm::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("crc worker 1 (the home, in run_with_home)"), std::string::npos)
        << e.what();
  }
  rt.run([&] { crc::write(&a[1], 2); });  // the runtime goes on
  EXPECT_EQ(a[1], 2);
}

}  // namespace

namespace {

void overflow_in_a_task() {
  hdsm::test::default_fault_disposition();  // a sanitizer's handler would report it its own way
  crc::Runtime rt(options(2));
  rt.run([] {
    if (crc::worker_id() == 1) std::printf("%d\n", hdsm::test::recurse_deeply(0));
  });
}

// A task that overflows its worker's stack: handled on the worker's signal stack, with a message
// (before, the process died of SIGSEGV with nothing said: no stack was left to handle it on).
TEST(CrcDeathTest, ATaskThatOverflowsItsStackEndsWithAMessage) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "stack overflows are checked in plain builds";
#endif
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_DEATH(overflow_in_a_task(), "stack overflow");
}

}  // namespace

namespace {

// The shared space is reserved, and committed as it is written: an allocation wrote zeros over all
// of its bytes, which committed 1 GiB at once (and took seconds). A freed allocation's bytes still
// come back zero.
TEST(CrcRuntime, AnAllocationCommitsNoMemoryAndComesZeroed) {
  crc::Options o = options(2);
  o.shared_bytes = std::size_t{2} << 30;
  crc::Runtime rt(o);
  const std::size_t before = resident_bytes();
  auto* big = static_cast<unsigned char*>(rt.allocate(std::size_t{1} << 30));
  EXPECT_LT(resident_bytes() - before, std::size_t{64} << 20) << "resident memory grew by the allocation";
  rt.run([&] {
    if (crc::worker_id() == 0) crc::write(big + 12345, static_cast<unsigned char>(7));
  });
  EXPECT_EQ(big[12345], 7);
  EXPECT_EQ(big[0], 0);
  rt.free(big);
  auto* again = static_cast<unsigned char*>(rt.allocate(1 << 20));
  ASSERT_EQ(again, big) << "first fit: the freed range again";
  EXPECT_EQ(again[12345], 0) << "a reused byte is cleared";
}

// A child of fork() has none of the runtime's workers: run() waited for them forever.
TEST(CrcRuntime, AChildOfForkIsRefusedInsteadOfWaitingForWorkersItLacks) {
  const hdsm::test::DeathTestStyle fork_this_process("fast");  // the child is a fork of this one
  crc::Runtime rt(options(2));
  rt.run([] {});
  EXPECT_EXIT(
      {
        ::alarm(20);  // a hang fails the test instead of waiting for its timeout
        try {
          rt.run([] {});
        } catch (const hdsm::Unsupported& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::_Exit(3);
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(3), "made before this process was forked");
}

// allocate and free from two host threads at once, between regions: they changed the heap together
// (a segmentation fault in 4 of 5 runs).
TEST(CrcRuntime, HostThreadsAllocateAndFreeAtOnce) {
  crc::Runtime rt(options(2));
  const auto churn = [&](int salt) {
    std::vector<int*> mine;
    for (int i = 0; i < 2000; ++i) {
      mine.push_back(rt.alloc<int>(static_cast<std::size_t>(1 + (i * 7 + salt) % 300)));
      if (mine.size() > 8) {
        rt.free(mine.front());
        mine.erase(mine.begin());
      }
    }
    for (int* p : mine) rt.free(p);
  };
  std::thread other(churn, 1);
  churn(2);
  other.join();
  int* p = rt.alloc<int>(1000);  // the heap is whole: all of it can be allocated again
  rt.run([&] { crc::write(&p[crc::worker_id()], crc::worker_id() + 1); });
  EXPECT_EQ(p[0] + p[1], 3);
}

// A task of runtime A that runs runtime B's region with itself as B's home worker goes on as A's
// worker afterwards: its next access threw "crc::write outside a task".
TEST(CrcRuntime, ATaskThatRunsAnotherRuntimesRegionWithHomeGoesOn) {
  crc::Runtime a(options(2)), b(options(2));
  int* x = a.alloc<int>(64);
  int* y = b.alloc<int>(3 * 1024);  // a 4 KiB page each for B's two workers and its home
  a.run([&] {
    const int me = crc::worker_id();
    crc::write(&x[me], 1);
    // The home may use the variants only; write_single: one writer a page.
    if (me == 0) b.run_with_home([&] { crc::write_single(&y[crc::worker_id() * 1024], 5); });
    crc::write(&x[10 + me], 2);
    crc::barrier();
  });
  EXPECT_EQ(x[0] + x[1] + x[10] + x[11], 6);
  EXPECT_EQ(y[0] + y[1024] + y[2048], 15);
}

}  // namespace
