// One Parboil-like app (apps/parboil) per benchmark, as its explicit-copy version and as its hdsm
// version under each protocol, on the runtime's default device (HDSM_DEVICE=cuda bench_parboil runs
// them on a GPU). `hdsm bench adsm` reports the papers' figures from the same apps; this program
// is for looking at one app at a time: under HDSM_TRACE, under a profiler, or with
// --benchmark_filter. Counters: bytes moved and faults per run.
#include "apps/app.hpp"

#include <hdsm/hdsm.hpp>

#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>

namespace {

hdsm::Runtime& runtime(const std::string& protocol) {
  static std::map<std::string, std::unique_ptr<hdsm::Runtime>> runtimes;
  auto& rt = runtimes[protocol];
  if (!rt)
    rt = std::make_unique<hdsm::Runtime>(hdsm::Config::from_environment().set("HDSM_PROTOCOL", protocol));
  return *rt;
}

std::uint64_t moved(const hdsm::Stats& s) {
  std::uint64_t bytes = 0;
  for (const auto& r : s.routes) bytes += r.bytes;
  return bytes;
}

void run_app(benchmark::State& state, const hdsm::apps::App* app, const std::string& version) {
  const bool is_explicit = version == "explicit";
  hdsm::Runtime& rt = runtime(is_explicit ? "lazy" : version);
  hdsm::Device& device = rt.default_device();
  const auto index = static_cast<int>(device.properties().index);
  rt.reset_stats();
  for (auto _ : state) {
    const hdsm::apps::Output out = is_explicit ? app->run_explicit(device, hdsm::apps::Scale::full)
                                               : app->run_adsm(rt, index, hdsm::apps::Scale::full);
    benchmark::DoNotOptimize(out.values.data());
  }
  const hdsm::Stats s = rt.stats();
  const auto per_run = benchmark::Counter::kAvgIterations;
  state.counters["bytes"] = benchmark::Counter(static_cast<double>(moved(s)), per_run);
  state.counters["faults"] = benchmark::Counter(static_cast<double>(s.read_faults + s.write_faults), per_run);
}

const bool registered = [] {
  for (const hdsm::apps::App& app : hdsm::apps::parboil_apps())
    for (const char* version : {"explicit", "batch", "lazy", "rolling"})
      benchmark::RegisterBenchmark((std::string(app.name) + "/" + version).c_str(), run_app, &app,
                                   std::string(version))
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
