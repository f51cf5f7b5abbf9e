// The `hpe` suite: multi-device data exchange (seed 003 §5.2, §5.3). Fig. 7: one-way and two-way
// inter-device throughput from 256 KiB to 256 MiB, device A to device B, for
//   naive            D2H into a pageable host buffer, then H2D from it: two blocking copies
//   pinned           the same through one pinned buffer of the whole size
//   double-buffered  hand-written: two pinned 2 MiB chunks, the D2H of chunk i + 1 overlapping the
//                    H2D of chunk i (seed §2.4), host waits on events for the chunks
//   hdsm staged      Runtime::memcpy between objects on two devices without peer access
//   hdsm peer        the same on a peer group
// Two-way runs A -> B and B -> A at once, one host thread each (as the seed's one thread per GPU),
// and reports the aggregate rate. The sources are device-resident (their host copies invalid), so
// hdsm moves whole blocks device-side. On sim the suite makes two-device runtimes of its own, one
// without peer groups and one with; on other backends it needs two devices of the chosen device's
// backend and runs the hdsm series their peer access allows. Every version's result is checked
// after its timing. Fig. 8 (CPU thread wait time) follows, see lock_wait_figure.
//
// Figs. 9 and 10: the multi-device apps (apps/multi.hpp: stencil, fft, mergesort) on 2 and 4
// devices, the explicit-copy version (host-staged exchange, seed Listing 1) and the hdsm version
// (seed Listing 4) with and without peer groups: the speedup over the explicit version on one device
// and the share of the run its host threads spent waiting for exchanges. Each configuration runs a
// few times (the median counts); its output is checked against the serial reference first. The
// target rows compare each hdsm series with the hand-written version (the 1.05x).
#pragma once

#include "apps/multi.hpp"
#include "common.hpp"
#include "device_memory.hpp"
#include "measure.hpp"
#include "suite.hpp"

#include <hdsm/hdsm.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

namespace hdsm::tool::hpe {

inline constexpr std::size_t kChunk = 2 * MiB;  // the seed's double-buffering chunk
inline constexpr std::size_t kTargetMinBytes = 8 * MiB;

inline const std::string kOneWay = "one-way", kTwoWay = "two-way";
inline const std::string kExplicit = "explicit";
inline constexpr double kAppTarget = 1.05;  // the bound on hdsm time / hand-written time
inline const std::string kNaive = "naive", kPinned = "pinned", kDouble = "double-buffered",
                         kStaged = "hdsm staged", kPeer = "hdsm peer";

inline std::vector<std::size_t> sizes(bool quick) {
  if (quick) return {256 * KiB, 1 * MiB, 8 * MiB, 32 * MiB};
  std::vector<std::size_t> out;
  for (std::size_t bytes = 256 * KiB; bytes <= 256 * MiB; bytes *= 2) out.push_back(bytes);
  return out;
}

inline std::vector<unsigned char> pattern(std::size_t n, unsigned salt) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 2654435761u + salt) >> 9);
  return v;
}

inline void expect_equal(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want,
                         const std::string& who) {
  if (got == want) return;
  const auto at = std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin();
  throw std::runtime_error(fmt::format("{} delivered wrong data: first difference at byte {}", who, at));
}

/// One direction of the hand-written versions: a source buffer on one device, a destination on the
/// other, a queue on each and the host buffers each version stages through.
class ExplicitLane {
 public:
  ExplicitLane(Device& from, Device& to, std::size_t bytes, unsigned salt)
      : bytes_(bytes),
        src_(from, bytes),
        dst_(to, bytes),
        from_queue_(from.create_queue()),
        to_queue_(to.create_queue()),
        pageable_(bytes),
        pinned_(from, bytes),
        chunks_(from, 2 * kChunk),
        data_(pattern(bytes, salt)) {
    from_queue_->copy_to_device(src_.get(), 0, data_.data(), bytes);
    from_queue_->synchronize();
  }

