// Block-level algorithms written both cooperative (fibers) and per_block (phases), checked
// against host references, plus the cooperative kernels' own rules (barriers, shared, errors).
#include "exec/executor.hpp"

#include "exec_test_kernels.hpp"

#include <hdsm/error.hpp>
#include <hdsm/kernel.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace hdsm::exec {
namespace {

using testing::run;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class KernelsTest : public ::testing::TestWithParam<unsigned> {
 protected:
  Executor ex{ExecutorOptions{GetParam()}};
};

TEST_P(KernelsTest, CooperativeTreeReduction) {
  for (std::uint32_t block : {32u, 256u, 1024u}) {
    const std::uint64_t n = 100'003;
    const auto in = testing::small_ints(n, block);
    std::vector<float> out((n + block - 1) / block, -1.0f);
    run(testing::reduce_cooperative(), ex, cover(n, block), in.data(), out.data(), n);
    EXPECT_EQ(out, testing::reduce_reference(in, block)) << "block " << block;
  }
}

TEST_P(KernelsTest, PerBlockTreeReduction) {
  for (std::uint32_t block : {32u, 256u, 1024u}) {
    const std::uint64_t n = 100'003;
    const auto in = testing::small_ints(n, block + 1);
    std::vector<float> out((n + block - 1) / block, -1.0f);
    run(testing::reduce_per_block(), ex, cover(n, block), in.data(), out.data(), n);
    EXPECT_EQ(out, testing::reduce_reference(in, block)) << "block " << block;
  }
}

struct MatmulSize {
  int m, n, k;
};
constexpr MatmulSize kMatmulSizes[] = {{16, 16, 16}, {70, 45, 53}, {1, 33, 17}, {64, 1, 100}, {129, 127, 31}};

TEST_P(KernelsTest, CooperativeTiledMatmul) {
  for (const auto [m, n, k] : kMatmulSizes) {
    const auto a = testing::small_ints(static_cast<std::size_t>(m) * k, 11),
               b = testing::small_ints(k * n, 12);
    std::vector<float> c(static_cast<std::size_t>(m) * n, -1.0f);
    run(testing::matmul_cooperative(), ex, testing::matmul_launch(m, n), a.data(), b.data(), c.data(), m, n,
        k);
    EXPECT_EQ(c, testing::matmul_reference(a, b, m, n, k)) << m << "x" << n << "x" << k;
  }
}

TEST_P(KernelsTest, PerBlockTiledMatmul) {
  for (const auto [m, n, k] : kMatmulSizes) {
    const auto a = testing::small_ints(static_cast<std::size_t>(m) * k, 13),
               b = testing::small_ints(k * n, 14);
    std::vector<float> c(static_cast<std::size_t>(m) * n, -1.0f);
    run(testing::matmul_per_block(), ex, testing::matmul_launch(m, n), a.data(), b.data(), c.data(), m, n, k);
    EXPECT_EQ(c, testing::matmul_reference(a, b, m, n, k)) << m << "x" << n << "x" << k;
  }
}

TEST_P(KernelsTest, CooperativeInclusiveScan) {
  for (std::uint32_t block : {2u, 64u, 512u, 1024u}) {
    const std::uint64_t n = 50'001;
    const auto in = testing::small_ints(n, 15 + block, 0, 3);
    std::vector<float> out(n, -1.0f);
    run(testing::scan_cooperative(), ex, cover(n, block), in.data(), out.data(), n);
    EXPECT_EQ(out, testing::scan_reference(in, block)) << "block " << block;
  }
}

TEST_P(KernelsTest, Cooperative3DBlocksExchangeThroughShared) {
  // Every thread publishes its global linear id, waits, then reads its successor's (by rank).
  auto k = cooperative("exchange_3d", [](ThreadCtx& t, std::uint64_t* out) {
    const std::uint32_t size = t.block_dim.x * t.block_dim.y * t.block_dim.z;
    auto* s = t.shared<std::uint64_t>(size);
    const std::uint64_t gx = std::uint64_t{t.grid_dim.x} * t.block_dim.x;
    const std::uint64_t gy = std::uint64_t{t.grid_dim.y} * t.block_dim.y;
    const std::uint64_t me = (t.global_z() * gy + t.global_y()) * gx + t.global_x();
    s[t.rank()] = me;
    t.sync();
    out[me] = s[(t.rank() + 1) % size];
  });
  const Launch launch{Dim3(3, 2, 2), Dim3(8, 4, 2), 0};
  const std::uint64_t total = launch.grid.volume() * launch.block.volume();
  std::vector<std::uint64_t> out(total, ~std::uint64_t{0});
  run(k, ex, launch, out.data());

  const std::uint64_t gx = 24, gy = 8;
  for (std::uint64_t z = 0; z < 4; ++z)
    for (std::uint64_t y = 0; y < gy; ++y)
      for (std::uint64_t x = 0; x < gx; ++x) {
        // The successor by rank within the block: x+1, wrapping into y+1, then z+1, then the start.
        std::uint64_t bx = x / 8, by = y / 4, bz = z / 2, tx = x % 8, ty = y % 4, tz = z % 2;
        if (++tx == 8) {
          tx = 0;
          if (++ty == 4) {
            ty = 0;
            if (++tz == 2) tz = 0;
          }
        }
        const std::uint64_t next = ((bz * 2 + tz) * gy + by * 4 + ty) * gx + bx * 8 + tx;
        ASSERT_EQ(out[(z * gy + y) * gx + x], next) << x << "," << y << "," << z;
      }
}

TEST_P(KernelsTest, CooperativeDynamicSharedIsTheLaunchRegion) {
  // Threads reverse their block's values through the launch's dynamic shared memory; a t.shared
  // allocation must not overlap it.
  auto k = cooperative("reverse_dynamic", [](ThreadCtx& t, const int* in, int* out) {
    auto* dyn = static_cast<int*>(t.dynamic_shared());
    auto* mark = t.shared<int>(1);
    if (t.idx.x == 0) *mark = -1;
    dyn[t.idx.x] = in[t.global_x()];
    t.sync();
    out[t.global_x()] = dyn[t.block_dim.x - 1 - t.idx.x] + (*mark == -1 ? 0 : 1000000);
  });
  const std::uint32_t block = 64, blocks = 5;
  std::vector<int> in(block * blocks), out(in.size(), 0);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i * 3 + 1);
  run(k, ex, Launch{Dim3(blocks), Dim3(block), block * sizeof(int)}, static_cast<const int*>(in.data()),
      out.data());
  for (std::uint32_t b = 0; b < blocks; ++b)
    for (std::uint32_t t = 0; t < block; ++t)
      ASSERT_EQ(out[b * block + t], in[b * block + block - 1 - t]) << b << "," << t;
}

