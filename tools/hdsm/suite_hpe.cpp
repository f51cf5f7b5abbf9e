// The `hpe` suite (hpe.hpp): the results' columns and plots, the runtimes and devices of every
// figure, and the order the figures run in.
#include "hpe.hpp"

namespace hdsm::tool {
namespace hpe {

void HpeSuite::run() {
  declare_results();
  make_runtimes();
  const std::vector<std::size_t> all = sizes(ctx_.quick);
  std::size_t series = 3 + (staged_rt_ ? 1 : 0) + (peer_rt_ ? 1 : 0);
  // Fig. 8's four waits a size (two versions, two directions) are counted here too, so the total
  // does not grow halfway through.
  ctx_.progress.set_total(all.size() * 2 * series + (staged_rt_ ? all.size() * 4 : 0) + app_steps());
  for (std::size_t bytes : all) {
    for (const std::string& direction : {kOneWay, kTwoWay}) {
      explicit_versions(direction, bytes);
      if (staged_rt_) hdsm_version(direction, kStaged, *staged_rt_, bytes);
      if (peer_rt_) hdsm_version(direction, kPeer, *peer_rt_, bytes);
    }
  }
  summarize();
  if (staged_rt_) lock_wait_figure(ctx_, *staged_rt_, a_, b_);
  for (const apps::MultiApp& app : apps::multi_device_apps()) app_figures(app);
}

void HpeSuite::declare_results() {
  // Every row names its figure (fig7, fig8, fig9-10) and its workload: the direction for Figs. 7
  // and 8 (one-way, two-way), the app for Figs. 9/10. Then the version (Figs. 9/10: "<version>
  // x<devices>"), the bytes (moved each way; Figs. 9/10: the data set), the time, the rate, and for
  // Figs. 9/10 the speedup and transfer share (empty elsewhere).
  ctx_.results.set_columns(
      {"figure", "workload", "version", "bytes", "seconds", "GBps", "devices", "speedup", "transfer_pct"});
  for (const std::string& direction : {kOneWay, kTwoWay})
    ctx_.results.add_plot({.id = direction,
                           .title = fmt::format("{} inter-device throughput (seed 003 Fig. 7)", direction),
                           .x = "bytes",
                           .y = "GBps",
                           .series = "version",
                           .x_label = "bytes per direction",
                           .y_label = direction == kTwoWay ? "GB/s (both directions together)" : "GB/s",
                           .log_x = true,
                           .x_format = ValueFormat::bytes,
                           .where = {{"figure", "fig7"}, {"workload", direction}}});
  struct AppFigure {
    const char* id;
    const char* y;
    const char* title;
    const char* y_label;
  };
  const AppFigure figures[] = {
      {"fig9", "speedup", "speedup over one device (seed 003 Fig. 9)",
       "speedup over the explicit version on 1 device"},
      {"fig10", "transfer_pct", "time waiting for exchanges (seed 003 Fig. 10)", "% of the run"}};
  for (const apps::MultiApp& app : apps::multi_device_apps())
    for (const AppFigure& f : figures) {
      const std::string name(app.name);
      ctx_.results.add_plot({.id = fmt::format("{}-{}", f.id, name),
                             .title = fmt::format("{}: {}", name, f.title),
                             .x = "bytes",
                             .y = f.y,
                             .series = "version",
                             .x_label = "data set",
                             .y_label = f.y_label,
                             .log_x = true,
                             .x_format = ValueFormat::bytes,
                             .where = {{"figure", "fig9-10"}, {"workload", name}}});
    }
}

void HpeSuite::make_runtimes() {
  Config c = ctx_.runtime.config();
  c.set("HDSM_PROTOCOL", "rolling").set("HDSM_SIM_POISON", "0").set("HDSM_STATS", "0").set("HDSM_TRACE", "");
  const DeviceProperties& p = ctx_.device.properties();
  if (p.backend == Backend::sim) {
    if (c.integer("HDSM_SIM_DEVICES") < 4) c.set("HDSM_SIM_DEVICES", "4");  // Figs. 9/10 use 4
    const unsigned devices = static_cast<unsigned>(c.integer("HDSM_SIM_DEVICES"));
    a_ = p.index;
    b_ = (p.index + 1) % devices;
    staged_rt_ = std::make_unique<Runtime>(Config(c).set("HDSM_SIM_PEER", "none"));
    peer_rt_ = std::make_unique<Runtime>(Config(c).set("HDSM_SIM_PEER", "all"));
    explicit_rt_ = staged_rt_.get();
    ctx_.results.add_note(
        fmt::format("sim{} <-> sim{}: hdsm staged without peer groups, hdsm peer with one; "
                    "link {} GB/s, {} us per transfer",
                    a_, b_, p.link_gbps, p.latency_us));
    return;
  }
  // Other backends: the chosen device and the next one of its backend, as the hardware connects them.
  auto rt = std::make_unique<Runtime>(c);
  const auto devices = rt->devices();
  a_ = p.index;
  bool found = false;
  for (std::size_t k = 1; k < devices.size() && !found; ++k) {
    const Device& d = *devices[(a_ + k) % devices.size()];
    if (d.properties().backend == p.backend) {
      b_ = d.properties().index;
      found = true;
    }
  }
  if (!found)
    throw std::runtime_error(
        fmt::format("the hpe suite needs two {} devices; {} is the only one", to_string(p.backend), p.name));
  const bool peers =
      rt->device(b_).can_access_peer(rt->device(a_)) && rt->device(a_).can_access_peer(rt->device(b_));
  ctx_.results.add_note(fmt::format("{} <-> {}: {}", rt->device(a_).name(), rt->device(b_).name(),
                                    peers ? "peers: hdsm staged skipped" : "not peers: hdsm peer skipped"));
  (peers ? peer_rt_ : staged_rt_) = std::move(rt);
  explicit_rt_ = peers ? peer_rt_.get() : staged_rt_.get();
}

double HpeSuite::time(const std::string& what, const std::function<void()>& once) {
  ctx_.progress.start(what);
  const MeasureOptions options{ctx_.quick ? 0.02 : 0.1, 3};
  return measure(
             [&](std::size_t reps) {
               for (std::size_t r = 0; r < reps; ++r) once();
             },
             options)
      .seconds_per_rep;
}

}  // namespace hpe

Suite hpe_suite() {
  return {"hpe",
          "seed 003 Figs. 7, 8, 9, 10: inter-device throughput and CPU thread wait time (hand-written vs "
          "hdsm); multi-device stencil, fft, mergesort (explicit vs hdsm)",
          [](SuiteContext& context) { hpe::HpeSuite(context).run(); }};
}

}  // namespace hdsm::tool