  void naive() { through(pageable_.data()); }
  void pinned() { through(pinned_.get()); }
  void double_buffered() {
    Event d2h[2], h2d[2];
    const std::size_t chunks = (bytes_ + kChunk - 1) / kChunk;
    const auto up = [&](std::size_t i) {  // H2D of chunk i, once its D2H is done
      const std::size_t at = i * kChunk, c = std::min(kChunk, bytes_ - at);
      d2h[i % 2].wait();
      to_queue_->copy_to_device(dst_.get(), at, chunks_.get() + (i % 2) * kChunk, c);
      h2d[i % 2] = to_queue_->record();
    };
    for (std::size_t i = 0; i < chunks; ++i) {
      const std::size_t at = i * kChunk, c = std::min(kChunk, bytes_ - at);
      h2d[i % 2].wait();  // the chunk's previous H2D has read it
      from_queue_->copy_to_host(chunks_.get() + (i % 2) * kChunk, src_.get(), at, c);
      d2h[i % 2] = from_queue_->record();
      if (i > 0) up(i - 1);
    }
    up(chunks - 1);
    to_queue_->synchronize();
  }

  std::size_t chunks() const { return (bytes_ + kChunk - 1) / kChunk; }
  /// Chunk i (of kChunk bytes) of the source into `host`, waited for.
  void chunk_to_host(std::byte* host, std::size_t i) {
    from_queue_->copy_to_host(host, src_.get(), i * kChunk, std::min(kChunk, bytes_ - i * kChunk));
    from_queue_->synchronize();
  }
  /// Chunk i of the destination from `host`, waited for.
  void chunk_to_device(const std::byte* host, std::size_t i) {
    to_queue_->copy_to_device(dst_.get(), i * kChunk, host, std::min(kChunk, bytes_ - i * kChunk));
    to_queue_->synchronize();
  }

  void clear() {
    to_queue_->fill(dst_.get(), 0, bytes_, 0);
    to_queue_->synchronize();
  }
  void check(const std::string& who) {
    std::vector<unsigned char> back(bytes_);
    to_queue_->copy_to_host(back.data(), dst_.get(), 0, bytes_);
    to_queue_->synchronize();
    expect_equal(back, data_, who);
  }

 private:
  void through(std::byte* host) {
    from_queue_->copy_to_host(host, src_.get(), 0, bytes_);
    from_queue_->synchronize();
    to_queue_->copy_to_device(dst_.get(), 0, host, bytes_);
    to_queue_->synchronize();
  }

  std::size_t bytes_;
  DeviceMemory src_, dst_;
  std::unique_ptr<Queue> from_queue_, to_queue_;
  std::vector<std::byte> pageable_;
  PinnedMemory pinned_, chunks_;
  std::vector<unsigned char> data_;
};

/// One direction of the hdsm versions: two shared objects of a runtime on different devices, the
/// source device-resident.
class SharedLane {
 public:
  SharedLane(Runtime& rt, unsigned from, unsigned to, std::size_t bytes, unsigned salt)
      : rt_(rt), bytes_(bytes), data_(pattern(bytes, salt)) {
    src_ = rt.alloc(bytes, static_cast<int>(from));
    dst_ = rt.alloc(bytes, static_cast<int>(to));
    rt.memcpy(src_, data_.data(), bytes);  // whole blocks: the device copy holds them
  }
  ~SharedLane() {
    rt_.free(src_);
    rt_.free(dst_);
  }
  SharedLane(const SharedLane&) = delete;
  SharedLane& operator=(const SharedLane&) = delete;

  void copy() { rt_.memcpy(dst_, src_, bytes_); }
  void clear() { rt_.memset(dst_, 0, bytes_); }
  void check(const std::string& who) {
    std::vector<unsigned char> back(bytes_);
    rt_.memcpy(back.data(), dst_, bytes_);
    expect_equal(back, data_, who);
  }

 private:
  Runtime& rt_;
  std::size_t bytes_;
  std::vector<unsigned char> data_;
  void* src_ = nullptr;
  void* dst_ = nullptr;
};

/// Fig. 8 on devices a and b of `rt` (a runtime whose copies between them are staged).
void lock_wait_figure(SuiteContext& ctx, Runtime& rt, unsigned a, unsigned b);

/// The suite: its runtimes and devices, and one part per figure (suite_hpe.cpp, hpe_fig7.cpp,
/// hpe_fig9_10.cpp; Fig. 8 is lock_wait_figure in hpe_fig8.cpp).
class HpeSuite {
 public:
  explicit HpeSuite(SuiteContext& context) : ctx_(context) {}
  void run();

