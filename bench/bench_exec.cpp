// Micro-costs of the CPU grid executor: a barrier-free kernel against a hand-written OpenMP loop,
// a tiled matmul as fibers (cooperative), as phases (per_block) and as a hand-blocked OpenMP loop,
// and the cost of one cooperative barrier per thread.
#include "exec/executor.hpp"
#include "os/cpu_binding.hpp"

#include <hdsm/kernel.hpp>

#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

using hdsm::Block;
using hdsm::Dim3;
using hdsm::HostArgs;
using hdsm::Launch;
using hdsm::Thread;
using hdsm::ThreadCtx;
using hdsm::exec::Executor;
using hdsm::exec::ExecutorOptions;

constexpr int kTile = 16;

unsigned threads() { return hdsm::os::usable_cpus(); }

Executor& executor() {
  static Executor ex(ExecutorOptions{threads()});
  return ex;
}

template <class... A>
void launch(const hdsm::Kernel& k, Executor& ex, const Launch& l, const A&... args) {
  k.host(ex, l, HostArgs<A...>(args...).pack());
}

std::vector<float> filled(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 17) * scale;
  return v;
}

// ---- vector add, 8M floats ----

constexpr std::uint64_t kVectorN = std::uint64_t{8} << 20;

struct VectorData {
  std::vector<float> a = filled(kVectorN, 0.5f), b = filled(kVectorN, 0.25f),
                     c = std::vector<float>(kVectorN);
};

VectorData& vectors() {
  static VectorData d;
  return d;
}

void set_vector_counters(benchmark::State& state) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kVectorN * 3 * sizeof(float)));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kVectorN));
}

bool vector_ok(const VectorData& d) {
  for (std::uint64_t i = 0; i < kVectorN; i += 4099)
    if (d.c[i] != d.a[i] + d.b[i]) return false;
  return true;
}

void BM_VectorAddExecutor(benchmark::State& state) {
  auto& d = vectors();
  const auto add = hdsm::per_thread(
      "vector_add", [](const Thread& t, const float* a, const float* b, float* c, std::uint64_t n) {
        const std::uint64_t i = t.global_x();
        if (i < n) c[i] = a[i] + b[i];
      });
  std::fill(d.c.begin(), d.c.end(), 0.0f);
  for (auto _ : state) {
    launch(add, executor(), hdsm::cover(kVectorN, 256), d.a.data(), d.b.data(), d.c.data(), kVectorN);
    benchmark::DoNotOptimize(d.c.data());
    benchmark::ClobberMemory();
  }
  if (!vector_ok(d)) state.SkipWithError("wrong result");
  set_vector_counters(state);
}
BENCHMARK(BM_VectorAddExecutor)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_VectorAddOpenMP(benchmark::State& state) {
  auto& d = vectors();
  const float* a = d.a.data();
  const float* b = d.b.data();
  float* c = d.c.data();
  const auto n = static_cast<std::int64_t>(kVectorN);
  const int t = static_cast<int>(threads());
  std::fill(d.c.begin(), d.c.end(), 0.0f);
  for (auto _ : state) {
#pragma omp parallel for num_threads(t) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
    benchmark::DoNotOptimize(c);
    benchmark::ClobberMemory();
  }
  if (!vector_ok(d)) state.SkipWithError("wrong result");
  set_vector_counters(state);
}
BENCHMARK(BM_VectorAddOpenMP)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---- tiled matmul 512x512 ----

constexpr int kMatN = 512;

struct MatrixData {
  std::vector<float> a = filled(std::size_t{kMatN} * kMatN, 0.125f),
                     b = filled(std::size_t{kMatN} * kMatN, 0.5f);
  std::vector<float> c = std::vector<float>(std::size_t{kMatN} * kMatN);
  std::vector<float> reference = std::vector<float>(std::size_t{kMatN} * kMatN);
  MatrixData() {
    for (int i = 0; i < kMatN; ++i)
      for (int k = 0; k < kMatN; ++k)
        for (int j = 0; j < kMatN; ++j) reference[i * kMatN + j] += a[i * kMatN + k] * b[k * kMatN + j];
  }
};

MatrixData& matrices() {
  static MatrixData d;
  return d;
}

bool matrix_ok(const MatrixData& d) {
  for (std::size_t i = 0; i < d.c.size(); ++i) {
    const float want = d.reference[i];
    if (std::abs(d.c[i] - want) > 1e-3f * std::max(1.0f, std::abs(want))) return false;
  }
  return true;
}

