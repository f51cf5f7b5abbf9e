#include "transfer/plan.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
#include <stdexcept>

namespace hdsm::transfer {

namespace {

constexpr double kBytesPerUsPerGbps = 1e3;  // 1 GB/s = 1e9 B/s = 1e3 B/us

double rate(double gbps, const Topology& t) { return (gbps > 0 ? gbps : t.host_gbps) * kBytesPerUsPerGbps; }

double peer_rate(const Topology& t, unsigned src, unsigned dst) {
  if (t.peer_gbps > 0) return t.peer_gbps * kBytesPerUsPerGbps;
  return std::min(rate(t.devices[src].d2h_gbps, t), rate(t.devices[dst].h2d_gbps, t));
}

std::size_t pieces(std::size_t bytes, std::size_t piece) {
  return bytes == 0 ? 0 : (bytes + piece - 1) / piece;
}

/// One DMA of `bytes` over a link of `gbps` and `latency_us`. From or to pageable user memory it
/// goes through the driver's bounce buffer, one piece at a time, each a CPU copy and a transfer.
double dma_us(std::size_t bytes, double gbps, double latency_us, bool pageable, const Topology& t) {
  const auto n = static_cast<double>(bytes);
  if (!pageable) return t.step_us + latency_us + n / rate(gbps, t);
  return t.step_us + static_cast<double>(pieces(bytes, t.driver_bounce_bytes)) * latency_us +
         n / rate(gbps, t) + n / rate(0, t);
}

/// The model's duration of one step in microseconds.
double step_us(const Step& s, const CopyPlan& p, const Topology& t) {
  const auto n = static_cast<double>(s.bytes);
  const auto pageable = [&](Place place, const Endpoint& end) {
    return place != Place::slot && end.memory == Memory::pageable;
  };
  switch (s.op) {
    case Op::host_copy:
      return n / rate(0, t);
    case Op::on_device:
      return t.step_us + n / rate(0, t);
    case Op::from_peer:
      return t.step_us + std::max(t.devices[p.src.device].latency_us, t.devices[p.dst.device].latency_us) +
             n / peer_rate(t, p.src.device, p.dst.device);
    case Op::to_device: {
      const DeviceLink& d = t.devices[p.dst.device];
      return dma_us(s.bytes, d.h2d_gbps, d.latency_us, pageable(s.from, p.src), t);
    }
    case Op::to_host: {
      const DeviceLink& d = t.devices[p.src.device];
      return dma_us(s.bytes, d.d2h_gbps, d.latency_us, pageable(s.to, p.dst), t);
    }
  }
  return 0;
}

/// A single-step plan.
CopyPlan single(CopyRoute route, const Endpoint& src, const Endpoint& dst, std::size_t bytes, Step step) {
  step.bytes = bytes;
  CopyPlan p{.route = route, .src = src, .dst = dst, .bytes = bytes};
  if (bytes > 0) p.steps.push_back(step);
  return p;
}

/// Chunk sizes for a staged copy: all `chunk` bytes, the last one partial. (With stages of equal
/// speed a two-stage pipeline takes (bytes + largest chunk) / rate whatever the order of the chunk
/// sizes, so smaller first or last chunks would only add steps.)
std::vector<std::size_t> chunk_sizes(std::size_t bytes, std::size_t chunk) {
  std::vector<std::size_t> sizes;
  sizes.reserve(pieces(bytes, chunk));
  for (std::size_t at = 0; at < bytes; at += chunk) sizes.push_back(std::min(chunk, bytes - at));
  return sizes;
}

/// A staged plan over the given chunks: a producer step fills a slot from the source, a consumer step
/// empties it into the destination. Device producers run `buffers - 1` chunks ahead (they are only
/// enqueued); a host producer is followed at once by its consumer, so the CPU copies chunk i + 1
/// while the DMA of chunk i runs.
CopyPlan staged(const Endpoint& src, const Endpoint& dst, std::size_t bytes,
                const std::vector<std::size_t>& sizes, unsigned buffers) {
  const std::size_t k = sizes.size();
  const auto n = static_cast<unsigned>(std::min<std::size_t>(buffers, k));
  CopyPlan p{.route = CopyRoute::staged, .src = src, .dst = dst, .bytes = bytes, .buffers = n};
  p.chunk = *std::max_element(sizes.begin(), sizes.end());
  std::vector<std::size_t> offsets(k);
  for (std::size_t i = 1; i < k; ++i) offsets[i] = offsets[i - 1] + sizes[i - 1];
  const bool host_producer = !src.is_device();
  const auto producer = [&](std::size_t i) {
    const int slot = static_cast<int>(i % n);
    return host_producer
               ? Step{Op::host_copy, Lane::host, Place::source, Place::slot, offsets[i], sizes[i], slot}
               : Step{Op::to_host, Lane::source, Place::source, Place::slot, offsets[i], sizes[i], slot};
  };
  const auto consumer = [&](std::size_t i) {
    const int slot = static_cast<int>(i % n);
    return dst.is_device()
               ? Step{Op::to_device, Lane::destination, Place::slot, Place::destination,
                      offsets[i],    sizes[i],          slot}
               : Step{Op::host_copy, Lane::host, Place::slot, Place::destination, offsets[i], sizes[i], slot};
  };
  const std::size_t ahead = host_producer ? 0 : n - 1;
  p.steps.reserve(2 * k);
  for (std::size_t i = 0; i < ahead && i < k; ++i) p.steps.push_back(producer(i));
  for (std::size_t i = 0; i < k; ++i) {
    if (i + ahead < k) p.steps.push_back(producer(i + ahead));
    p.steps.push_back(consumer(i));
  }
  return p;
}

void check_endpoint(const Endpoint& e, const Topology& t, const char* which) {
  if (e.is_device() && e.device >= t.devices.size())
    throw std::invalid_argument(fmt::format("plan_copy: the {} is device {}, but the topology has {} devices",
                                            which, e.device, t.devices.size()));
}

}  // namespace

double model_cost_us(const CopyPlan& plan, const Topology& topology) {
  // Lanes run their steps in order; the host lane also issues every step, so a device step cannot
  // start before the host steps issued ahead of it have finished. A step using a slot waits for the
  // previous step that used it (the chunk it reads was written, or the chunk it overwrites was read).
  std::array<double, 3> lane_free{};
  std::vector<double> slot_free(plan.buffers, 0.0);
  double end = 0;
  for (const Step& s : plan.steps) {
    double start = lane_free[static_cast<int>(Lane::host)];
    if (s.lane != Lane::host) start = std::max(start, lane_free[static_cast<int>(s.lane)]);
    if (s.slot >= 0) start = std::max(start, slot_free[static_cast<std::size_t>(s.slot)]);
    const double finish = start + step_us(s, plan, topology);
    lane_free[static_cast<int>(s.lane)] = finish;
    if (s.slot >= 0) slot_free[static_cast<std::size_t>(s.slot)] = finish;
    end = std::max(end, finish);
  }
  return end + (plan.route == CopyRoute::staged ? topology.setup_us : 0.0);
}

CopyPlan plan_copy(const Endpoint& src, const Endpoint& dst, std::size_t bytes, const Topology& topology,
                   const Options& options) {
  check_endpoint(src, topology, "source");
  check_endpoint(dst, topology, "destination");
  const std::size_t max_chunk = std::max<std::size_t>(options.chunk_bytes, 1);
  const std::size_t min_chunk = std::clamp<std::size_t>(options.min_chunk_bytes, 1, max_chunk);
  const unsigned buffers = std::max(options.buffers, 1u);  // 0 stages only where nothing else can

  if (!src.is_device() && !dst.is_device())
    return single(CopyRoute::host, src, dst, bytes,
                  {Op::host_copy, Lane::host, Place::source, Place::destination});
  if (src.is_device() && dst.is_device() && src.device == dst.device)
    return single(CopyRoute::on_device, src, dst, bytes,
                  {Op::on_device, Lane::destination, Place::source, Place::destination});

  // The single-DMA candidate, if the two places allow one, then staging where it may pay.
  std::optional<CopyPlan> best;
  bool may_stage = true;  // two devices that cannot reach each other: staging is the only route
  if (!src.is_device()) {
    best = single(CopyRoute::direct, src, dst, bytes,
                  {Op::to_device, Lane::destination, Place::source, Place::destination});
    may_stage = src.memory == Memory::pageable;
  } else if (!dst.is_device()) {
    best = single(CopyRoute::direct, src, dst, bytes,
                  {Op::to_host, Lane::source, Place::source, Place::destination});
    may_stage = dst.memory == Memory::pageable;
  } else if (topology.can_peer(dst.device, src.device)) {
    best = single(CopyRoute::peer, src, dst, bytes,
                  {Op::from_peer, Lane::destination, Place::source, Place::destination});
  }
  if (bytes == 0) return best ? *best : CopyPlan{.route = CopyRoute::staged, .src = src, .dst = dst};
  if (best) best->cost_us = model_cost_us(*best, topology);
  if (!may_stage || (options.buffers == 0 && best)) return *best;

  std::size_t chunk = max_chunk;
  while (chunk / 2 >= bytes && chunk / 2 >= min_chunk) chunk /= 2;  // these are all one chunk
  for (;; chunk /= 2) {
    CopyPlan candidate = staged(src, dst, bytes, chunk_sizes(bytes, chunk), buffers);
    candidate.cost_us = model_cost_us(candidate, topology);
    if (!best || candidate.cost_us < best->cost_us) best = std::move(candidate);
    if (chunk / 2 < min_chunk) break;
  }
  return *best;
}

std::size_t CopyPlan::link_bytes() const {
  std::size_t n = 0;
  for (const Step& s : steps)
    if (s.op == Op::to_device || s.op == Op::to_host || s.op == Op::from_peer) n += s.bytes;
  return n;
}

std::string CopyPlan::describe() const {
  const auto end = [](const Endpoint& e) {
    switch (e.memory) {
      case Memory::pageable:
        return std::string("host");
      case Memory::pinned:
        return std::string("pinned host");
      case Memory::device:
        break;
    }
    return fmt::format("device {}", e.device);
  };
  std::string text = fmt::format("{} {} {} -> {}", to_string(route), format_bytes(bytes), end(src), end(dst));
  if (route == CopyRoute::staged) {
    std::size_t chunks = 0;
    for (const Step& s : steps) chunks += s.to == Place::slot ? 1 : 0;
    text += fmt::format(": {} chunk{} up to {}, {} buffer{}", chunks, chunks == 1 ? "" : "s",
                        format_bytes(chunk), buffers, buffers == 1 ? "" : "s");
  }
  return text;
}

const char* to_string(Op op) noexcept {
  switch (op) {
    case Op::host_copy:
      return "host copy";
    case Op::to_device:
      return "H2D";
    case Op::to_host:
      return "D2H";
    case Op::on_device:
      return "D2D";
    case Op::from_peer:
      return "peer";
  }
  return "?";
}

}  // namespace hdsm::transfer
