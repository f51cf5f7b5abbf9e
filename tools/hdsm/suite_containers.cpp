// The `containers` suite: seed 001 Fig. 6, Table 1 and Fig. 7.
// - Fig. 6: the skeleton applications (apps/skeleton_apps.cpp) run with the containers' communication
//   and memory optimization (CMO: Mechanism::improved, copies kept on the devices between calls and
//   made only where stale) and without it (No CMO: Mechanism::none, every operand copied to the
//   device and back for every call), on one device and split over two.
// - Table 1: the three iterative apps (LU, NBody, SPH) on two sim devices, at three sizes each, under
//   the initial mechanism (flushing after every call, as it needs to stay correct), the new one with
//   peer copies off (device-to-device copies staged through the main copy), and the new one with
//   them: bytes moved by kind and device memory allocated, summed over the sizes.
// - Fig. 7: the time of the same three configurations with pinned main copies.
// Every run's output is checked (against the app's serial reference, or the host backend's run at the
// same size) before its figures count; timed versions run interleaved after a warm-up run each,
// taking turns to go first; the median counts.
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

double mb(std::uint64_t bytes) { return static_cast<double>(bytes) / 1e6; }

void fig6(SuiteContext& ctx) {
  ctx.results.set_columns({"experiment", "app", "devices", "version", "seconds", "moved", "time_ratio",
                           "htd_mb", "dtd_mb", "dtd_peer_mb", "dth_mb", "total_mb", "alloc_mb"});
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
  ctx.progress.set_total(apps::skeleton_apps().size() * splits.size() + apps::table1_apps(scale).size());
  for (const apps::SkeletonApp& app : apps::skeleton_apps()) {
    const apps::Output want = app.run_reference(scale);
    for (const std::vector<unsigned>& devices : splits) {
      const std::string where = fmt::format("{} device{}", devices.size(), devices.size() > 1 ? "s" : "");
      ctx.progress.start(fmt::format("{} on {}", app.name, where));
      std::map<std::string, std::vector<double>> seconds;
      std::map<std::string, ContainerStats> stats;
      // A warm-up run of each version (device memory touched, kernels built), then the timed runs,
      // the two versions taking turns to go first.
      for (int rep = -1; rep < reps; ++rep)
        for (const char* mechanism : rep % 2 == 0 ? std::array{"new", "none"} : std::array{"none", "new"}) {
          Runtime& rt = *runtimes[mechanism];
          reset_container_stats(rt);
          const Stopwatch watch;
          const apps::Output got = app.run(rt, apps::Where{SkeletonBackend::devices, devices}, scale);
          if (rep >= 0) seconds[mechanism].push_back(watch.seconds());
          stats[mechanism] = container_stats(rt);
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
                             {"moved", static_cast<std::int64_t>(moved(stats[mechanism]))},
                             {"time_ratio", s / cmo},
                             {"htd_mb", mb(stats[mechanism].host_to_device_bytes)},
                             {"dtd_mb", mb(stats[mechanism].on_device_bytes)},
                             {"dtd_peer_mb", mb(stats[mechanism].peer_bytes)},
                             {"dth_mb", mb(stats[mechanism].device_to_host_bytes)},
                             {"total_mb", mb(moved(stats[mechanism]))},
                             {"alloc_mb", mb(stats[mechanism].device_allocated_bytes)}});
      }
      ctx.results.add_summary({fmt::format("{} on {}: No CMO time / CMO", app.name, where), none / cmo, "x",
                               fmt::format("{} vs {} moved, median of {}", format_bytes(moved(stats["none"])),
                                           format_bytes(moved(stats["new"])), reps)});
      ctx.progress.finish(fmt::format("CMO {:.4f} s, No CMO {:.2f}x", cmo, none / cmo));
    }
  }
  ctx.results.add_note(
      "CMO: the containers keep device copies between calls and copy only what is stale "
      "(HDSM_CONTAINER_MECHANISM=new); No CMO: every call copies its operands to the device and back "
      "(HDSM_CONTAINER_MECHANISM=none). A single-call app (mse, mandelbrot) shows the containers' own "
      "overhead.");
}

