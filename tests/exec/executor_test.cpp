// The grid executor: coverage of the grid, launch validation, errors, arenas and the pool.
#include "exec/executor.hpp"
#include "os/cpu_binding.hpp"

#include "exec_test_kernels.hpp"

#include <hdsm/error.hpp>
#include <hdsm/kernel.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hdsm::exec {
namespace {

using testing::run;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

TEST(ExecutorTest, WorkerCountFollowsOptions) {
  Executor all;
  EXPECT_EQ(all.workers(), hdsm::os::usable_cpus());  // the CPUs it may run on, not every one online
  EXPECT_EQ(all.options().threads, all.workers());
  Executor three(ExecutorOptions{3});
  EXPECT_EQ(three.workers(), 3u);
  EXPECT_THROW(Executor(ExecutorOptions{1, 1024}), InvalidArgument);
}

TEST(ExecutorTest, VectorAddWithPartialLastBlock) {
  Executor ex;
  const std::uint64_t n = 1'000'003;  // 3907 blocks of 256, the last one with 67 threads
  const auto a = testing::small_ints(n, 1), b = testing::small_ints(n, 2);
  std::vector<float> c(n + 64, -100.0f);
  run(testing::vector_add(), ex, cover(n), a.data(), b.data(), c.data(), n);
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(c[i], a[i] + b[i]) << "index " << i;
  for (std::uint64_t i = n; i < c.size(); ++i) ASSERT_EQ(c[i], -100.0f) << "written past n at " << i;
}

TEST(ExecutorTest, Grid2DVisitsEveryIndexOnce) {
  Executor ex;
  const std::uint32_t w = 100, h = 37;
  std::vector<std::atomic<int>> hits(w * h);
  std::atomic<int> outside{0};
  auto k = per_thread("visit_2d", [](const Thread& t, std::atomic<int>* hits, std::atomic<int>* outside,
                                     std::uint32_t w, std::uint32_t h) {
    if (t.global_x() < w && t.global_y() < h)
      hits[t.global_y() * w + t.global_x()].fetch_add(1);
    else
      outside->fetch_add(1);
  });
  const Launch launch{Dim3((w + 15) / 16, (h + 7) / 8), Dim3(16, 8), 0};
  run(k, ex, launch, hits.data(), &outside, w, h);
  for (std::uint32_t i = 0; i < w * h; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
  EXPECT_EQ(outside.load(), static_cast<int>(launch.grid.volume() * launch.block.volume() - w * h));
}

TEST(ExecutorTest, Grid3DVisitsEveryIndexOnce) {
  Executor ex;
  const std::uint32_t nx = 10, ny = 13, nz = 17;
  std::vector<std::atomic<int>> hits(nx * ny * nz);
  auto k = per_thread("visit_3d", [](const Thread& t, std::atomic<int>* hits, std::uint32_t nx,
                                     std::uint32_t ny, std::uint32_t nz) {
    if (t.global_x() < nx && t.global_y() < ny && t.global_z() < nz)
      hits[(t.global_z() * ny + t.global_y()) * nx + t.global_x()].fetch_add(1);
  });
  const Launch launch{Dim3(3, 4, 5), Dim3(4, 4, 4), 0};
  run(k, ex, launch, hits.data(), nx, ny, nz);
  for (std::uint32_t i = 0; i < nx * ny * nz; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
}

TEST(ExecutorTest, EveryBlockRunsOnceWithItsArenas) {
  // Big enough that chunks of many blocks wrap around x and y.
  for (unsigned workers : {1u, 2u}) {
    Executor ex(ExecutorOptions{workers});
    const Launch launch{Dim3(7, 5, 30), Dim3(8, 2, 1), 1000};
    std::mutex mu;
    std::vector<int> seen(launch.grid.volume(), 0);
    std::string problems;
    ex.for_each_block(launch, [&](const BlockRun& r) {
      std::lock_guard lock(mu);
      if (r.block.x >= launch.grid.x || r.block.y >= launch.grid.y || r.block.z >= launch.grid.z) {
        problems += "block out of the grid;";
        return;
      }
      ++seen[(r.block.z * launch.grid.y + r.block.y) * launch.grid.x + r.block.x];
      if (r.launch != &launch) problems += "launch;";
      if (r.shared_capacity != 1000 + kStaticSharedBytes) problems += "shared_capacity;";
      if (r.scratch_capacity != kScratchBytes) problems += "scratch_capacity;";
      if (r.worker >= ex.workers()) problems += "worker;";
      if (r.executor != &ex) problems += "executor;";
      if (reinterpret_cast<std::uintptr_t>(r.shared) % 64 != 0) problems += "alignment;";
      // The whole arena must be writable.
      std::fill(r.shared, r.shared + r.shared_capacity, std::byte{1});
      std::fill(r.scratch, r.scratch + r.scratch_capacity, std::byte{2});
    });
    for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "block " << i;
    EXPECT_EQ(problems, "");
  }
}

TEST(ExecutorTest, RejectsZeroDimensions) {
  Executor ex;
  const auto k = testing::vector_add();
  float x = 0;
  const std::string grid = error_of([&] {
    run(k, ex, Launch{Dim3(0), Dim3(256), 0}, &x, &x, &x, std::uint64_t{1});
  });
  EXPECT_TRUE(contains(grid, "grid (0, 1, 1) x block (256, 1, 1)")) << grid;
  EXPECT_THROW(run(k, ex, Launch{Dim3(1), Dim3(1, 0, 1), 0}, &x, &x, &x, std::uint64_t{1}), InvalidArgument);
  EXPECT_THROW(run(k, ex, Launch{Dim3(2, 2, 0), Dim3(1), 0}, &x, &x, &x, std::uint64_t{1}), InvalidArgument);
}

TEST(ExecutorTest, RejectsBlocksAbove1024Threads) {
  Executor ex;
  std::atomic<std::uint64_t> ran{0};
  auto count = per_thread("count", [](const Thread&, std::atomic<std::uint64_t>* ran) { ran->fetch_add(1); });
  try {
    run(count, ex, Launch{Dim3(1), Dim3(2048), 0}, &ran);
    FAIL() << "a 2048-thread block was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(std::string(e.what()), "block (2048, 1, 1)")) << std::string(e.what());
    EXPECT_TRUE(contains(std::string(e.what()), "2048 threads")) << std::string(e.what());
  }
  EXPECT_THROW(run(count, ex, Launch{Dim3(1), Dim3(32, 32, 2), 0}, &ran), InvalidArgument);
  EXPECT_EQ(ran.load(), 0u);
  run(count, ex, Launch{Dim3(3), Dim3(32, 32, 1), 0}, &ran);
  EXPECT_EQ(ran.load(), 3u * 1024u);
}

TEST(ExecutorTest, BlockExceptionPropagatesAndExecutorStaysUsable) {
  Executor ex;
  auto failing = per_thread("failing", [](const Thread& t, std::uint64_t bad) {
    if (t.global_x() == bad) throw std::runtime_error("thread " + std::to_string(bad) + " failed");
  });
  for (std::uint64_t bad : {std::uint64_t{0}, std::uint64_t{5000}, std::uint64_t{65535}}) {
    try {
      run(failing, ex, cover(65536), bad);
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "thread " + std::to_string(bad) + " failed");
    }
  }
  const std::uint64_t n = 10'000;
  const auto a = testing::small_ints(n, 3), b = testing::small_ints(n, 4);
  std::vector<float> c(n);
  run(testing::vector_add(), ex, cover(n), a.data(), b.data(), c.data(), n);
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(c[i], a[i] + b[i]);
}

TEST(ExecutorTest, BlocksAfterAFailureAreSkipped) {
  Executor ex(ExecutorOptions{1});
  std::atomic<int> blocks{0};
  EXPECT_THROW(ex.for_each_block(Launch{Dim3(1000), Dim3(1), 0},
                                 [&](const BlockRun& r) {
                                   blocks.fetch_add(1);
                                   if (r.block.x == 3) throw KernelFailure("block 3");
                                 }),
               KernelFailure);
  EXPECT_EQ(blocks.load(), 4);
}

TEST(ExecutorTest, OtherWorkersStopAfterAFailure) {
  Executor ex(ExecutorOptions{2});
  std::atomic<int> ran{0};
  std::atomic<bool> thrown{false};
  const auto wait_for = [](auto&& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  };
  EXPECT_THROW(ex.for_each_block(Launch{Dim3(64), Dim3(1), 0},
                                 [&](const BlockRun& r) {
                                   ran.fetch_add(1);
                                   if (r.block.x == 0) {
                                     wait_for([&] { return ran.load() >= 2; });  // the other worker is busy
                                     thrown.store(true);
                                     throw KernelFailure("block 0");
                                   }
                                   // Slow enough that the failure is recorded before this worker goes on.
                                   wait_for([&] { return thrown.load(); });
                                   std::this_thread::sleep_for(std::chrono::milliseconds(50));
                                 }),
               KernelFailure);
  EXPECT_LT(ran.load(), 8);
}

TEST(ExecutorTest, SharedOverflowIsKernelFailure) {
  Executor ex;
  auto greedy = per_block("greedy", [](Block& b, std::uint64_t bytes) {
    std::byte* p = b.shared<std::byte>(bytes);
    b.threads([&](const Thread& t) { p[t.rank()] = std::byte{1}; });
  });
  run(greedy, ex, Launch{Dim3(4), Dim3(64), 0}, std::uint64_t{kStaticSharedBytes});
  run(greedy, ex, Launch{Dim3(4), Dim3(64), 100}, std::uint64_t{kStaticSharedBytes});
  try {
    run(greedy, ex, Launch{Dim3(1), Dim3(64), 100}, std::uint64_t{kStaticSharedBytes + 1});
    FAIL() << "no overflow reported";
  } catch (const KernelFailure& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "block (0, 0, 0)")) << what;
    EXPECT_TRUE(contains(what, std::to_string(100 + kStaticSharedBytes + 1) + " bytes")) << what;
    EXPECT_TRUE(contains(what, "capacity of " + std::to_string(100 + kStaticSharedBytes) + " bytes")) << what;
  }
}

