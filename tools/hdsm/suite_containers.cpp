// The `containers` suite: seed 001 Fig. 6. The skeleton applications (apps/skeleton_apps.cpp) run
// with the containers' communication and memory optimization (CMO: Mechanism::improved, copies kept
// on the devices between calls and made only where stale) and without it (No CMO: Mechanism::none,
// every operand copied to the device and back for every call), on one device and split over two.
// Every run's output is checked against the app's serial reference before its time counts; the
// versions run interleaved after a warm-up run each, taking turns to go first; the median counts.
#include "apps/skeleton_apps.hpp"
#include "common.hpp"
#include "measure.hpp"
#include "suite.hpp"

#include <hdsm/hdsm.hpp>

#include <fmt/format.h>

#include <array>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace hdsm::tool {
namespace {

std::uint64_t moved(const ContainerStats& s) {
  return s.host_to_device_bytes + s.device_to_host_bytes + s.on_device_bytes + s.peer_bytes;
}

void run(SuiteContext& ctx) {
  ctx.results.set_columns({"experiment", "app", "devices", "version", "seconds", "moved", "time_ratio"});
  ctx.results.add_plot({.id = "fig6",
                        .title = "Skeleton apps: time relative to CMO (seed 001 Fig. 6)",
                        .x = "app",
                        .y = "time_ratio",
                        .series = "version",
                        .x_label = "application",
                        .y_label = "time / CMO",
                        .log_y = true,
                        .categorical_x = true,
                        .where = {{"experiment", "fig6"}}});
  const apps::Scale scale = ctx.quick ? apps::Scale::quick : apps::Scale::full;
  const int reps = ctx.quick ? 1 : 5;
  // One device (the suite's), and two: it and another of its backend, where there is one.
  const unsigned home = ctx.device.properties().index;
  std::vector<std::vector<unsigned>> splits{{home}};
  for (const Device* d : ctx.runtime.devices())
    if (d->properties().index != home && d->properties().backend == ctx.device.properties().backend) {
      splits.push_back({home, d->properties().index});
      break;
    }
  if (splits.size() == 1)
    ctx.progress.note(
        fmt::format("{} has no second device of its backend: one-device runs only", ctx.device.name()));
  std::map<std::string, std::unique_ptr<Runtime>> runtimes;
  for (const char* mechanism : {"new", "none"}) {
    Config c = ctx.runtime.config();
    c.set("HDSM_CONTAINER_MECHANISM", mechanism)
        .set("HDSM_SIM_POISON", "0")
        .set("HDSM_STATS", "0")
        .set("HDSM_TRACE", "");
    runtimes[mechanism] = std::make_unique<Runtime>(c);
  }
  ctx.progress.set_total(apps::skeleton_apps().size() * splits.size());
  for (const apps::SkeletonApp& app : apps::skeleton_apps()) {
    const apps::Output want = app.run_reference(scale);
    for (const std::vector<unsigned>& devices : splits) {
      const std::string where = fmt::format("{} device{}", devices.size(), devices.size() > 1 ? "s" : "");
      ctx.progress.start(fmt::format("{} on {}", app.name, where));
      std::map<std::string, std::vector<double>> seconds;
      std::map<std::string, std::uint64_t> bytes;
      // A warm-up run of each version (device memory touched, kernels built), then the timed runs,
      // the two versions taking turns to go first.
      for (int rep = -1; rep < reps; ++rep)
        for (const char* mechanism : rep % 2 == 0 ? std::array{"new", "none"} : std::array{"none", "new"}) {
          Runtime& rt = *runtimes[mechanism];
          reset_container_stats(rt);
          const Stopwatch watch;
          const apps::Output got = app.run(rt, apps::Where{SkeletonBackend::devices, devices}, scale);
          if (rep >= 0) seconds[mechanism].push_back(watch.seconds());
          bytes[mechanism] = moved(container_stats(rt));
          if (const std::string wrong = apps::compare(got, want, app.tolerance); !wrong.empty())
            throw std::runtime_error(
                fmt::format("containers suite: {} ({}, {}) is wrong: {}", app.name, mechanism, where, wrong));
        }
      const double cmo = median(seconds["new"]), none = median(seconds["none"]);
      for (const auto& [mechanism, version] : {std::pair{"new", "CMO"}, std::pair{"none", "No CMO"}}) {
        const double s = median(seconds[mechanism]);
        ctx.results.add_row({{"experiment", "fig6"},
                             {"app", std::string(app.name)},
                             {"devices", static_cast<std::int64_t>(devices.size())},
                             {"version", fmt::format("{}, {}", version, where)},
                             {"seconds", s},
                             {"moved", static_cast<std::int64_t>(bytes[mechanism])},
                             {"time_ratio", s / cmo}});
      }
      ctx.results.add_summary({fmt::format("{} on {}: No CMO time / CMO", app.name, where), none / cmo, "x",
                               fmt::format("{} vs {} moved, median of {}", format_bytes(bytes["none"]),
                                           format_bytes(bytes["new"]), reps)});
      ctx.progress.finish(fmt::format("CMO {:.4f} s, No CMO {:.2f}x", cmo, none / cmo));
    }
  }
  ctx.results.add_note(
      "CMO: the containers keep device copies between calls and copy only what is stale "
      "(HDSM_CONTAINER_MECHANISM=new); No CMO: every call copies its operands to the device and back "
      "(HDSM_CONTAINER_MECHANISM=none). A single-call app (mse, mandelbrot) shows the containers' own "
      "overhead.");
}

}  // namespace

Suite containers_suite() {
  return {"containers",
          "seed 001 Fig. 6: skeleton apps with and without the containers' communication optimization, on 1 "
          "and 2 devices",
          run};
}

}  // namespace hdsm::tool