// Table 1's three configurations.
struct Configuration {
  const char* name;
  const char* mechanism;  // HDSM_CONTAINER_MECHANISM
  const char* peer;       // HDSM_SIM_PEER
  bool flush;             // flush the containers after every call
};
constexpr std::array<Configuration, 3> kConfigurations{{
    {"Initial CMO", "initial", "all", true},
    {"New CMO", "new", "none", false},
    {"New CMO (peer)", "new", "all", false},
}};

// The seed's Table 1 (MB, accumulated over its problem sizes): HTD, DTD (on one device), DTD (peer),
// DTH, total, allocated.
struct SeedRow {
  std::string_view app;
  std::string_view configuration;
  std::array<double, 6> mb;
};
constexpr std::array<SeedRow, 9> kSeedTable1{{
    {"lu", "Initial CMO", {119.8, 0, 0, 60.1, 179.9, 359.1}},
    {"lu", "New CMO", {60.1, 59.4, 0, 59.7, 179.2, 4.4}},
    {"lu", "New CMO (peer)", {0.6, 59.4, 59.4, 0.3, 119.7, 4.4}},
    {"nbody", "Initial CMO", {3121.9, 0, 0, 1135.2, 4257.1, 6243.9}},
    {"nbody", "New CMO", {1040.6, 1040.6, 0, 1087.9, 3169.1, 567.6}},
    {"nbody", "New CMO (peer)", {0, 1040.6, 1040.6, 47.3, 2128.5, 567.6}},
    {"sph", "Initial CMO", {101.2, 0, 0, 42.7, 143.9, 203.2}},
    {"sph", "New CMO", {33.7, 33.7, 0, 34.1, 101.5, 4.0}},
    {"sph", "New CMO (peer)", {0, 33.7, 33.7, 0.3, 67.7, 4.0}},
}};

const SeedRow& seed_row(std::string_view app, std::string_view configuration) {
  for (const SeedRow& r : kSeedTable1)
    if (r.app == app && r.configuration == configuration) return r;
  throw std::logic_error(fmt::format("containers suite: no seed row for {} ({})", app, configuration));
}

