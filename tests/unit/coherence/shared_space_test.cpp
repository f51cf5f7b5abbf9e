// The shared address space: data correctness of the three protocols through kernel calls, annotated
// uses, fault counts, rolling eviction, free errors and faults outside live objects.
#include "coherence/shared_space.hpp"
#include "runtime/runtime_impl.hpp"
#include "support/death_style.hpp"
#include "support/test_support.hpp"

#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using hdsm::coherence::KernelUse;
using hdsm::coherence::ProtocolKind;
using hdsm::coherence::SharedSpace;
using Uses = std::vector<hdsm::coherence::ObjectUse>;

constexpr std::size_t kSegmentBytes = std::size_t{1} << 30;

struct Param {
  ProtocolKind kind;
  std::size_t block_bytes;
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << hdsm::coherence::to_string(p.kind) << ", " << hdsm::format_bytes(p.block_bytes) << " blocks";
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(hdsm::coherence::to_string(info.param.kind)) + "_" +
         std::to_string(info.param.block_bytes / 1024) + "KiB";
}

hdsm::Config sim_config() {
  auto config = hdsm::Config::defaults();
  config.set("HDSM_DEVICE", "sim")
      .set("HDSM_SIM_MEMORY", "256MiB")
      .set("HDSM_SIM_POISON", "1")
      .set("HDSM_SIM_LINK_GBPS", "0")
      .set("HDSM_SIM_LATENCY_US", "0");
  return config;
}

const hdsm::Kernel& twice_plus_one() {
  static const hdsm::Kernel k =
      hdsm::per_thread("twice_plus_one", [](const hdsm::Thread& t, int* x, std::uint64_t n) {
        const std::uint64_t i = t.global_x();
        if (i < n) x[i] = 2 * x[i] + 1;
      });
  return k;
}

// a[i] = 3 * b[i] + a[i] with the use of `a` chosen by the caller (out: a is overwritten with 3 * b[i]).
const hdsm::Kernel& axpy() {
  static const hdsm::Kernel k =
      hdsm::per_thread("axpy", [](const hdsm::Thread& t, int* a, const int* b, std::uint64_t n, int keep) {
        const std::uint64_t i = t.global_x();
        if (i < n) a[i] = 3 * b[i] + (keep != 0 ? a[i] : 0);
      });
  return k;
}

class SharedSpaceTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    runtime_ = std::make_unique<hdsm::Runtime>(sim_config());
    ASSERT_GE(runtime_->devices().size(), 2u);
    space_ = std::make_unique<SharedSpace>(runtime_->devices(), kind(), block(),
                                           hdsm::detail::impl_of(*runtime_).counters,
                                           hdsm::coherence::SpaceTuning{.segment_bytes = kSegmentBytes});
  }
  void TearDown() override {
    space_.reset();
    runtime_.reset();
  }

  ProtocolKind kind() const { return GetParam().kind; }
  std::size_t block() const { return GetParam().block_bytes; }
  int* alloc_ints(std::size_t n, unsigned device = 0) {
    return static_cast<int*>(space_->alloc(n * sizeof(int), device));
  }
  // release, twice_plus_one over x[0, n), acquire; every object of the device is used as unknown.
  void run_twice_plus_one(int* x, std::size_t n, unsigned device = 0, const Uses& uses = {}) {
    const hdsm::KernelArg args[] = {space_->argument(x), hdsm::KernelArg::value(std::uint64_t{n})};
    space_->release(device, uses);
    space_->launch(device, twice_plus_one(), hdsm::cover(n), args);
    space_->acquire(device, uses);
  }
  hdsm::Stats stats() const { return runtime_->stats(); }

  std::unique_ptr<hdsm::Runtime> runtime_;
  std::unique_ptr<SharedSpace> space_;
};

TEST_P(SharedSpaceTest, CpuInitKernelCpuRead) {
  const std::size_t n = (3 * block() + 100) / sizeof(int);  // a partial last block
  int* x = alloc_ints(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<int>(i);
  run_twice_plus_one(x, n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], 2 * static_cast<int>(i) + 1) << "element " << i;
  space_->free(x);
}

