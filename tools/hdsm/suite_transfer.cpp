// The `transfer` suite: copy bandwidth against size for every route a device has (host memcpy as
// the reference, pinned and pageable H2D/D2H, on-device, peer, and both directions at once).
#include "common.hpp"
#include "device_memory.hpp"
#include "measure.hpp"
#include "suite.hpp"

#include <hdsm/hdsm.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

namespace hdsm::tool {
namespace {

constexpr std::size_t kSummaryMinBytes = 8 * MiB;

std::vector<std::size_t> transfer_sizes(bool quick) {
  if (quick) return {4 * KiB, 64 * KiB, 1 * MiB, 8 * MiB, 64 * MiB};
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = 4 * KiB; bytes <= 256 * MiB; bytes *= 2) sizes.push_back(bytes);
  return sizes;
}

/// Bytes that are neither constant nor periodic at any power-of-two stride, so a copy that lands
/// at the wrong offset or copies the wrong length shows.
void fill_pattern(std::byte* data, std::size_t bytes) {
  std::uint64_t state = 0x9E3779B97F4A7C15ull;
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::memcpy(data + i, &state, 8);
  }
  for (; i < bytes; ++i) data[i] = static_cast<std::byte>(i * 131 + 7);
}

/// One line of the plot: how to time it and how to check that it moved the right bytes.
struct Series {
  std::string name;
  double bytes_per_copy = 1;                 // two-way moves 2 x size per repetition
  std::function<void(std::size_t)> prepare;  // before timing: clear the destination
  std::function<void(std::size_t bytes, std::size_t reps)> copy;
  std::function<void(std::size_t)> verify;  // after timing: throws when the data is wrong
};

class TransferSuite {
 public:
  explicit TransferSuite(SuiteContext& context) : ctx_(context), device_(context.device) {}

  void run() {
    declare_results();
    choose_sizes();
    find_peer();
    allocate();
    const std::vector<Series> series = make_series();

    ctx_.progress.set_total(series.size() * sizes_.size());
    const MeasureOptions options{ctx_.quick ? 0.015 : 0.050, 3};
    for (const Series& s : series) {
      for (std::size_t bytes : sizes_) {
        ctx_.progress.start(fmt::format("{} {}", s.name, format_bytes(bytes)));
        if (s.prepare) s.prepare(bytes);
        const Measurement m = measure([&](std::size_t reps) { s.copy(bytes, reps); }, options);
        s.verify(bytes);
        const double gbps = s.bytes_per_copy * static_cast<double>(bytes) / m.seconds_per_rep / 1e9;
        ctx_.results.add_row({{"series", s.name},
                              {"bytes", static_cast<std::int64_t>(bytes)},
                              {"seconds", m.seconds_per_rep},
                              {"GBps", gbps}});
        gbps_[s.name][bytes] = gbps;
        ctx_.progress.finish(format_gbps(gbps));
      }
    }
    summarize();
  }

 private:
  void declare_results() {
    ctx_.results.set_columns({"series", "bytes", "seconds", "GBps"});
    Plot plot;
    plot.id = "bandwidth";
    plot.title =
        fmt::format("Copy bandwidth on {} ({})", device_.name(), to_string(device_.properties().backend));
    plot.x = "bytes";
    plot.y = "GBps";
    plot.series = "series";
    plot.x_label = "copy size";
    plot.y_label = "GB/s";
    plot.log_x = true;
    plot.log_y = true;  // host memcpy in cache and D2D run far above the link rates
    plot.x_format = ValueFormat::bytes;
    ctx_.results.add_plot(plot);
  }

