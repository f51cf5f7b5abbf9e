// The `hpe` suite's Figs. 9 and 10 (hpe.hpp): the multi-device apps on 2 and 4 devices, the
// hand-written version and hdsm's timed side by side, their speedups, exchange shares and targets.
#include "hpe.hpp"

namespace hdsm::tool::hpe {

std::vector<unsigned> HpeSuite::app_devices() const {
  std::vector<unsigned> out;
  for (Device* d : explicit_rt_->devices())
    if (d->properties().backend == ctx_.device.properties().backend && out.size() < 4)
      out.push_back(d->properties().index);
  return out;
}

std::vector<unsigned> HpeSuite::device_counts() const {
  std::vector<unsigned> out;
  for (unsigned count : {2u, 4u})
    if (count <= app_devices().size()) out.push_back(count);
  return out;
}

std::size_t HpeSuite::app_steps() const {
  const std::size_t series = 1 + (staged_rt_ ? 1 : 0) + (peer_rt_ ? 1 : 0);
  std::size_t steps = 0;
  for (const apps::MultiApp& app : apps::multi_device_apps())
    steps += app.sizes(app_scale()).size() * (1 + device_counts().size() * series);
  return steps;
}

std::vector<HpeSuite::AppTiming> HpeSuite::time_apps(const std::vector<HpeSuite::Contender>& contenders,
                                                     const apps::Output& want, double tolerance) {
  const std::size_t kMinRuns = ctx_.quick ? 3 : 7, kMaxRuns = 40;
  const double budget = (ctx_.quick ? 0.05 : 1.5) * static_cast<double>(contenders.size());
  for (const Contender& c : contenders)
    if (const std::string why = apps::compare(c.once().output, want, tolerance); !why.empty())
      throw std::runtime_error(fmt::format("{} computed a wrong result: {}", c.what, why));
  std::vector<std::vector<double>> seconds(contenders.size()), shares(contenders.size());
  const Stopwatch watch;
  for (std::size_t round = 0; round < kMinRuns || (round < kMaxRuns && watch.seconds() < budget); ++round)
    for (std::size_t i = 0; i < contenders.size(); ++i) {
      const apps::MultiRun run = contenders[i].once();
      seconds[i].push_back(run.seconds);
      shares[i].push_back(run.seconds > 0 ? run.exchange_seconds / run.seconds : 0);
    }
  std::vector<AppTiming> out;
  out.reserve(contenders.size());
  for (std::size_t i = 0; i < contenders.size(); ++i) out.push_back({median(seconds[i]), median(shares[i])});
  return out;
}

void HpeSuite::add_app(const apps::MultiApp& app, const std::string& version, unsigned devices,
                       std::size_t size, const HpeSuite::AppTiming& t, double base_seconds) {
  const std::size_t bytes = app.bytes(size);
  const double speedup = base_seconds / t.seconds;
  ctx_.results.add_row({{"figure", std::string("fig9-10")},
                        {"workload", std::string(app.name)},
                        {"version", fmt::format("{} x{}", version, devices)},
                        {"bytes", static_cast<std::int64_t>(bytes)},
                        {"seconds", t.seconds},
                        {"GBps", static_cast<double>(bytes) / t.seconds / 1e9},
                        {"devices", static_cast<std::int64_t>(devices)},
                        {"speedup", speedup},
                        {"transfer_pct", 100 * t.transfer}});
  ctx_.progress.finish(fmt::format("{:.2f} ms, speedup {:.2f}x, {:.0f}% exchanging", 1e3 * t.seconds, speedup,
                                   100 * t.transfer));
}

void HpeSuite::app_figures(const apps::MultiApp& app) {
  const std::vector<unsigned> all = app_devices();
  if (device_counts().empty()) {
    ctx_.results.add_note(fmt::format("{}: Figs. 9/10 need two {} devices", app.name,
                                      to_string(ctx_.device.properties().backend)));
    return;
  }
  std::vector<std::pair<std::string, Runtime*>> shared;
  if (staged_rt_) shared.emplace_back(kStaged, staged_rt_.get());
  if (peer_rt_) shared.emplace_back(kPeer, peer_rt_.get());
  // series -> (devices, size) -> timing
  std::map<std::string, std::map<std::pair<unsigned, std::size_t>, AppTiming>> timing;
  const std::vector<std::size_t> sizes = app.sizes(app_scale());
  for (std::size_t size : sizes) {
    const apps::Output want = app.run_reference(size);
    const std::string label = fmt::format("{} {}", app.name, format_bytes(app.bytes(size)));
    const std::vector<Device*> one{&explicit_rt_->device(all.front())};
    const std::string base_label = fmt::format("{} explicit x1", label);
    bool base_added = false;
    for (unsigned count : device_counts()) {
      const std::vector<unsigned> indices(all.begin(), all.begin() + count);
      std::vector<Device*> devices;
      devices.reserve(indices.size());
      for (unsigned i : indices) devices.push_back(&explicit_rt_->device(i));
      // The one-device baseline, the hand-written version and the hdsm ones at this count, timed side
      // by side: every speed-up is of runs the machine's load weighed on alike.
      std::vector<std::string> series{kExplicit, kExplicit};
      std::vector<Contender> contenders{
          {base_label, [&] { return app.run_explicit(one, size); }},
          {fmt::format("{} explicit x{}", label, count), [&] { return app.run_explicit(devices, size); }}};
      for (const auto& [name, rt] : shared) {
        series.push_back(name);
        contenders.push_back({fmt::format("{} {} x{}", label, name, count),
                              [&, rt = rt] { return app.run_hdsm(*rt, indices, size); }});
      }
      ctx_.progress.note(fmt::format("{} x{}: explicit x1, {}, one run of each per round", label, count,
                                     fmt::join(series.begin() + 1, series.end(), ", ")));
      const std::vector<AppTiming> timed = time_apps(contenders, want, app.tolerance);
      const AppTiming& base = timed.front();
      if (!base_added) {  // the plots' one-device point: the first count's round
        ctx_.progress.start(base_label);
        add_app(app, kExplicit, 1, size, base, base.seconds);
        base_added = true;
      }
      for (std::size_t i = 1; i < timed.size(); ++i) {
        ctx_.progress.start(contenders[i].what);
        add_app(app, series[i], count, size, timed[i], base.seconds);
        timing[series[i]][{count, size}] = timed[i];
      }
      timing["base"][{count, size}] = base;
    }
  }
  app_summary(app, timing, sizes.back(), shared);
}

void HpeSuite::app_summary(
    const apps::MultiApp& app,
    const std::map<std::string, std::map<std::pair<unsigned, std::size_t>, HpeSuite::AppTiming>>& timing,
    std::size_t largest, const std::vector<std::pair<std::string, Runtime*>>& shared) {
  Results& r = ctx_.results;
  const unsigned most = device_counts().back();
  const std::pair key{most, largest};
  const double base = timing.at("base").at(key).seconds;
  std::vector<std::string> speedups, shares;
  double best = 0;
  for (const std::string& series : {kExplicit, kStaged, kPeer}) {
    const auto it = timing.find(series);
    if (it == timing.end()) continue;
    const AppTiming& t = it->second.at(key);
    speedups.push_back(fmt::format("{} {:.2f}x", series, base / t.seconds));
    shares.push_back(fmt::format("{} {:.0f}%", series, 100 * t.transfer));
    if (series != kExplicit) best = std::max(best, base / t.seconds);
  }
  const std::string where = fmt::format("{} devices, {}", most, format_bytes(app.bytes(largest)));
  r.add_summary({fmt::format("{} best hdsm speedup over 1 device ({})", app.name, where), best, "x",
                 fmt::format("Fig. 9: {}", fmt::join(speedups, ", "))});
  const auto& peer_or_staged = timing.at(shared.back().first).at(key);
  r.add_summary({fmt::format("{} % of time in exchanges, {} ({})", app.name, shared.back().first, where),
                 100 * peer_or_staged.transfer, "%", fmt::format("Fig. 10: {}", fmt::join(shares, ", "))});
  // The target: every hdsm series within kAppTarget of the hand-written version, at every size and
  // device count.
  for (const auto& [series, rt] : shared) {
    double worst = 0;
    std::vector<std::string> missed;
    for (const auto& [k, t] : timing.at(series)) {
      const double ratio = t.seconds / timing.at(kExplicit).at(k).seconds;
      worst = std::max(worst, ratio);
      if (ratio > kAppTarget)
        missed.push_back(fmt::format("x{} {} {:.2f}x", k.first, format_bytes(app.bytes(k.second)), ratio));
    }
    r.add_summary({fmt::format("target: {} {} time / explicit <= {} (worst)", app.name, series, kAppTarget),
                   worst, "x",
                   missed.empty() ? std::string("met") : fmt::format("missed: {}", fmt::join(missed, ", "))});
  }
}

}  // namespace hdsm::tool::hpe