TEST_P(SharedSpaceTest, IterativeCallsWithPartialCpuUpdates) {
  const std::size_t n = 4 * block() / sizeof(int) + 17;
  int* x = alloc_ints(n);
  std::vector<int> reference(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = reference[i] = static_cast<int>(i % 1000);
  const std::size_t stride = block() / sizeof(int) + 3;
  for (int round = 0; round < 5; ++round) {
    run_twice_plus_one(x, n);
    for (int& v : reference) v = 2 * v + 1;
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(x[i], reference[i]) << "round " << round << " element " << i;
    for (std::size_t i = static_cast<std::size_t>(round); i < n; i += stride)
      x[i] = reference[i] = round * 7 - static_cast<int>(i % 13);
  }
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], reference[i]) << "element " << i;
  space_->free(x);
}

TEST_P(SharedSpaceTest, SeveralObjectsOnTwoDevices) {
  const std::size_t n = 2 * block() / sizeof(int) + 5;
  int* a = alloc_ints(n, 0);
  int* b = alloc_ints(n, 0);
  int* c = alloc_ints(n, 1);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<int>(i);
    b[i] = static_cast<int>(i % 7);
    c[i] = -static_cast<int>(i);
  }
  const hdsm::KernelArg args[] = {space_->argument(a), space_->argument(b),
                                  hdsm::KernelArg::value(std::uint64_t{n}), hdsm::KernelArg::value(1)};
  space_->release(0, {});
  space_->launch(0, axpy(), hdsm::cover(n), args);
  space_->acquire(0, {});
  run_twice_plus_one(c, n, 1);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(a[i], 3 * static_cast<int>(i % 7) + static_cast<int>(i)) << "a " << i;
    ASSERT_EQ(b[i], static_cast<int>(i % 7)) << "b " << i;
    ASSERT_EQ(c[i], -2 * static_cast<int>(i) + 1) << "c " << i;
  }
  // An object is only used by the kernels of its device.
  const Uses wrong = {{c, KernelUse::inout}};
  EXPECT_THROW(space_->release(0, wrong), hdsm::InvalidArgument);
  space_->free(a);
  space_->free(b);
  space_->free(c);
}

TEST_P(SharedSpaceTest, AnnotatedUsesMoveOnlyWhatTheyName) {
  const std::size_t n = 3 * block() / sizeof(int) + 9;
  int* a = alloc_ints(n);
  int* b = alloc_ints(n);
  int* untouched = alloc_ints(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = 1000;  // overwritten by the kernel: `out` uploads nothing and reads nothing back wrongly
    b[i] = static_cast<int>(i);
    untouched[i] = 5;
  }
  const Uses uses = {{a, KernelUse::out}, {b, KernelUse::in}};
  const hdsm::KernelArg args[] = {space_->argument(a), space_->argument(b),
                                  hdsm::KernelArg::value(std::uint64_t{n}), hdsm::KernelArg::value(0)};
  space_->release(0, uses);
  space_->launch(0, axpy(), hdsm::cover(n), args);
  space_->acquire(0, uses);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(a[i], 3 * static_cast<int>(i)) << "a " << i;
  const auto faults = [&] { return stats().read_faults + stats().write_faults; };
  const std::uint64_t before = faults();
  long long sum_b = 0, sum_untouched = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sum_b += b[i];
    sum_untouched += untouched[i];
  }
  EXPECT_EQ(sum_b, static_cast<long long>(n) * (static_cast<long long>(n) - 1) / 2);
  EXPECT_EQ(sum_untouched, 5 * static_cast<long long>(n));
  // `in` and unnamed objects keep their host copies valid: reading them does not fault.
  EXPECT_EQ(faults(), before);
  // The unnamed object was not uploaded either: its next unannotated call still sees the CPU's data.
  untouched[1] = 40;
  run_twice_plus_one(untouched, n);
  EXPECT_EQ(untouched[0], 11);
  EXPECT_EQ(untouched[1], 81);
  EXPECT_EQ(untouched[n - 1], 11);
  space_->free(a);
  space_->free(b);
  space_->free(untouched);
}