TEST(ExecutorTest, LocalOverflowIsKernelFailure) {
  Executor ex;
  auto fits = per_block("locals_fit", [](Block& b, int* out) {
    auto v = b.local<double>();
    b.threads([&](const Thread& t) { v[t.rank()] = t.rank(); });
    b.threads([&](const Thread& t) { out[t.rank()] = static_cast<int>(v[(t.rank() + 1) % b.size()]); });
  });
  std::vector<int> out(1024);
  run(fits, ex, Launch{Dim3(1), Dim3(1024), 0}, out.data());
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(out[i], (i + 1) % 1024);

  auto too_big = per_block("locals_too_big", [](Block& b) { b.local<std::array<char, 512>>(); });
  const std::string what = error_of([&] { run(too_big, ex, Launch{Dim3(1), Dim3(1024), 0}); });
  EXPECT_TRUE(contains(what, "Block::local")) << what;
  EXPECT_TRUE(contains(what, std::to_string(512 * 1024))) << what;
  EXPECT_THROW(run(too_big, ex, Launch{Dim3(1), Dim3(1024), 0}), KernelFailure);
}

TEST(ExecutorTest, DynamicSharedComesFirstAndGrowsTheArena) {
  Executor ex;
  auto k = per_block("dynamic", [](Block& b, std::uint64_t dynamic, int* bad) {
    auto* dyn = static_cast<unsigned char*>(b.dynamic_shared());
    auto* stat = b.shared<unsigned char>(kStaticSharedBytes);
    if (stat < dyn + dynamic) ++*bad;  // only one block writes bad: grid of 1
    for (std::uint64_t i = 0; i < dynamic; ++i) dyn[i] = static_cast<unsigned char>(i);
    for (std::size_t i = 0; i < kStaticSharedBytes; ++i) stat[i] = 0xAB;
    for (std::uint64_t i = 0; i < dynamic; ++i)
      if (dyn[i] != static_cast<unsigned char>(i)) ++*bad;
  });
  int bad = 0;
  for (std::uint64_t dynamic : {std::uint64_t{16}, std::uint64_t{1} << 20, std::uint64_t{4096}}) {
    run(k, ex, Launch{Dim3(1), Dim3(32), dynamic}, dynamic, &bad);
    EXPECT_EQ(bad, 0) << dynamic;
  }
  EXPECT_THROW(run(k, ex, Launch{Dim3(1), Dim3(32), std::size_t{1} << 31}, std::uint64_t{0}, &bad),
               InvalidArgument);
}