// Without Launch::shared_bytes there is no dynamic shared memory: null, not the address of the
// first t.shared<T>() array (a write through it changed that array).
TEST_P(KernelsTest, NoDynamicSharedMemoryIsNull) {
  auto coop = cooperative("no_dynamic", [](ThreadCtx& t, int* out) {
    (void)t.shared<int>(4);
    out[t.global_x()] = t.dynamic_shared() == nullptr ? 1 : 2;
  });
  auto block = per_block("no_dynamic_block", [](Block& b, int* out) {
    (void)b.shared<int>(4);
    out[b.index().x] = b.dynamic_shared() == nullptr ? 1 : 2;
  });
  std::vector<int> out(8, 0);
  run(coop, ex, Launch{Dim3(2), Dim3(4), 0}, out.data());
  EXPECT_EQ(out, std::vector<int>(8, 1));
  std::vector<int> per_block_out(2, 0);
  run(block, ex, Launch{Dim3(2), Dim3(4), 0}, per_block_out.data());
  EXPECT_EQ(per_block_out, std::vector<int>(2, 1));
  run(coop, ex, Launch{Dim3(2), Dim3(4), 16}, out.data());
  EXPECT_EQ(out, std::vector<int>(8, 2));
}

TEST_P(KernelsTest, FinishedThreadsCountAsArrived) {
  // Odd threads return at once; even ones keep synchronising and still see each other's writes.
  auto k = cooperative("early_exit", [](ThreadCtx& t, int* out) {
    int* s = t.shared<int>(t.block_dim.x);
    if (t.idx.x % 2 == 1) return;
    for (int round = 0; round < 4; ++round) {
      s[t.idx.x] = round * 1000 + static_cast<int>(t.idx.x);
      t.sync();
      const std::uint32_t other = (t.idx.x + 2) % t.block_dim.x;
      if (s[other] != round * 1000 + static_cast<int>(other)) ++out[t.block.x * t.block_dim.x + t.idx.x];
      t.sync();
    }
  });
  std::vector<int> out(4 * 64, 0);
  run(k, ex, Launch{Dim3(4), Dim3(64), 0}, out.data());
  EXPECT_EQ(out, std::vector<int>(4 * 64, 0));
}