class SharedSpaceLazyTest : public SharedSpaceTest {};
class SharedSpaceRollingTest : public SharedSpaceTest {};

TEST_P(SharedSpaceLazyTest, FetchesTheWholeObjectOnOneFault) {
  const std::size_t n = 4 * block() / sizeof(int);
  int* x = alloc_ints(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = 1;
  run_twice_plus_one(x, n);
  const hdsm::Stats before = stats();
  // From the middle block on: a fetch of only the blocks from the fault on would fault again at 0.
  EXPECT_EQ(x[n / 2], 3);
  EXPECT_EQ(x[0], 3);
  EXPECT_EQ(x[n - 1], 3);
  const hdsm::Stats after = stats();
  EXPECT_EQ(after.read_faults, before.read_faults + 1);
  EXPECT_EQ(after.write_faults, before.write_faults);
  EXPECT_EQ(after.route(hdsm::Route::d2h).bytes - before.route(hdsm::Route::d2h).bytes, n * sizeof(int));
  space_->free(x);
}

TEST_P(SharedSpaceRollingTest, FetchesOneBlockOnAFault) {
  const std::size_t n = 16 * block() / sizeof(int);
  int* x = alloc_ints(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = 1;
  run_twice_plus_one(x, n);
  const hdsm::Stats before = stats();
  const std::size_t i = 5 * block() / sizeof(int) + 3;
  EXPECT_EQ(x[i], 3);
  EXPECT_EQ(x[i + 1], 3);
  const hdsm::Stats after = stats();
  EXPECT_EQ(after.read_faults, before.read_faults + 1);
  EXPECT_EQ(after.route(hdsm::Route::d2h).bytes - before.route(hdsm::Route::d2h).bytes, block());
  space_->free(x);
}

// Read-ahead (HDSM_READ_AHEAD): reading an invalidated object forward doubles the fetched run with
// each fault that continues the last one's, up to the limit, and a run stops before any block the host
// holds, so the CPU's write in between survives. A fault elsewhere fetches its block alone.
TEST_P(SharedSpaceRollingTest, ReadAheadDoublesForwardRunsAndSkipsHeldBlocks) {
  space_ = std::make_unique<SharedSpace>(
      runtime_->devices(), kind(), block(), hdsm::detail::impl_of(*runtime_).counters,
      hdsm::coherence::SpaceTuning{.segment_bytes = kSegmentBytes, .read_ahead = 4});
  const std::size_t per_block = block() / sizeof(int), blocks = 14;
  int* x = alloc_ints(blocks * per_block);
  for (std::size_t i = 0; i < blocks * per_block; ++i) x[i] = 1;
  run_twice_plus_one(x, blocks * per_block);  // every block invalid on the host, 3 on the device
  const auto d2h = [&] { return stats().route(hdsm::Route::d2h).bytes; };
  const hdsm::Stats before = stats();
  const std::uint64_t start = d2h();
  x[5 * per_block + 1] = 77;  // a write fault fetches block 5 alone and makes it dirty
  EXPECT_EQ(d2h() - start, block());
  // Forward read faults: 0 | 1 2 | 3 4 (stops at the dirty 5) | 6 (a new run) | 7 8 | 9 10 11 12 | 13.
  for (std::size_t i = 0; i < blocks * per_block; ++i)
    ASSERT_EQ(x[i], i == 5 * per_block + 1 ? 77 : 3) << "element " << i;
  const hdsm::Stats after = stats();
  EXPECT_EQ(after.read_faults - before.read_faults, 7u);
  EXPECT_EQ(d2h() - start, blocks * block()) << "every block fetched once";

  // Not forward: block 9, then block 2, fetch one block each.
  run_twice_plus_one(x, blocks * per_block);
  const std::uint64_t again = d2h();
  EXPECT_EQ(x[9 * per_block], 7);
  EXPECT_EQ(x[2 * per_block + 5], 7);
  EXPECT_EQ(d2h() - again, 2 * block());
  space_->free(x);
}

// The fault handler records a write fault's new state and window place before its mprotect and
// undoes them when the protection map refuses; here it refuses once the object's runs pass the
// budget, and the fault service then degrades the map and takes the block in. A record left behind
// puts the block in the window twice (the service throws) or loses its upload.
TEST_P(SharedSpaceRollingTest, WriteFaultsPastTheRunBudgetAreUndoneAndServedWhole) {
  if (block() != 4096) GTEST_SKIP() << "needs 2 x the run budget of 4 KiB blocks in the sim's memory";
  space_ = std::make_unique<SharedSpace>(
      runtime_->devices(), kind(), block(), hdsm::detail::impl_of(*runtime_).counters,
      hdsm::coherence::SpaceTuning{.segment_bytes = kSegmentBytes, .rolling_step = 8192});
  const std::size_t per_block = block() / sizeof(int);
  const std::size_t written = SharedSpace::kRunBudget / 2 + 64;  // every other block: 2 runs each
  const std::size_t blocks = 2 * written + 1;
  int* x = alloc_ints(blocks * per_block);
  const hdsm::Stats before = stats();
  for (std::size_t w = 0; w < written; ++w) x[2 * w * per_block] = static_cast<int>(w) + 1;
  EXPECT_EQ(stats().write_faults - before.write_faults, written);
  run_twice_plus_one(x, blocks * per_block);
  for (std::size_t b = 0; b < blocks; ++b)
    ASSERT_EQ(x[b * per_block], b % 2 == 0 && b / 2 < written ? 2 * static_cast<int>(b / 2 + 1) + 1 : 1)
        << "block " << b;
  space_->free(x);
}

TEST_P(SharedSpaceRollingTest, EvictionUploadsBeforeTheRelease) {
  const std::size_t per_block = block() / sizeof(int);
  const std::size_t blocks = 8;
  int* x = alloc_ints(blocks * per_block);
  const std::size_t window = space_->rolling_capacity();
  ASSERT_LT(window, blocks);
  const auto h2d = [&] { return stats().route(hdsm::Route::h2d).bytes; };
  const std::uint64_t start = h2d();
  for (std::size_t b = 0; b < window; ++b) x[b * per_block] = static_cast<int>(b);
  EXPECT_EQ(h2d(), start) << "no block leaves a window that is not full";
  for (std::size_t b = window; b < blocks; ++b) x[b * per_block] = static_cast<int>(b);
  // The evictions are asynchronous: wait for them (bounded), still before any release.
  const std::uint64_t expected = start + (blocks - window) * block();
  for (int i = 0; i < 500 && h2d() < expected; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(h2d(), expected);
  run_twice_plus_one(x, blocks * per_block);
  for (std::size_t b = 0; b < blocks; ++b) {
    ASSERT_EQ(x[b * per_block], 2 * static_cast<int>(b) + 1) << "block " << b;
    ASSERT_EQ(x[b * per_block + 1], 1) << "block " << b;
  }
  space_->free(x);
}

// The rolling size follows the live objects: allocating and freeing in a loop left it growing by
// HDSM_ROLLING_STEP per allocation for good, until no block was evicted early any more.
TEST_P(SharedSpaceRollingTest, TheRollingSizeFollowsTheLiveObjects) {
  const std::size_t none = space_->rolling_capacity();
  const std::size_t per_block = block() / sizeof(int);
  int* x = alloc_ints(8 * per_block);
  const std::size_t one = space_->rolling_capacity();
  ASSERT_EQ(one, none + 2);  // the default step, and at least 2
  for (int round = 0; round < 50; ++round) space_->free(alloc_ints(16));
  EXPECT_EQ(space_->rolling_capacity(), one);
  int* y = alloc_ints(16);
  ASSERT_EQ(space_->rolling_capacity(), one + 2);
  // Four dirty blocks fill the window of two objects; with y freed, each further block evicts one.
  const auto h2d = [&] { return stats().route(hdsm::Route::h2d).bytes; };
  const std::uint64_t start = h2d();
  for (std::size_t b = 0; b < 4; ++b) x[b * per_block] = static_cast<int>(b);
  space_->free(y);
  EXPECT_EQ(space_->rolling_capacity(), one);
  EXPECT_EQ(h2d(), start);
  for (std::size_t b = 4; b < 8; ++b) x[b * per_block] = static_cast<int>(b);
  const std::uint64_t expected = start + 4 * block();
  for (int i = 0; i < 500 && h2d() < expected; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(h2d(), expected);
  run_twice_plus_one(x, 8 * per_block);
  for (std::size_t b = 0; b < 8; ++b)
    ASSERT_EQ(x[b * per_block], 2 * static_cast<int>(b) + 1) << "block " << b;
  space_->free(x);
  EXPECT_EQ(space_->rolling_capacity(), none);
}

TEST_P(SharedSpaceTest, ConcurrentFaultsFromSeveralThreads) {
  constexpr int kThreads = 4;
  const std::size_t n = 3 * block() / sizeof(int) + 1;
  std::vector<int*> objects;
  for (int t = 0; t < kThreads; ++t) objects.push_back(alloc_ints(n, static_cast<unsigned>(t % 2)));
  const auto fill = [&](int round) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        for (std::size_t i = 0; i < n; ++i) objects[t][i] += static_cast<int>(i) + t + round;
      });
    for (auto& thread : threads) thread.join();
  };
  std::vector<int> reference(n * kThreads, 0);
  for (int round = 0; round < 3; ++round) {
    fill(round);
    for (int t = 0; t < kThreads; ++t)
      for (std::size_t i = 0; i < n; ++i) {
        int& r = reference[t * n + i];
        r = 2 * (r + static_cast<int>(i) + t + round) + 1;
      }
    for (int t = 0; t < kThreads; ++t) {
      const hdsm::KernelArg args[] = {space_->argument(objects[t]), hdsm::KernelArg::value(std::uint64_t{n})};
      space_->release(t % 2, {});
      space_->launch(t % 2, twice_plus_one(), hdsm::cover(n), args);
    }
    space_->acquire(0, {});
    space_->acquire(1, {});
    // The first kernel of a device released every object of it; later releases saw them invalid.
    for (int t = 0; t < kThreads; ++t)
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(objects[t][i], reference[t * n + i]) << t << " " << i;
  }
  for (int* p : objects) space_->free(p);
}

TEST_P(SharedSpaceTest, FailedAllocationsLeaveNothingBehind) {
  int* keep = alloc_ints(16);
  const std::size_t used = runtime_->device(0).memory_used();
  EXPECT_THROW(space_->alloc(0, 0), hdsm::InvalidArgument);
  EXPECT_THROW(space_->alloc(16, 2), hdsm::InvalidArgument);
  // Fits the arena segment, not the device (256 MiB): the directory entry must be given back.
  EXPECT_THROW(space_->alloc(std::size_t{512} << 20, 0), hdsm::OutOfDeviceMemory);
  EXPECT_THROW(space_->alloc(kSegmentBytes + 1, 0), hdsm::OutOfDeviceMemory);
  EXPECT_EQ(space_->directory().size(), 1u);
  EXPECT_EQ(runtime_->device(0).memory_used(), used);
  // The range the failed allocation held is free again: nearly all of the device fits.
  void* big = space_->alloc(std::size_t{200} << 20, 0);
  space_->free(big);
  space_->free(keep);
  EXPECT_EQ(space_->directory().size(), 0u);
}

TEST_P(SharedSpaceTest, FreeErrorsAndReuse) {
  const std::size_t n = 2 * block() / sizeof(int);
  int* x = alloc_ints(n);
  try {
    space_->free(x + 1);
    FAIL() << "freeing an interior pointer succeeded";
  } catch (const hdsm::InvalidPointer& e) {
    EXPECT_NE(std::string(e.what()).find("inside"), std::string::npos) << e.what();
  }
  const std::size_t used = runtime_->device(0).memory_used();
  space_->free(x);
  EXPECT_LT(runtime_->device(0).memory_used(), used);
  EXPECT_THROW(space_->free(x), hdsm::InvalidPointer);
  int on_stack = 0;
  EXPECT_THROW(space_->free(&on_stack), hdsm::InvalidPointer);
  EXPECT_THROW((void)space_->argument(&on_stack), hdsm::InvalidArgument);
  EXPECT_THROW((void)space_->argument(x), hdsm::InvalidArgument);

  int* y = alloc_ints(n);
  EXPECT_EQ(y[n - 1], 0);
  for (std::size_t i = 0; i < n; ++i) y[i] = 4;
  run_twice_plus_one(y, n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], 9) << i;
  space_->free(y);
}

