// The `hpe` suite's Fig. 7 (hpe.hpp): one-way and two-way inter-device throughput of the
// hand-written versions and hdsm's, and the summary's ratios over the large sizes.
#include "hpe.hpp"

namespace hdsm::tool::hpe {

void HpeSuite::add(const std::string& direction, const std::string& version, std::size_t bytes,
                   double seconds) {
  const double moved = static_cast<double>(bytes) * (direction == kTwoWay ? 2 : 1);
  const double gbps = moved / seconds / 1e9;
  ctx_.results.add_row({{"figure", std::string("fig7")},
                        {"workload", direction},
                        {"version", version},
                        {"bytes", static_cast<std::int64_t>(bytes)},
                        {"seconds", seconds},
                        {"GBps", gbps},
                        {"devices", std::int64_t{2}},
                        {"speedup", std::string()},
                        {"transfer_pct", std::string()}});
  gbps_[direction][version][bytes] = gbps;
  ctx_.progress.finish(format_gbps(gbps));
}

void HpeSuite::explicit_versions(const std::string& direction, std::size_t bytes) {
  Device& a = explicit_rt_->device(a_);
  Device& b = explicit_rt_->device(b_);
  std::vector<std::unique_ptr<ExplicitLane>> lanes;
  lanes.push_back(std::make_unique<ExplicitLane>(a, b, bytes, 1));
  if (direction == kTwoWay) lanes.push_back(std::make_unique<ExplicitLane>(b, a, bytes, 2));
  const std::pair<std::string, void (*)(ExplicitLane&)> versions[] = {
      {kNaive, [](ExplicitLane& l) { l.naive(); }},
      {kPinned, [](ExplicitLane& l) { l.pinned(); }},
      {kDouble, [](ExplicitLane& l) { l.double_buffered(); }}};
  for (const auto& [version, one] : versions) {
    for (auto& lane : lanes) lane->clear();
    const double s = time(fmt::format("{} {} {}", direction, version, format_bytes(bytes)),
                          [&, one = one] { each_at_once(lanes, one); });
    for (auto& lane : lanes) lane->check(version);
    add(direction, version, bytes, s);
  }
}

void HpeSuite::hdsm_version(const std::string& direction, const std::string& version, Runtime& rt,
                            std::size_t bytes) {
  std::vector<std::unique_ptr<SharedLane>> lanes;
  lanes.push_back(std::make_unique<SharedLane>(rt, a_, b_, bytes, 3));
  if (direction == kTwoWay) lanes.push_back(std::make_unique<SharedLane>(rt, b_, a_, bytes, 4));
  for (auto& lane : lanes) lane->clear();
  const Stats before = rt.stats();
  const double s = time(fmt::format("{} {} {}", direction, version, format_bytes(bytes)),
                        [&] { each_at_once<SharedLane>(lanes, [](SharedLane& l) { l.copy(); }); });
  const CopyRoute route = version == kPeer ? CopyRoute::peer : CopyRoute::staged;
  if (rt.stats().copy(route).transfers == before.copy(route).transfers)
    throw std::logic_error(fmt::format("{} {}: the copy engine took no {} route", version,
                                       format_bytes(bytes), to_string(route)));
  for (auto& lane : lanes) lane->check(version);
  add(direction, version, bytes, s);
}

std::vector<std::pair<std::size_t, double>> HpeSuite::large(const std::string& direction,
                                                            const std::string& version) const {
  std::vector<std::pair<std::size_t, double>> out;
  const auto d = gbps_.find(direction);
  if (d == gbps_.end()) return out;
  const auto v = d->second.find(version);
  if (v == d->second.end()) return out;
  for (const auto& [bytes, gbps] : v->second)
    if (bytes >= kTargetMinBytes) out.emplace_back(bytes, gbps);
  return out;
}

std::vector<std::pair<std::size_t, double>> HpeSuite::ratios(const std::string& direction,
                                                             const std::string& numerator,
                                                             const std::string& denominator,
                                                             double fixed) const {
  std::vector<std::pair<std::size_t, double>> out;
  const auto den = large(direction, denominator);
  for (const auto& [bytes, gbps] : large(direction, numerator)) {
    double d = fixed;
    for (const auto& [b, g] : den)
      if (b == bytes) d = g;
    if (d > 0) out.emplace_back(bytes, gbps / d);
  }
  return out;
}

std::optional<std::pair<double, std::size_t>> HpeSuite::worst_ratio(const std::string& direction,
                                                                    const std::string& numerator,
                                                                    const std::string& denominator,
                                                                    double fixed) const {
  const auto all = ratios(direction, numerator, denominator, fixed);
  if (all.empty()) return std::nullopt;
  const auto w = std::min_element(all.begin(), all.end(),
                                  [](const auto& x, const auto& y) { return x.second < y.second; });
  return std::pair{w->second, w->first};
}

std::optional<double> HpeSuite::mean_ratio(const std::string& direction, const std::string& numerator,
                                           const std::string& denominator, double fixed) const {
  const auto all = ratios(direction, numerator, denominator, fixed);
  if (all.empty()) return std::nullopt;
  double sum = 0;
  for (const auto& [bytes, r] : all) sum += r;
  return sum / static_cast<double>(all.size());
}

void HpeSuite::summarize() {
  Results& r = ctx_.results;
  const double link = ctx_.device.properties().link_gbps;
  const std::string sizes_text = fmt::format("sizes >= {}", format_bytes(kTargetMinBytes));
  if (link > 0) {
    if (const auto w = worst_ratio(kOneWay, kStaged, "", link))
      r.add_summary({"one-way hdsm staged / modelled link (>= 8 MiB, worst)", w->first, "x",
                     fmt::format("{}: target >= 0.85 (a rate ratio); worst at {}, modelled link {} GB/s",
                                 verdict(w->first >= 0.85), format_bytes(w->second), link)});
    if (const auto m = mean_ratio(kOneWay, kPeer, "", link))
      r.add_summary({"one-way hdsm peer / modelled link (>= 8 MiB)", *m, "x",
                     fmt::format("{}: target ~1 (a rate ratio); mean over {}",
                                 verdict(*m >= 0.9 && *m <= 1.1), sizes_text)});
  } else {
    r.add_note(
        fmt::format("{} has no modelled link rate (unthrottled or unknown): the link ratios are omitted",
                    ctx_.device.name()));
  }
  if (const auto w = worst_ratio(kOneWay, kStaged, kNaive))
    r.add_summary({"one-way hdsm staged / naive (>= 8 MiB, worst)", w->first, "x",
                   fmt::format("{}: target >= 1.3 (a rate ratio); worst at {}", verdict(w->first >= 1.3),
                               format_bytes(w->second))});
  if (const auto m = mean_ratio(kTwoWay, kPeer, kStaged))
    r.add_summary({"two-way hdsm peer / two-way hdsm staged (>= 8 MiB)", *m, "x",
                   fmt::format("a rate ratio; seed Fig. 7: ~2; mean over {}", sizes_text)});
  if (const auto m = mean_ratio(kOneWay, kStaged, kDouble))
    r.add_summary({"one-way hdsm staged / hand-written double-buffered (>= 8 MiB)", *m, "x",
                   fmt::format("a rate ratio; mean over {}", sizes_text)});
  if (const auto m = mean_ratio(kTwoWay, kStaged, kDouble))
    r.add_summary({"two-way hdsm staged / hand-written double-buffered (>= 8 MiB)", *m, "x",
                   fmt::format("a rate ratio; mean over {}", sizes_text)});
}

}  // namespace hdsm::tool::hpe
