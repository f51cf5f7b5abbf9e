// One rank's launch against the executor's, for an empty kernel: the cluster's fixed cost per
// kernel (the rank's interval of blocks, the boundary's counter), which short kernels pay in full:
// scan launches 3000 a run. Both on 2 threads; the rank is one in-process rank (no MPI), as a
// one-rank job runs: every page writable, no fault, no message.
// Also the encoding of a written page at a kernel boundary (DiffRuns, and the whole record:
// RecordEncode, RecordApply) beside a copy of the page, and an allocation and its free
// (ClusterAllocFree).
#include <hdsm/kernel.hpp>

#include "exec/executor.hpp"

#if defined(HDSM_BENCH_CLUSTER)
#include "cluster/node.hpp"
#include "cluster/records.hpp"
#include "cluster/threads_transport.hpp"

#include <hdsm/cluster.hpp>
#endif

#include "coherence/page_diff.hpp"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

const auto kNoop = hdsm::per_thread("noop", [](const hdsm::Thread&, std::uint32_t) {});

hdsm::Launch shape(const benchmark::State& state) {
  return hdsm::Launch{hdsm::Dim3{static_cast<unsigned>(state.range(0))}, hdsm::Dim3{1}, 0};
}

void ExecutorLaunch(benchmark::State& state) {
  hdsm::exec::Executor executor(hdsm::exec::ExecutorOptions{2});
  const hdsm::HostArgs<std::uint32_t> args(0);
  const hdsm::Launch launch = shape(state);
  for (auto _ : state) kNoop.host(executor, launch, args.pack());
}
BENCHMARK(ExecutorLaunch)->Arg(1)->Arg(64);

#if defined(HDSM_BENCH_CLUSTER)
namespace cl = hdsm::cluster;

// One in-process rank, bound to the calling thread while it lives.
struct OneRank {
  OneRank(std::size_t space_bytes, unsigned threads) : node(hub.endpoint(0), options(space_bytes, threads)) {
    cl::detail::bind_thread(&node);
  }
  ~OneRank() { cl::detail::bind_thread(nullptr); }
  OneRank(const OneRank&) = delete;
  OneRank& operator=(const OneRank&) = delete;
  static cl::Options options(std::size_t space_bytes, unsigned threads) {
    cl::Options o;
    o.space_bytes = space_bytes;
    o.threads = threads;
    return o;
  }
  cl::detail::ThreadsHub hub{1};
  cl::detail::Node node;
};

void ClusterLaunchOneRank(benchmark::State& state) {
  const OneRank rank(std::size_t{64} << 20, 2);
  const hdsm::HostArgs<std::uint32_t> args(0);
  const hdsm::Launch launch = shape(state);
  const hdsm::Kernel& untyped = kNoop;  // the untyped launch, as GridTarget makes it
  for (auto _ : state) cl::launch(untyped, launch, args.pack());
}
BENCHMARK(ClusterLaunchOneRank)->Arg(1)->Arg(64);

// A collective allocation of `pages` pages and its free, on one rank: the address-space work
// (protection changes, the arena keeping or zeroing the memory) that a program allocating per
// phase pays.
void ClusterAllocFree(benchmark::State& state) {
  const OneRank rank(std::size_t{256} << 20, 1);
  const auto bytes = static_cast<std::size_t>(state.range(0)) * 4096;
  for (auto _ : state) {
    char* p = cl::alloc<char>(bytes);
    benchmark::DoNotOptimize(p);
    cl::free(p);
  }
}
BENCHMARK(ClusterAllocFree)->ArgName("pages")->Arg(1)->Arg(256);
#endif

}  // namespace

// A kernel boundary encodes each written page as runs of changed bytes against its twin, at the
// join gap of single-writer pages (8). Three 4 KiB pages: an array of floats that each grew a little
// (cp's energy grid: three bytes of four change), a page rewritten with new values, and a page with
// one changed word in 64 bytes; beside them a copy of the page, the cost of sending it whole.
std::vector<float> page_of_floats(int pattern, bool after) {
  std::vector<float> f(1024);
  for (std::size_t i = 0; i < f.size(); ++i) {
    f[i] = 1.0F + static_cast<float>(i % 97) * 0.37F;
    if (!after) continue;
    if (pattern == 0) f[i] += 0.001F * static_cast<float>(1 + i % 13);
    if (pattern == 1) f[i] = -f[i] * 3.0F;
    if (pattern == 2 && i % 16 == 0) f[i] += 1.0F;
  }
  return f;
}