  /// Two device buffers of the largest size must fit next to what is already allocated.
  void choose_sizes() {
    const DeviceProperties& p = device_.properties();
    const std::size_t free_bytes = p.memory_bytes - std::min(p.memory_bytes, device_.memory_used());
    for (std::size_t bytes : transfer_sizes(ctx_.quick)) {
      if (2 * bytes <= free_bytes)
        sizes_.push_back(bytes);
      else
        skipped_.push_back(bytes);
    }
    if (sizes_.empty())
      throw std::runtime_error(fmt::format("{} has {} free; the transfer suite needs at least 2 x {}", p.name,
                                           format_bytes(free_bytes),
                                           format_bytes(transfer_sizes(true).front())));
    if (!skipped_.empty()) {
      const std::string range =
          skipped_.size() == 1
              ? fmt::format("size {}", format_bytes(skipped_.front()))
              : fmt::format("sizes {} to {}", format_bytes(skipped_.front()), format_bytes(skipped_.back()));
      const std::string note =
          fmt::format("{} skipped: {} has {} free and two buffers of each size are needed", range, p.name,
                      format_bytes(free_bytes));
      ctx_.results.add_note(note);
      ctx_.progress.note(note);
    }
  }

  /// A device that can read this device's memory directly and has room for the largest size.
  void find_peer() {
    for (Device* other : ctx_.runtime.devices()) {
      if (other == &device_ || !other->can_access_peer(device_)) continue;
      const DeviceProperties& p = other->properties();
      if (p.memory_bytes - std::min(p.memory_bytes, other->memory_used()) < sizes_.back()) continue;
      peer_ = other;
      const std::string note =
          fmt::format("peer: {} copies from {} with copy_from_peer", p.name, device_.name());
      ctx_.results.add_note(note);
      return;
    }
    const int group = device_.properties().peer_group;
    const std::string note =
        fmt::format("peer: skipped, no other device can copy directly from {} ({})", device_.name(),
                    group >= 0 ? fmt::format("peer group {}", group) : std::string("in no peer group"));
    ctx_.results.add_note(note);
    ctx_.progress.note(note);
  }

  void allocate() {
    const std::size_t max = sizes_.back();
    host_src_ = std::make_unique<std::byte[]>(max);
    host_dst_ = std::make_unique<std::byte[]>(max);  // value-initialised: every page touched
    fill_pattern(host_src_.get(), max);
    pinned_src_.emplace(device_, max);
    pinned_dst_.emplace(device_, max);
    std::memcpy(pinned_src_->get(), host_src_.get(), max);
    std::memset(pinned_dst_->get(), 0, max);
    dev_a_.emplace(device_, max);
    dev_b_.emplace(device_, max);
    queue_ = device_.create_queue();
    second_queue_ = device_.create_queue();
    if (peer_ != nullptr) {
      peer_buffer_.emplace(*peer_, max);
      peer_queue_ = peer_->create_queue();
    }
  }