TEST_P(KernelsTest, SyncReturnsOnlyWhenTheWholeBlockArrived) {
  // Each thread counts itself in before every barrier and checks the count after it.
  constexpr int kRounds = 5;
  auto k = cooperative("arrivals", [](ThreadCtx& t, int* errors) {
    int* arrived = t.shared<int>(kRounds);
    const std::uint32_t size = t.block_dim.x * t.block_dim.y * t.block_dim.z;
    if (t.rank() == 0)
      for (int r = 0; r < kRounds; ++r) arrived[r] = 0;
    t.sync();
    for (int r = 0; r < kRounds; ++r) {
      ++arrived[r];
      t.sync();
      if (arrived[r] != static_cast<int>(size)) ++errors[t.block.x];
    }
  });
  std::vector<int> errors(6, 0);
  run(k, ex, Launch{Dim3(6), Dim3(7, 3, 2), 0}, errors.data());
  EXPECT_EQ(errors, std::vector<int>(6, 0));
}

TEST_P(KernelsTest, ExceptionInFiberUnwindsTheBlockAndPropagates) {
  struct Counted {
    std::atomic<int>* live;
    explicit Counted(std::atomic<int>* l) : live(l) { live->fetch_add(1); }
    ~Counted() { live->fetch_sub(1); }
  };
  auto k = cooperative(
      "throws", [](ThreadCtx& t, std::atomic<int>* live, std::uint32_t bad_block, std::uint32_t bad_thread) {
        Counted alive(live);
        t.sync();
        if (t.block.x == bad_block && t.idx.x == bad_thread)
          throw std::runtime_error("thread " + std::to_string(bad_thread) + " gave up");
        t.sync();
        t.sync();
      });
  for (std::uint32_t bad_thread : {0u, 37u, 127u}) {
    std::atomic<int> live{0};
    try {
      run(k, ex, Launch{Dim3(8), Dim3(128), 0}, &live, 5u, bad_thread);
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "thread " + std::to_string(bad_thread) + " gave up");
    }
    EXPECT_EQ(live.load(), 0) << "threads left without unwinding";
  }
  // A thread failing before its first sync(): the later threads of its block never start.
  auto early = cooperative("throws_early", [](ThreadCtx& t, std::atomic<int>* started) {
    started->fetch_add(1);
    if (t.idx.x == 3) throw KernelFailure("early");
    t.sync();
  });
  std::atomic<int> started{0};
  EXPECT_THROW(run(early, ex, Launch{Dim3(1), Dim3(16), 0}, &started), KernelFailure);
  EXPECT_EQ(started.load(), 4);

  const std::uint64_t n = 9'999;
  const auto in = testing::small_ints(n, 16);
  std::vector<float> out((n + 255) / 256);
  run(testing::reduce_cooperative(), ex, cover(n), in.data(), out.data(), n);
  EXPECT_EQ(out, testing::reduce_reference(in, 256));
}

TEST_P(KernelsTest, KernelsCatchingStdExceptionStillUnwind) {
  auto k = cooperative("catches", [](ThreadCtx& t, int* caught) {
    try {
      if (t.idx.x == 1) throw std::logic_error("bad");
      t.sync();
    } catch (const std::exception&) {
      if (t.idx.x != 1) ++*caught;  // the block's abort must not look like a std::exception
      throw;
    }
  });
  int caught = 0;
  EXPECT_THROW(run(k, ex, Launch{Dim3(1), Dim3(8), 0}, &caught), std::logic_error);
  EXPECT_EQ(caught, 0);
}