TEST(ExecutorTest, ArgumentCountMismatchIsInvalidArgument) {
  Executor ex;
  float x = 0;
  try {
    run(testing::vector_add(), ex, cover(1), &x, &x);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), "kernel 'vector_add' expects 4 arguments, got 2");
  }
}

TEST(ExecutorTest, ArgumentSizeMismatchIsInvalidArgument) {
  Executor ex;
  float x = 0;
  try {
    run(testing::vector_add(), ex, cover(1), &x, &x, &x, 1);  // int where uint64_t is expected
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), "argument 3 of kernel 'vector_add' is 4 bytes, expected 8");
  }
}

TEST(ExecutorTest, NestedLaunchIsRejected) {
  Executor ex;
  EXPECT_THROW(
      ex.for_each_block(Launch{Dim3(4), Dim3(1), 0},
                        [&](const BlockRun&) { ex.for_each_block(Launch{}, [](const BlockRun&) {}); }),
      InvalidArgument);
  std::atomic<int> blocks{0};
  ex.for_each_block(Launch{Dim3(4), Dim3(1), 0}, [&](const BlockRun&) { blocks.fetch_add(1); });
  EXPECT_EQ(blocks.load(), 4);
}

TEST(ExecutorTest, ConcurrentLaunchesFromFourHostThreads) {
  Executor ex;
  constexpr int kHosts = 4, kRounds = 12;
  std::atomic<int> failures{0};
  std::vector<std::thread> hosts;
  for (int h = 0; h < kHosts; ++h)
    hosts.emplace_back([&, h] {
      const std::uint64_t n = 20'000 + 1'000 * static_cast<std::uint64_t>(h);
      const auto a = testing::small_ints(n, 10 + h), b = testing::small_ints(n, 20 + h);
      const auto sums = testing::reduce_reference(a, 128);
      const auto add = testing::vector_add();
      const auto reduce = testing::reduce_cooperative();
      for (int round = 0; round < kRounds; ++round) {
        std::vector<float> c(n), partial(sums.size());
        run(add, ex, cover(n), a.data(), b.data(), c.data(), n);
        run(reduce, ex, cover(n, 128), a.data(), partial.data(), n);
        for (std::uint64_t i = 0; i < n; ++i)
          if (c[i] != a[i] + b[i]) {
            failures.fetch_add(1);
            break;
          }
        if (partial != sums) failures.fetch_add(1);
      }
    });
  for (auto& t : hosts) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ExecutorTest, SingleWorkerRunsEverythingOnTheCaller) {
  Executor ex(ExecutorOptions{1});
  ASSERT_EQ(ex.workers(), 1u);
  const auto caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  ex.for_each_block(Launch{Dim3(64), Dim3(1), 0}, [&](const BlockRun& r) {
    if (std::this_thread::get_id() != caller || r.worker != 0) elsewhere.fetch_add(1);
  });
  EXPECT_EQ(elsewhere.load(), 0);
  const std::uint64_t n = 5'000;
  const auto a = testing::small_ints(n, 5);
  std::vector<float> partial((n + 255) / 256);
  run(testing::reduce_cooperative(), ex, cover(n), a.data(), partial.data(), n);
  EXPECT_EQ(partial, testing::reduce_reference(a, 256));
}