  // The lambdas capture plain pointers and handles by value; the buffers and queues they name live
  // in this object for the whole run.
  std::vector<Series> make_series() {
    std::vector<Series> list;
    std::byte* const hsrc = host_src_.get();
    std::byte* const hdst = host_dst_.get();
    std::byte* const psrc = pinned_src_->get();
    std::byte* const pdst = pinned_dst_->get();
    const DeviceBuffer a = dev_a_->get(), b = dev_b_->get();
    Queue* const q = queue_.get();
    Queue* const q2 = second_queue_.get();

    list.push_back({"memcpy", 1, [=](std::size_t n) { std::memset(hdst, 0, n); },
                    [=](std::size_t n, std::size_t reps) {
                      for (std::size_t r = 0; r < reps; ++r) {
                        std::memcpy(hdst, hsrc, n);
                        asm volatile("" ::: "memory");  // keep every repetition
                      }
                    },
                    [=, this](std::size_t n) { check("memcpy", hdst, n); }});

    auto h2d = [=, this](const std::string& name, const std::byte* src) {
      return Series{name, 1, [=, this](std::size_t n) { clear(*q, a, n); },
                    [=](std::size_t n, std::size_t reps) {
                      for (std::size_t r = 0; r < reps; ++r) q->copy_to_device(a, 0, src, n);
                      q->synchronize();
                    },
                    [=, this](std::size_t n) { check_device(name, *q, a, n); }};
    };
    list.push_back(h2d("H2D pinned", psrc));
    list.push_back(h2d("H2D pageable", hsrc));

    auto d2h = [=, this](const std::string& name, std::byte* dst) {
      return Series{name, 1,
                    [=, this](std::size_t n) {
                      upload(*q, a, n);
                      std::memset(dst, 0, n);
                    },
                    [=](std::size_t n, std::size_t reps) {
                      for (std::size_t r = 0; r < reps; ++r) q->copy_to_host(dst, a, 0, n);
                      q->synchronize();
                    },
                    [=, this](std::size_t n) { check(name, dst, n); }};
    };
    list.push_back(d2h("D2H pinned", pdst));
    list.push_back(d2h("D2H pageable", hdst));

    list.push_back({"D2D", 1,
                    [=, this](std::size_t n) {
                      upload(*q, a, n);
                      clear(*q, b, n);
                    },
                    [=](std::size_t n, std::size_t reps) {
                      for (std::size_t r = 0; r < reps; ++r) q->copy_on_device(b, 0, a, 0, n);
                      q->synchronize();
                    },
                    [=, this](std::size_t n) { check_device("D2D", *q, b, n); }});

    if (peer_ != nullptr) {
      Queue* const pq = peer_queue_.get();
      Device* const src_device = &device_;
      const DeviceBuffer p = peer_buffer_->get();
      list.push_back({"peer", 1,
                      [=, this](std::size_t n) {
                        upload(*q, a, n);
                        clear(*pq, p, n);
                      },
                      [=](std::size_t n, std::size_t reps) {
                        for (std::size_t r = 0; r < reps; ++r) pq->copy_from_peer(p, 0, *src_device, a, 0, n);
                        pq->synchronize();
                      },
                      [=, this](std::size_t n) { check_device("peer", *pq, p, n); }});
    }

    // H2D into b on one queue while D2H from a runs on another: both copy engines busy.
    list.push_back({"two-way pinned", 2,
                    [=, this](std::size_t n) {
                      upload(*q, a, n);
                      clear(*q, b, n);
                      std::memset(pdst, 0, n);
                    },
                    [=](std::size_t n, std::size_t reps) {
                      for (std::size_t r = 0; r < reps; ++r) {
                        q->copy_to_device(b, 0, psrc, n);
                        q2->copy_to_host(pdst, a, 0, n);
                      }
                      q->synchronize();
                      q2->synchronize();
                    },
                    [=, this](std::size_t n) {
                      check("two-way pinned (D2H half)", pdst, n);
                      check_device("two-way pinned (H2D half)", *q, b, n);
                    }});
    return list;
  }

  void clear(Queue& queue, DeviceBuffer buffer, std::size_t bytes) {
    queue.fill(buffer, 0, bytes, 0);
    queue.synchronize();
  }

  void upload(Queue& queue, DeviceBuffer buffer, std::size_t bytes) {
    queue.copy_to_device(buffer, 0, host_src_.get(), bytes);
    queue.synchronize();
  }

  /// Read a device buffer back into the pageable destination and compare it with the pattern.
  void check_device(const std::string& series, Queue& queue, DeviceBuffer buffer, std::size_t bytes) {
    std::memset(host_dst_.get(), 0, bytes);
    queue.copy_to_host(host_dst_.get(), buffer, 0, bytes);
    queue.synchronize();
    check(series, host_dst_.get(), bytes);
  }

  void check(const std::string& series, const std::byte* data, std::size_t bytes) const {
    if (std::memcmp(data, host_src_.get(), bytes) == 0) return;
    std::size_t at = 0;
    while (data[at] == host_src_[at]) ++at;
    throw std::runtime_error(fmt::format(
        "{} of {} on {} delivered wrong data: first difference at byte {} (expected 0x{:02x}, got 0x{:02x})",
        series, format_bytes(bytes), device_.name(), at, static_cast<unsigned>(host_src_[at]),
        static_cast<unsigned>(data[at])));
  }

  /// Mean GB/s of a series over the sizes the summary covers; nullopt if it was not measured.
  std::optional<double> large(const std::string& series) const {
    const auto it = gbps_.find(series);
    if (it == gbps_.end()) return std::nullopt;
    double sum = 0;
    int count = 0;
    for (const auto& [bytes, gbps] : it->second) {
      if (bytes < kSummaryMinBytes) continue;
      sum += gbps;
      ++count;
    }
    if (count == 0) return std::nullopt;
    return sum / count;
  }