INSTANTIATE_TEST_SUITE_P(SharedSpace, SharedSpaceTest,
                         ::testing::Values(Param{ProtocolKind::batch, 4096},
                                           Param{ProtocolKind::batch, 65536}, Param{ProtocolKind::lazy, 4096},
                                           Param{ProtocolKind::lazy, 65536},
                                           Param{ProtocolKind::rolling, 4096},
                                           Param{ProtocolKind::rolling, 65536}),
                         param_name);
INSTANTIATE_TEST_SUITE_P(SharedSpace, SharedSpaceLazyTest,
                         ::testing::Values(Param{ProtocolKind::lazy, 4096}, Param{ProtocolKind::lazy, 65536}),
                         param_name);
INSTANTIATE_TEST_SUITE_P(SharedSpace, SharedSpaceRollingTest,
                         ::testing::Values(Param{ProtocolKind::rolling, 4096},
                                           Param{ProtocolKind::rolling, 65536}),
                         param_name);

using hdsm::test::default_disposition_under_sanitizers;

class SharedSpaceDeathTest : public ::testing::TestWithParam<Param> {
 protected:
  hdsm::test::DeathTestStyle style_{"threadsafe"};
};

[[gnu::noinline]] int read_int(const volatile int* p) { return *p; }

TEST_P(SharedSpaceDeathTest, TouchingFreedMemoryKillsWithSegv) {
  EXPECT_EXIT(
      {
        default_disposition_under_sanitizers();
        hdsm::Runtime runtime(sim_config());
        SharedSpace space(runtime.devices(), GetParam().kind, GetParam().block_bytes,
                          hdsm::detail::impl_of(runtime).counters,
                          hdsm::coherence::SpaceTuning{.segment_bytes = kSegmentBytes});
        auto* x = static_cast<int*>(space.alloc(GetParam().block_bytes, 0));
        x[0] = 1;  // live objects resolve
        space.free(x);
        read_int(x);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV),
      "invalid (read|unknown) access: 0x[0-9a-f]+ is inside freed object #1");
}