TEST(ExecutorTest, ThreeWorkersRunBlocksConcurrently) {
  Executor ex(ExecutorOptions{3});
  // Each block waits until all three have started: only possible if three workers run at once.
  std::atomic<int> started{0};
  std::mutex mu;
  std::set<unsigned> workers;
  std::set<std::thread::id> threads;
  bool timed_out = false;
  ex.for_each_block(Launch{Dim3(3), Dim3(1), 0}, [&](const BlockRun& r) {
    {
      std::lock_guard lock(mu);
      workers.insert(r.worker);
      threads.insert(std::this_thread::get_id());
    }
    started.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (started.load() < 3) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::lock_guard lock(mu);
        timed_out = true;
        return;
      }
      std::this_thread::yield();
    }
  });
  EXPECT_FALSE(timed_out);
  EXPECT_EQ(workers, (std::set<unsigned>{0, 1, 2}));
  EXPECT_EQ(threads.size(), 3u);

  const int m = 37, n = 29, k = 41;
  const auto a = testing::small_ints(m * k, 6), b = testing::small_ints(k * n, 7);
  std::vector<float> c(m * n, -1.0f);
  run(testing::matmul_cooperative(), ex, testing::matmul_launch(m, n), a.data(), b.data(), c.data(), m, n, k);
  EXPECT_EQ(c, testing::matmul_reference(a, b, m, n, k));
}