void DiffRuns(benchmark::State& state) {
  const std::vector<float> before = page_of_floats(static_cast<int>(state.range(0)), false),
                           now = page_of_floats(static_cast<int>(state.range(0)), true);
  const std::span<const std::byte> a(reinterpret_cast<const std::byte*>(now.data()), 4096),
      b(reinterpret_cast<const std::byte*>(before.data()), 4096);
  std::vector<hdsm::coherence::DiffRun> runs;
  std::size_t covered = 0;
  for (auto _ : state) {
    runs.clear();
    covered = hdsm::coherence::diff_runs(a, b, runs, 8);
    benchmark::DoNotOptimize(runs.data());
  }
  state.counters["runs"] = static_cast<double>(runs.size());
  state.counters["covered"] = static_cast<double>(covered);
}
BENCHMARK(DiffRuns)->ArgName("pattern")->Arg(0)->Arg(1)->Arg(2);

#if defined(HDSM_BENCH_CLUSTER)
// A written page's whole record, as a kernel boundary sends it (the cheaper of runs and a lane
// plan: the "lanes" counter), and its application at a receiver. Patterns 0-2 as above, and 3: a
// page of 64-bit counters whose low byte changed (tpacf's histograms). Arg 1: exact (a page of
// several writers, whose record carries no equal byte).
std::vector<std::byte> page_bytes(int pattern, bool after) {
  std::vector<std::byte> page(4096);
  if (pattern < 3) {
    const std::vector<float> f = page_of_floats(pattern, after);
    std::memcpy(page.data(), f.data(), page.size());
    return page;
  }
  for (std::size_t i = 0; i < page.size(); i += 8)
    page[i] = static_cast<std::byte>(after && i % 24 != 0 ? 2 + i % 7 : 1);
  return page;
}

void RecordEncode(benchmark::State& state) {
  const auto before = page_bytes(static_cast<int>(state.range(0)), false),
             now = page_bytes(static_cast<int>(state.range(0)), true);
  // Sixteen pages into one writer, as a boundary encodes all of a rank's pages into one buffer.
  constexpr int kPages = 16;
  std::size_t bytes = 0;
  for (auto _ : state) {
    hdsm::cluster::detail::RecordWriter w;
    for (int p = 0; p < kPages; ++p)
      w.add(static_cast<std::uint64_t>(p), 1, now, before, state.range(1) != 0);
    bytes = w.bytes().size() / kPages;
    benchmark::DoNotOptimize(w.bytes().data());
  }
  state.counters["page"] = benchmark::Counter(static_cast<double>(state.iterations()) * kPages,
                                              benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["changed"] = static_cast<double>(hdsm::coherence::differing_bytes(now, before));
}
BENCHMARK(RecordEncode)->ArgNames({"pattern", "exact"})->ArgsProduct({{0, 1, 2, 3}, {0, 1}});

void RecordApply(benchmark::State& state) {
  namespace d = hdsm::cluster::detail;
  const auto before = page_bytes(static_cast<int>(state.range(0)), false),
             now = page_bytes(static_cast<int>(state.range(0)), true);
  d::RecordWriter w;
  w.add(1, 1, now, before, state.range(1) != 0);
  std::vector<std::byte> page = before;
  bool lanes = false;
  for (auto _ : state) {
    d::for_each_record(w.bytes(), d::RecordPages::any(page.size()), [&](const d::RecordView& r) {
      lanes = r.lanes;
      d::apply_record(r, page.data());
    });
    benchmark::DoNotOptimize(page.data());
    benchmark::ClobberMemory();
  }
  if (page != now) state.SkipWithError("the record did not give the page");
  state.counters["lanes"] = lanes ? 1 : 0;
}
BENCHMARK(RecordApply)->ArgNames({"pattern", "exact"})->ArgsProduct({{0, 1, 2, 3}, {0, 1}});
#endif

void PageCopy(benchmark::State& state) {
  std::vector<std::byte> from(4096, std::byte{1}), to(4096);
  for (auto _ : state) {
    std::memcpy(to.data(), from.data(), 4096);
    benchmark::DoNotOptimize(to.data());
    benchmark::ClobberMemory();
  }
}
BENCHMARK(PageCopy);

BENCHMARK_MAIN();