TEST_P(KernelsTest, CooperativeSharedSizeMismatchIsKernelFailure) {
  auto k = cooperative("mismatch", [](ThreadCtx& t) {
    t.shared<float>(16);
    t.shared<float>(t.idx.x == 5 ? 8 : 32);
  });
  try {
    run(k, ex, Launch{Dim3(2), Dim3(32), 0});
    FAIL() << "no exception";
  } catch (const KernelFailure& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "thread (5, 0, 0)")) << what;
    EXPECT_TRUE(contains(what, "shared allocation #1")) << what;
    EXPECT_TRUE(contains(what, "32 bytes")) << what;
    EXPECT_TRUE(contains(what, "128 bytes")) << what;
  }
}

TEST_P(KernelsTest, CooperativeSharedIsSameForEveryThreadAndRespectsCapacity) {
  auto k = cooperative("shared_capacity", [](ThreadCtx& t, std::uint64_t bytes, std::uintptr_t* where) {
    auto* first = t.shared<char>(bytes / 2);
    auto* second = t.shared<char>(bytes - bytes / 2);
    if (t.rank() == 0) {
      where[2 * t.block.x] = reinterpret_cast<std::uintptr_t>(first);
      where[2 * t.block.x + 1] = reinterpret_cast<std::uintptr_t>(second);
    }
    t.sync();
    if (reinterpret_cast<std::uintptr_t>(first) != where[2 * t.block.x] ||
        reinterpret_cast<std::uintptr_t>(second) != where[2 * t.block.x + 1])
      throw std::logic_error("threads got different shared memory");
    first[t.rank()] = 1;
  });
  std::vector<std::uintptr_t> where(6);
  run(k, ex, Launch{Dim3(3), Dim3(64), 0}, std::uint64_t{kStaticSharedBytes}, where.data());
  EXPECT_EQ(where[1] - where[0], kStaticSharedBytes / 2);
  run(k, ex, Launch{Dim3(3), Dim3(64), 512}, std::uint64_t{kStaticSharedBytes}, where.data());
  EXPECT_THROW(
      run(k, ex, Launch{Dim3(3), Dim3(64), 512}, std::uint64_t{kStaticSharedBytes + 1}, where.data()),
      KernelFailure);
}

// A count whose bytes overflow size_t (2^62 + 2 floats is 8 bytes mod 2^64) is refused, never a
// small array that the next allocation overlaps.
TEST_P(KernelsTest, SharedCountWhoseBytesOverflowIsKernelFailure) {
  const std::size_t huge = SIZE_MAX / sizeof(float) + 2;
  auto coop = cooperative("coop_overflow", [](ThreadCtx& t, std::uint64_t n) { t.shared<float>(n); });
  auto block = per_block("block_overflow", [](Block& b, std::uint64_t n) { b.shared<float>(n); });
  for (const std::uint64_t n : {std::uint64_t{huge}, std::uint64_t{SIZE_MAX}}) {
    for (int kind = 0; kind < 2; ++kind) {
      try {
        if (kind == 0)
          run(coop, ex, Launch{Dim3(1), Dim3(4), 0}, n);
        else
          run(block, ex, Launch{Dim3(1), Dim3(4), 0}, n);
        ADD_FAILURE() << "no overflow reported for " << n << " floats (kind " << kind << ")";
      } catch (const KernelFailure& e) {
        EXPECT_TRUE(contains(e.what(), "an array of shared memory whose size in bytes overflows"))
            << e.what();
      }
    }
  }
}

TEST_P(KernelsTest, ManyLaunchesReuseFiberStacks) {
  const std::uint64_t n = 3'000;
  const auto in = testing::small_ints(n, 17, 0, 3);
  const auto expected = testing::scan_reference(in, 128);
  for (int round = 0; round < 100; ++round) {
    std::vector<float> out(n);
    run(testing::scan_cooperative(), ex, cover(n, 128), in.data(), out.data(), n);
    ASSERT_EQ(out, expected) << "round " << round;
  }
}

TEST_P(KernelsTest, DeepCallsFitInTheFiberStack) {
  // A few KiB of frames per thread, with a barrier at the bottom of the recursion.
  struct Deep {
    static int down(ThreadCtx& t, int depth) {
      volatile char pad[256];
      pad[0] = 1;
      if (depth == 0) t.sync();
      const int below = depth == 0 ? 0 : down(t, depth - 1);
      return below + pad[0];
    }
  };
  auto k = cooperative("deep", [](ThreadCtx& t, int* out) { out[t.rank()] = Deep::down(t, 16); });
  std::vector<int> out(64);
  run(k, ex, Launch{Dim3(1), Dim3(64), 0}, out.data());
  EXPECT_EQ(out, std::vector<int>(64, 17));
}