  void ratio(std::string metric, double numerator, double denominator, std::string detail) {
    ctx_.results.add_summary({std::move(metric), numerator / denominator, "x", std::move(detail)});
  }

  void summarize() {
    Results& results = ctx_.results;
    std::vector<std::size_t> covered;
    for (std::size_t bytes : sizes_)
      if (bytes >= kSummaryMinBytes) covered.push_back(bytes);
    if (covered.empty()) {
      results.add_note(fmt::format("no size of at least {} fits on {}: no summary",
                                   format_bytes(kSummaryMinBytes), device_.name()));
      return;
    }
    results.add_note(fmt::format("summary ratios use the mean GB/s of the sizes {} to {}",
                                 format_bytes(covered.front()), format_bytes(covered.back())));

    const DeviceProperties& p = device_.properties();
    const auto memcpy_rate = large("memcpy"), h2d = large("H2D pinned"), h2d_pageable = large("H2D pageable"),
               d2h = large("D2H pinned"), two_way = large("two-way pinned"), peer = large("peer");
    if (h2d && memcpy_rate)
      ratio("H2D pinned / memcpy", *h2d, *memcpy_rate,
            fmt::format("{} vs host memcpy {}", format_gbps(*h2d), format_gbps(*memcpy_rate)));
    if (h2d_pageable && h2d)
      ratio("H2D pageable / pinned", *h2d_pageable, *h2d,
            fmt::format("{} vs {} (pageable copies go through a bounce buffer)", format_gbps(*h2d_pageable),
                        format_gbps(*h2d)));
    if (p.link_gbps > 0) {
      if (h2d)
        ratio("H2D pinned / link", *h2d, p.link_gbps,
              fmt::format("measured {} vs configured {} GB/s", format_gbps(*h2d), p.link_gbps));
      if (d2h)
        ratio("D2H pinned / link", *d2h, p.link_gbps,
              fmt::format("measured {} vs configured {} GB/s", format_gbps(*d2h), p.link_gbps));
    } else {
      results.add_note(fmt::format(
          "{} has no configured link rate (0: unthrottled): measured/link ratios omitted", device_.name()));
    }
    if (two_way && h2d && d2h) {
      const double one_way = (*h2d + *d2h) / 2;
      ratio("two-way / one-way", *two_way, one_way,
            fmt::format("{} aggregate vs {} mean of pinned H2D and D2H; {} copy engine{} (ideal {}x)",
                        format_gbps(*two_way), format_gbps(one_way), p.copy_engines,
                        p.copy_engines == 1 ? "" : "s", p.copy_engines >= 2 ? 2 : 1));
    }
    if (peer) {
      if (p.link_gbps > 0)
        ratio("peer / link", *peer, p.link_gbps,
              fmt::format("{} -> {} {} vs configured link {} GB/s", device_.name(), peer_->name(),
                          format_gbps(*peer), p.link_gbps));
      else if (h2d)
        ratio("peer / H2D pinned", *peer, *h2d,
              fmt::format("{} -> {} {} vs measured H2D {} (no configured link rate)", device_.name(),
                          peer_->name(), format_gbps(*peer), format_gbps(*h2d)));
    }
  }

  SuiteContext& ctx_;
  Device& device_;
  Device* peer_ = nullptr;
  std::vector<std::size_t> sizes_, skipped_;
  std::unique_ptr<std::byte[]> host_src_, host_dst_;
  std::optional<PinnedMemory> pinned_src_, pinned_dst_;
  std::optional<DeviceMemory> dev_a_, dev_b_, peer_buffer_;
  std::unique_ptr<Queue> queue_, second_queue_, peer_queue_;
  std::map<std::string, std::map<std::size_t, double>> gbps_;
};

void run_transfer(SuiteContext& context) { TransferSuite(context).run(); }

}  // namespace

Suite transfer_suite() {
  return {"transfer",
          "Copy bandwidth against size: host memcpy, pinned and pageable H2D/D2H, D2D, peer, both directions "
          "at once",
          run_transfer};
}

}  // namespace hdsm::tool