TEST(ExecutorTest, IdleWorkersWakeUpForLaterLaunches) {
  Executor ex(ExecutorOptions{2});
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // long enough for the pool to sleep
    std::atomic<int> started{0};
    std::atomic<bool> timed_out{false};
    ex.for_each_block(Launch{Dim3(2), Dim3(1), 0}, [&](const BlockRun&) {
      started.fetch_add(1);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (started.load() < 2)
        if (std::chrono::steady_clock::now() > deadline) {
          timed_out = true;
          return;
        }
    });
    EXPECT_FALSE(timed_out.load()) << "round " << round;
  }
}

}  // namespace
}  // namespace hdsm::exec

namespace {

// A BlockInterval limits the launches of its thread to an interval of linear block numbers: the
// cluster runtime's per-rank share of a grid.
TEST(ExecutorTest, BlockIntervalRunsOnlyItsBlocks) {
  hdsm::exec::Executor ex(hdsm::exec::ExecutorOptions{2});
  const hdsm::Launch launch{hdsm::Dim3{4, 3}, hdsm::Dim3{1}, 0};
  std::vector<std::atomic<int>> seen(12);
  const auto run = [&] {
    ex.for_each_block(launch, [&](const hdsm::BlockRun& r) { ++seen[r.block.y * 4 + r.block.x]; });
  };
  {
    const hdsm::exec::BlockInterval interval(5, 9);
    run();
    const hdsm::exec::BlockInterval empty(20, 30);
    run();  // clamped to the grid: nothing
  }
  for (int i = 0; i < 12; ++i) EXPECT_EQ(seen[i], i >= 5 && i < 9 ? 1 : 0) << "block " << i;
  run();  // no interval: the whole grid
  for (int i = 0; i < 12; ++i) EXPECT_EQ(seen[i], i >= 5 && i < 9 ? 2 : 1) << "block " << i;
  EXPECT_EQ(hdsm::exec::BlockInterval::current(), nullptr);
}

}  // namespace