 private:
  // suite_hpe.cpp: the results' columns and plots, the runtimes, timing.
  void declare_results();
  /// The runtimes of the hdsm series and the two devices every series uses.
  void make_runtimes();
  double time(const std::string& what, const std::function<void()>& once);
  /// Runs `one(lane)` on every lane at once (one thread per lane beyond the first).
  template <class Lane>
  static void each_at_once(std::vector<std::unique_ptr<Lane>>& lanes, void (*one)(Lane&)) {
    std::vector<std::thread> others;
    for (std::size_t i = 1; i < lanes.size(); ++i) others.emplace_back([&, i] { one(*lanes[i]); });
    one(*lanes[0]);
    for (auto& t : others) t.join();
  }

  // hpe_fig7.cpp: inter-device throughput.
  void add(const std::string& direction, const std::string& version, std::size_t bytes, double seconds);
  void explicit_versions(const std::string& direction, std::size_t bytes);
  void hdsm_version(const std::string& direction, const std::string& version, Runtime& rt, std::size_t bytes);
  /// GB/s of a series at each size of at least kTargetMinBytes.
  std::vector<std::pair<std::size_t, double>> large(const std::string& direction,
                                                    const std::string& version) const;
  /// numerator / denominator at each size of at least kTargetMinBytes that both measured (the
  /// denominator a fixed rate when `fixed` > 0).
  std::vector<std::pair<std::size_t, double>> ratios(const std::string& direction,
                                                     const std::string& numerator,
                                                     const std::string& denominator, double fixed = 0) const;
  /// The smallest ratio and its size.
  std::optional<std::pair<double, std::size_t>> worst_ratio(const std::string& direction,
                                                            const std::string& numerator,
                                                            const std::string& denominator,
                                                            double fixed = 0) const;
  std::optional<double> mean_ratio(const std::string& direction, const std::string& numerator,
                                   const std::string& denominator, double fixed = 0) const;
  void summarize();

  // hpe_fig9_10.cpp: the multi-device apps.
  apps::Scale app_scale() const { return ctx_.quick ? apps::Scale::quick : apps::Scale::full; }
  struct AppTiming {
    double seconds = 0;
    double transfer = 0;  // share of the run spent waiting for exchanges
  };
  /// One configuration that time_apps measures.
  struct Contender {
    std::string what;
    std::function<apps::MultiRun()> once;
  };
  /// The devices (runtime indices) the apps run on: those of the chosen device's backend, at most 4.
  std::vector<unsigned> app_devices() const;
  std::vector<unsigned> device_counts() const;
  /// The measurements the apps' figures take (for the progress counter).
  std::size_t app_steps() const;
  /// Times the contenders side by side: each runs once with its output checked against `want`, not
  /// timed; then the timed runs go round robin, one of each per round, at least kMinRuns rounds and
  /// more, up to kMaxRuns, until they took a set time per contender (short runs vary most on a busy
  /// machine). Load that comes and goes thus weighs on every contender alike; the medians count. The
  /// target is a worst case over 36 ratios, so each median needs enough runs that its own noise stays
  /// well inside the 5 % margin: with 3 runs of 120 ms a ratio of equal versions varied by +-6 %.
  std::vector<AppTiming> time_apps(const std::vector<Contender>& contenders, const apps::Output& want,
                                   double tolerance);
  void add_app(const apps::MultiApp& app, const std::string& version, unsigned devices, std::size_t size,
               const AppTiming& t, double base_seconds);
  void app_figures(const apps::MultiApp& app);
  void app_summary(const apps::MultiApp& app,
                   const std::map<std::string, std::map<std::pair<unsigned, std::size_t>, AppTiming>>& timing,
                   std::size_t largest, const std::vector<std::pair<std::string, Runtime*>>& shared);

  SuiteContext& ctx_;
  std::unique_ptr<Runtime> staged_rt_, peer_rt_;
  Runtime* explicit_rt_ = nullptr;
  unsigned a_ = 0, b_ = 1;
  // direction -> version -> bytes -> GB/s
  std::map<std::string, std::map<std::string, std::map<std::size_t, double>>> gbps_;
};

}  // namespace hdsm::tool::hpe