// CUDA's dimension limits hold on every backend, so a launch that runs on the sim runs on a GPU.
TEST(LaunchLimits, CudasDimensionLimitsHoldEverywhere) {
  hdsm::exec::Executor ex;
  const auto k = per_thread("limits", [](const Thread&) {});
  for (const Launch& l : {Launch{Dim3(1, 65536), Dim3(1), 0}, Launch{Dim3(1, 1, 65536), Dim3(1), 0},
                          Launch{Dim3((1u << 31)), Dim3(1), 0}, Launch{Dim3(1), Dim3(1, 1, 65), 0},
                          Launch{Dim3(1), Dim3(1025), 0}, Launch{Dim3(1), Dim3(1, 2048), 0}}) {
    try {
      run(k, ex, l);
      ADD_FAILURE() << "accepted " << l.grid.x << "x" << l.grid.y << "x" << l.grid.z << " blocks of "
                    << l.block.x << "x" << l.block.y << "x" << l.block.z;
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), "above the limit")) << e.what();
    }
  }
  EXPECT_NO_THROW(run(k, ex, Launch{Dim3(1, 65535, 2), Dim3(1, 1, 64), 0}));
}

// cover(n) gives ceil(n / block) blocks; a count beyond a grid's 32-bit x dimension is an error
// (it was cut to its low 32 bits: cover(2^40 + 1280) launched 5 blocks and returned), as is a block
// of no threads (a division by zero).
TEST(Cover, CoversEveryThreadOrSaysWhyNot) {
  EXPECT_EQ(hdsm::cover(0).grid.x, 1u);
  EXPECT_EQ(hdsm::cover(256).grid.x, 1u);
  EXPECT_EQ(hdsm::cover(257).grid.x, 2u);
  // CUDA's limit of a grid's x dimension, 2^31 - 1 blocks, on every backend.
  EXPECT_EQ(hdsm::cover(std::uint64_t{INT32_MAX} * 256).grid.x, std::uint32_t{INT32_MAX});
  EXPECT_THROW((void)hdsm::cover(std::uint64_t{INT32_MAX} * 256 + 1), hdsm::InvalidArgument);
  EXPECT_THROW((void)hdsm::cover((std::uint64_t{1} << 40) + 1280, 256), hdsm::InvalidArgument);
  EXPECT_THROW((void)hdsm::cover(UINT64_MAX), hdsm::InvalidArgument);
  // (n + block - 1) / block would wrap here: (2^64 - 1) / 2^31 rounds up to 2^33 blocks, too many.
  EXPECT_THROW((void)hdsm::cover(UINT64_MAX, 1u << 31), hdsm::InvalidArgument);
  try {
    (void)hdsm::cover(10, 0);
    ADD_FAILURE() << "a block of 0 threads was accepted";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "cover(10, 0): a block of 0 threads");
  }
}

TEST(FiberStacksTest, MappingFailureIsSystemError) {
  // No address space has room for a 4 EiB stack.
  Executor ex(ExecutorOptions{1, std::size_t{1} << 62});
  auto k = cooperative("huge_stack", [](ThreadCtx& t) { t.sync(); });
  try {
    run(k, ex, Launch{Dim3(1), Dim3(2), 0});
    FAIL() << "no exception";
  } catch (const SystemError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "mmap")) << what;
    EXPECT_TRUE(contains(what, "fiber stacks of worker 0")) << what;
    EXPECT_NE(e.error_number(), 0);
  }
  // Per-thread and per-block kernels need no fiber stacks.
  std::vector<int> out(4, 0);
  auto k2 = per_thread("plain", [](const Thread& t, int* out) { out[t.global_x()] = 1; });
  run(k2, ex, Launch{Dim3(2), Dim3(2), 0}, out.data());
  EXPECT_EQ(out, std::vector<int>(4, 1));
}

INSTANTIATE_TEST_SUITE_P(Workers, KernelsTest, ::testing::Values(1u, 2u, 3u),
                         [](const ::testing::TestParamInfo<unsigned>& info) {
                           return std::to_string(info.param) + "_workers";
                         });

}  // namespace
}  // namespace hdsm::exec