TEST_P(SharedSpaceDeathTest, ForeignAddressesKillWithSegv) {
  EXPECT_EXIT(
      {
        default_disposition_under_sanitizers();
        hdsm::Runtime runtime(sim_config());
        SharedSpace space(runtime.devices(), GetParam().kind, GetParam().block_bytes,
                          hdsm::detail::impl_of(runtime).counters,
                          hdsm::coherence::SpaceTuning{.segment_bytes = kSegmentBytes});
        auto* x = static_cast<int*>(space.alloc(GetParam().block_bytes, 0));
        x[0] = 1;
        // Inside the arena, past every object.
        read_int(x + 4 * GetParam().block_bytes / sizeof(int));
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "outside any shared object");
  EXPECT_EXIT(
      {
        default_disposition_under_sanitizers();
        hdsm::Runtime runtime(sim_config());
        SharedSpace space(runtime.devices(), GetParam().kind, GetParam().block_bytes,
                          hdsm::detail::impl_of(runtime).counters,
                          hdsm::coherence::SpaceTuning{.segment_bytes = kSegmentBytes});
        void* page = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        read_int(static_cast<const int*>(page));
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "not in shared memory");
}

INSTANTIATE_TEST_SUITE_P(SharedSpace, SharedSpaceDeathTest,
                         ::testing::Values(Param{ProtocolKind::batch, 4096}, Param{ProtocolKind::lazy, 65536},
                                           Param{ProtocolKind::rolling, 4096}),
                         param_name);

}  // namespace