void table1(SuiteContext& ctx) {
  ctx.results.add_plot({.id = "fig7",
                        .title =
                            "Iterative skeleton apps on 2 sim devices, pinned main copies: time relative to "
                            "New CMO (peer) (seed 001 Fig. 7)",
                        .x = "app",
                        .y = "time_ratio",
                        .series = "version",
                        .x_label = "application",
                        .y_label = "time / New CMO (peer)",
                        .log_y = true,
                        .categorical_x = true,
                        .where = {{"experiment", "table1"}}});
  const apps::Scale scale = ctx.quick ? apps::Scale::quick : apps::Scale::full;
  const int reps = ctx.quick ? 1 : 3;
  // Two sim devices whose peer copies the configuration turns on or off, whatever the suite's device.
  std::map<std::string, std::unique_ptr<Runtime>> runtimes;
  for (const Configuration& c : kConfigurations) {
    Config config = ctx.runtime.config();
    config.set("HDSM_DEVICE", "sim")
        .set("HDSM_SIM_DEVICES", "2")
        .set("HDSM_CONTAINER_MECHANISM", c.mechanism)
        .set("HDSM_SIM_PEER", c.peer)
        .set("HDSM_SIM_POISON", "0")
        .set("HDSM_STATS", "0")
        .set("HDSM_TRACE", "");
    runtimes[c.name] = std::make_unique<Runtime>(config);
  }
  std::vector<double> speedups, peer_speedups;
  for (const apps::SizedRun& app : apps::table1_apps(scale)) {
    const std::string name(app.app->name);
    ctx.progress.start(fmt::format("{} on 2 sim devices, {} sizes ({} to {}), 3 configurations", name,
                                   app.sizes.size(), app.sizes.front(), app.sizes.back()));
    // The host backend's result at each size is what every configuration must compute.
    std::vector<apps::Output> want;
    want.reserve(app.sizes.size());
    for (std::size_t size : app.sizes)
      want.push_back(app.run_size(*runtimes["New CMO (peer)"], apps::Where{SkeletonBackend::host, {}}, size));
    std::map<std::string, ContainerStats> stats;
    std::map<std::string, std::vector<double>> seconds;
    for (int rep = -1; rep < reps; ++rep)
      for (std::size_t k = 0; k < kConfigurations.size(); ++k) {
        const Configuration& c =
            kConfigurations[(k + static_cast<std::size_t>(rep + 1)) % kConfigurations.size()];
        Runtime& rt = *runtimes[c.name];
        const apps::Where where{SkeletonBackend::devices, {0, 1}, c.flush, true};
        ContainerStats total;
        double time = 0;
        for (std::size_t i = 0; i < app.sizes.size(); ++i) {
          reset_container_stats(rt);
          const Stopwatch watch;
          const apps::Output got = app.run_size(rt, where, app.sizes[i]);
          time += watch.seconds();
          total += container_stats(rt);
          if (const std::string wrong = apps::compare(got, want[i], app.app->tolerance); !wrong.empty())
            throw std::runtime_error(fmt::format("containers suite: {} of {} ({}) is wrong: {}", name,
                                                 app.sizes[i], c.name, wrong));
        }
        if (rep < 0)
          stats[c.name] = total;  // the transfers are the same every run
        else
          seconds[c.name].push_back(time);
      }
    const double base = median(seconds["New CMO (peer)"]);
    for (const Configuration& c : kConfigurations) {
      const ContainerStats& st = stats[c.name];
      const double s = median(seconds[c.name]);
      ctx.results.add_row({{"experiment", "table1"},
                           {"app", name},
                           {"devices", std::int64_t{2}},
                           {"version", std::string(c.name)},
                           {"seconds", s},
                           {"moved", static_cast<std::int64_t>(moved(st))},
                           {"time_ratio", s / base},
                           {"htd_mb", mb(st.host_to_device_bytes)},
                           {"dtd_mb", mb(st.on_device_bytes)},
                           {"dtd_peer_mb", mb(st.peer_bytes)},
                           {"dth_mb", mb(st.device_to_host_bytes)},
                           {"total_mb", mb(moved(st))},
                           {"alloc_mb", mb(st.device_allocated_bytes)}});
      const SeedRow& seed = seed_row(name, c.name);
      ctx.results.add_row({{"experiment", "table1-seed"},
                           {"app", name},
                           {"devices", std::int64_t{2}},
                           {"version", std::string(c.name)},
                           {"seconds", 0.0},
                           {"moved", static_cast<std::int64_t>(seed.mb[4] * 1e6)},
                           {"time_ratio", 0.0},
                           {"htd_mb", seed.mb[0]},
                           {"dtd_mb", seed.mb[1]},
                           {"dtd_peer_mb", seed.mb[2]},
                           {"dth_mb", seed.mb[3]},
                           {"total_mb", seed.mb[4]},
                           {"alloc_mb", seed.mb[5]}});
      ctx.results.add_note(
          fmt::format("Table 1, {} {}: ours HTD {:.2f}, DTD {:.2f}, DTD peer {:.2f}, DTH {:.2f}, total "
                      "{:.2f}, alloc {:.2f} MB; "
                      "seed HTD {}, DTD {}, DTD peer {}, DTH {}, total {}, alloc {} MB",
                      name, c.name, mb(st.host_to_device_bytes), mb(st.on_device_bytes), mb(st.peer_bytes),
                      mb(st.device_to_host_bytes), mb(moved(st)), mb(st.device_allocated_bytes), seed.mb[0],
                      seed.mb[1], seed.mb[2], seed.mb[3], seed.mb[4], seed.mb[5]));
    }
    const auto ratio = [&](const char* a, const char* b, auto field) {
      return static_cast<double>(field(stats[a])) /
             static_cast<double>(std::max<std::uint64_t>(1, field(stats[b])));
    };
    const auto total = [](const ContainerStats& st) { return moved(st); };
    const auto alloc = [](const ContainerStats& st) { return st.device_allocated_bytes; };
    const auto seed_ratio = [&](const char* a, const char* b, std::size_t column) {
      return seed_row(name, a).mb[column] / seed_row(name, b).mb[column];
    };
    const double peer_moved = ratio("New CMO (peer)", "New CMO", total);
    const double new_moved = ratio("New CMO", "Initial CMO", total);
    const double allocated = ratio("Initial CMO", "New CMO", alloc);
    ctx.results.add_summary({fmt::format("{}: total moved, New CMO (peer) / New CMO", name), peer_moved, "x",
                             fmt::format("{}: target <= 0.70; seed {:.2f}x", verdict(peer_moved <= 0.70),
                                         seed_ratio("New CMO (peer)", "New CMO", 4))});
    ctx.results.add_summary({fmt::format("{}: total moved, New CMO / Initial CMO", name), new_moved, "x",
                             fmt::format("{}: target <= 1; seed {:.2f}x", verdict(new_moved <= 1),
                                         seed_ratio("New CMO", "Initial CMO", 4))});
    ctx.results.add_summary({fmt::format("{}: device memory allocated, Initial CMO / New CMO", name),
                             allocated, "x",
                             fmt::format("{}: target >= 10; seed {:.0f}x", verdict(allocated >= 10),
                                         seed_ratio("Initial CMO", "New CMO", 5))});
    const double speedup = median(seconds["Initial CMO"]) / base;
    const double peer_speedup = median(seconds["New CMO"]) / base;
    speedups.push_back(speedup);
    peer_speedups.push_back(peer_speedup);
    ctx.results.add_summary({fmt::format("{}: Fig. 7 time, Initial CMO / New CMO (peer)", name), speedup, "x",
                             fmt::format("pinned main copies, 2 sim devices, median of {}", reps)});
    ctx.progress.finish(fmt::format(
        "peer/no-peer bytes {:.2f}x, alloc initial/new {:.0f}x, time initial/peer {:.1f}x",
        ratio("New CMO (peer)", "New CMO", total), ratio("Initial CMO", "New CMO", alloc), speedup));
  }
  const auto mean = [](const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
  };
  ctx.results.add_summary({"Fig. 7: mean speedup of New CMO (peer) over Initial CMO", mean(speedups), "x",
                           "seed: 19.2x on two C2050 GPUs"});
  ctx.results.add_summary(
      {"Fig. 7: mean speedup of New CMO (peer) over New CMO", mean(peer_speedups), "x", "seed: 1.23x"});
  ctx.results.add_note(
      "Table 1's columns, as the seed's: HTD host to device, DTD device to device on one device (the part of "
      "a "
      "copy that another copy on the same device holds), DTD peer between two devices (with peer copies off, "
      "such a copy is staged through the main copy: DTH, then HTD), DTH device to host; total the sum, alloc "
      "the device memory allocated, summed over the app's sizes.");
}

void run(SuiteContext& ctx) {
  fig6(ctx);
  table1(ctx);
}

}  // namespace

Suite containers_suite() {
  return {"containers",
          "seed 001 Fig. 6, Table 1, Fig. 7: skeleton apps with and without the containers' communication "
          "optimization on 1 and 2 devices; the initial and the new mechanism with and without peer copies",
          run};
}

}  // namespace hdsm::tool
