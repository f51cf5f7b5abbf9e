// One rank's launch against the executor's, for an empty kernel: the cluster's fixed cost per
// kernel (the rank's interval of blocks, the boundary's counter), which short kernels pay in full:
// scan launches 3000 a run. Both on 2 threads; the rank is one in-process rank (no MPI), as a
// one-rank job runs: every page writable, no fault, no message.
#include <hdsm/kernel.hpp>

#include "exec/executor.hpp"

#if defined(HDSM_BENCH_CLUSTER)
#include "cluster/node.hpp"
#include "cluster/threads_transport.hpp"

#include <hdsm/cluster.hpp>
#endif

#include <benchmark/benchmark.h>

#include <cstdint>

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
void ClusterLaunchOneRank(benchmark::State& state) {
  namespace cl = hdsm::cluster;
  cl::Options o;
  o.space_bytes = std::size_t{64} << 20;
  o.threads = 2;
  cl::detail::ThreadsHub hub(1);
  cl::detail::Node node(hub.endpoint(0), o);
  cl::detail::bind_thread(&node);
  const hdsm::HostArgs<std::uint32_t> args(0);
  const hdsm::Launch launch = shape(state);
  const hdsm::Kernel& untyped = kNoop;  // the untyped launch, as GridTarget makes it
  for (auto _ : state) cl::launch(untyped, launch, args.pack());
  cl::detail::bind_thread(nullptr);
}
BENCHMARK(ClusterLaunchOneRank)->Arg(1)->Arg(64);
#endif

}  // namespace

BENCHMARK_MAIN();