void set_matmul_counters(benchmark::State& state) {
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * kMatN * kMatN * kMatN * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

const Launch kMatLaunch{Dim3(kMatN / kTile, kMatN / kTile), Dim3(kTile, kTile), 0};

void BM_MatmulCooperative(benchmark::State& state) {
  auto& d = matrices();
  const auto k =
      hdsm::cooperative("matmul_coop", [](ThreadCtx& t, const float* a, const float* b, float* c, int n) {
        float* as = t.shared<float>(std::size_t{kTile} * kTile);
        float* bs = t.shared<float>(std::size_t{kTile} * kTile);
        const int tx = static_cast<int>(t.idx.x), ty = static_cast<int>(t.idx.y);
        const int row = static_cast<int>(t.global_y()), col = static_cast<int>(t.global_x());
        float acc = 0.0f;
        for (int k0 = 0; k0 < n; k0 += kTile) {
          as[ty * kTile + tx] = a[row * n + k0 + tx];
          bs[ty * kTile + tx] = b[(k0 + ty) * n + col];
          t.sync();
          for (int kk = 0; kk < kTile; ++kk) acc += as[ty * kTile + kk] * bs[kk * kTile + tx];
          t.sync();
        }
        c[row * n + col] = acc;
      });
  std::fill(d.c.begin(), d.c.end(), 0.0f);
  for (auto _ : state) {
    launch(k, executor(), kMatLaunch, d.a.data(), d.b.data(), d.c.data(), kMatN);
    benchmark::DoNotOptimize(d.c.data());
    benchmark::ClobberMemory();
  }
  if (!matrix_ok(d)) state.SkipWithError("wrong result");
  set_matmul_counters(state);
}
BENCHMARK(BM_MatmulCooperative)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MatmulPerBlock(benchmark::State& state) {
  auto& d = matrices();
  const auto k =
      hdsm::per_block("matmul_phases", [](Block& blk, const float* a, const float* b, float* c, int n) {
        float* as = blk.shared<float>(std::size_t{kTile} * kTile);
        float* bs = blk.shared<float>(std::size_t{kTile} * kTile);
        auto acc = blk.local<float>();
        for (int k0 = 0; k0 < n; k0 += kTile) {
          blk.threads([&](const Thread& t) {
            const int tx = static_cast<int>(t.idx.x), ty = static_cast<int>(t.idx.y);
            as[ty * kTile + tx] = a[static_cast<int>(t.global_y()) * n + k0 + tx];
            bs[ty * kTile + tx] = b[(k0 + ty) * n + static_cast<int>(t.global_x())];
          });
          blk.threads([&](const Thread& t) {
            const int tx = static_cast<int>(t.idx.x), ty = static_cast<int>(t.idx.y);
            float sum = acc[t.rank()];
            for (int kk = 0; kk < kTile; ++kk) sum += as[ty * kTile + kk] * bs[kk * kTile + tx];
            acc[t.rank()] = sum;
          });
        }
        blk.threads([&](const Thread& t) {
          c[static_cast<int>(t.global_y()) * n + static_cast<int>(t.global_x())] = acc[t.rank()];
        });
      });
  std::fill(d.c.begin(), d.c.end(), 0.0f);
  for (auto _ : state) {
    launch(k, executor(), kMatLaunch, d.a.data(), d.b.data(), d.c.data(), kMatN);
    benchmark::DoNotOptimize(d.c.data());
    benchmark::ClobberMemory();
  }
  if (!matrix_ok(d)) state.SkipWithError("wrong result");
  set_matmul_counters(state);
}
BENCHMARK(BM_MatmulPerBlock)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MatmulOpenMPBlocked(benchmark::State& state) {
  constexpr int kBlock = 64;
  auto& d = matrices();
  const float* a = d.a.data();
  const float* b = d.b.data();
  float* c = d.c.data();
  const int t = static_cast<int>(threads());
  std::fill(d.c.begin(), d.c.end(), 0.0f);
  for (auto _ : state) {
#pragma omp parallel for collapse(2) num_threads(t) schedule(static)
    for (int ib = 0; ib < kMatN; ib += kBlock)
      for (int jb = 0; jb < kMatN; jb += kBlock) {
        float acc[kBlock][kBlock] = {};
        for (int kb = 0; kb < kMatN; kb += kBlock)
          for (int i = 0; i < kBlock; ++i)
            for (int k = kb; k < kb + kBlock; ++k) {
              const float aik = a[(ib + i) * kMatN + k];
              for (int j = 0; j < kBlock; ++j) acc[i][j] += aik * b[k * kMatN + jb + j];
            }
        for (int i = 0; i < kBlock; ++i)
          for (int j = 0; j < kBlock; ++j) c[(ib + i) * kMatN + jb + j] = acc[i][j];
      }
    benchmark::DoNotOptimize(c);
    benchmark::ClobberMemory();
  }
  if (!matrix_ok(d)) state.SkipWithError("wrong result");
  set_matmul_counters(state);
}
BENCHMARK(BM_MatmulOpenMPBlocked)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---- barrier cost: one block of N threads doing kRounds syncs, on one worker ----

void BM_CooperativeBarrier(benchmark::State& state) {
  constexpr int kRounds = 64;
  static Executor single(ExecutorOptions{1});
  const auto block = static_cast<std::uint32_t>(state.range(0));
  const auto k = hdsm::cooperative("barrier", [](ThreadCtx& t, int rounds, std::uint64_t* sink) {
    std::uint64_t x = t.rank();
    for (int r = 0; r < rounds; ++r) {
      x = x * 6364136223846793005u + 1;
      t.sync();
    }
    if (x == 42) ++*sink;  // keeps the loop from being optimised away
  });
  std::uint64_t sink = 0;
  const Launch l{Dim3(1), Dim3(block), 0};
  for (auto _ : state) {
    launch(k, single, l, kRounds, &sink);
    benchmark::DoNotOptimize(sink);
  }
  // Time per thread per barrier round (a sync is one switch to the scheduler and one back).
  state.counters["per_thread_sync"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * block * kRounds,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_CooperativeBarrier)
    ->Arg(4)
    ->Arg(32)
    ->Arg(256)
    ->Arg(1024)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Launch overhead: an empty cooperative block of N threads without any sync (fiber start + end).
void BM_CooperativeBlockNoSync(benchmark::State& state) {
  static Executor single(ExecutorOptions{1});
  const auto block = static_cast<std::uint32_t>(state.range(0));
  const auto k = hdsm::cooperative("empty", [](ThreadCtx& t, std::uint64_t* sink) {
    if (t.rank() == 100000) ++*sink;
  });
  std::uint64_t sink = 0;
  const Launch l{Dim3(1), Dim3(block), 0};
  for (auto _ : state) {
    launch(k, single, l, &sink);
    benchmark::DoNotOptimize(sink);
  }
  state.counters["per_thread"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * block,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_CooperativeBlockNoSync)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
