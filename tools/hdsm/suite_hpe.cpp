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

namespace hdsm::tool {
namespace {

constexpr std::size_t kChunk = 2 * MiB;  // the seed's double-buffering chunk
constexpr std::size_t kTargetMinBytes = 8 * MiB;

const std::string kOneWay = "one-way", kTwoWay = "two-way";
const std::string kExplicit = "explicit";
constexpr double kAppTarget = 1.05;  // the bound on hdsm time / hand-written time
const std::string kNaive = "naive", kPinned = "pinned", kDouble = "double-buffered", kStaged = "hdsm staged",
                  kPeer = "hdsm peer";

std::vector<std::size_t> sizes(bool quick) {
  if (quick) return {256 * KiB, 1 * MiB, 8 * MiB, 32 * MiB};
  std::vector<std::size_t> out;
  for (std::size_t bytes = 256 * KiB; bytes <= 256 * MiB; bytes *= 2) out.push_back(bytes);
  return out;
}

std::vector<unsigned char> pattern(std::size_t n, unsigned salt) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 2654435761u + salt) >> 9);
  return v;
}

void expect_equal(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want,
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

// Seed 003 Fig. 8: the total time CPU threads wait to get at what they share, per copy, over sizes.
//   hdsm staged                Runtime::memcpy between objects on the two devices, one thread per
//                              direction: the waits on hdsm's enqueue locks (Stats::lock_wait_ns);
//                              no thread holds one while a transfer runs
//   double-buffered (locked)   hand-written: one thread per device; the source's thread copies each
//                              2 MiB chunk D2H into one of two pinned host buffers, the destination's
//                              thread copies it H2D from there; each buffer is under a lock held for
//                              the whole transfer into or out of it (the CUDA-base double-buffering
//                              of the seed): the time threads are blocked on those locks
// Rows: direction "one-way wait" / "two-way wait", seconds = total wait of all threads per copy.

constexpr const char* kWaitSuffix = " wait";
const std::string kLockedDouble = "double-buffered (locked)";

/// One of the two pinned buffers a locked double-buffered copy goes through.
struct LockedSlot {
  std::mutex mutex;
  std::condition_variable changed;
  bool full = false;
};

/// Locks `slot` once it is full (or empty), adding the time blocked to `waited` (no clock read
/// when the slot is free and ready).
std::unique_lock<std::mutex> take_slot(LockedSlot& slot, bool full, std::chrono::nanoseconds& waited) {
  std::unique_lock lock(slot.mutex, std::try_to_lock);
  if (lock.owns_lock() && slot.full == full) return lock;
  const auto begin = std::chrono::steady_clock::now();
  if (!lock.owns_lock()) lock.lock();
  slot.changed.wait(lock, [&] { return slot.full == full; });
  waited += std::chrono::steady_clock::now() - begin;
  return lock;
}

/// One direction of the locked double-buffered copy: the lane's source and destination, and two
/// pinned buffers of kChunk under locks.
class LockedLane {
 public:
  LockedLane(Device& from, Device& to, std::size_t bytes, unsigned salt)
      : lane_(from, to, bytes, salt), buffers_(from, 2 * kChunk) {}
  std::size_t chunks() const { return lane_.chunks(); }
  /// The source's thread: chunk i into its buffer, under the buffer's lock.
  void produce(std::size_t i, std::chrono::nanoseconds& waited) {
    LockedSlot& slot = slots_[i % 2];
    const auto lock = take_slot(slot, false, waited);
    lane_.chunk_to_host(buffers_.get() + (i % 2) * kChunk, i);
    slot.full = true;
    slot.changed.notify_all();
  }
  /// The destination's thread: chunk i out of its buffer, under the buffer's lock.
  void consume(std::size_t i, std::chrono::nanoseconds& waited) {
    LockedSlot& slot = slots_[i % 2];
    const auto lock = take_slot(slot, true, waited);
    lane_.chunk_to_device(buffers_.get() + (i % 2) * kChunk, i);
    slot.full = false;
    slot.changed.notify_all();
  }
  void clear() { lane_.clear(); }
  void check(const std::string& who) { lane_.check(who); }

 private:
  ExplicitLane lane_;
  PinnedMemory buffers_;
  LockedSlot slots_[2];
};

/// Copies per measurement: enough bytes to see the waits, a few copies at least.
std::size_t wait_reps(std::size_t bytes, bool quick) {
  const std::size_t target = quick ? 16 * MiB : 128 * MiB;
  return std::clamp<std::size_t>(target / bytes, quick ? 2 : 3, quick ? 8 : 32);
}

void add_wait_row(SuiteContext& ctx, const std::string& direction, const std::string& version,
                  std::size_t bytes, double wait_seconds, double copy_seconds) {
  const double moved = static_cast<double>(bytes) * (direction == kTwoWay ? 2 : 1);
  ctx.results.add_row({{"direction", direction + kWaitSuffix},
                       {"version", version},
                       {"bytes", static_cast<std::int64_t>(bytes)},
                       {"seconds", wait_seconds},
                       {"GBps", moved / copy_seconds / 1e9},
                       {"devices", std::int64_t{2}},
                       {"speedup", std::string()},
                       {"transfer_pct", std::string()}});
  ctx.progress.finish(fmt::format("{:.3f} ms waited per copy", wait_seconds * 1e3));
}

/// Locked double-buffering between devices a and b of `rt`: one thread per device; two-way runs
/// both directions, each thread producing its device's outgoing chunks and consuming its incoming.
void locked_double_wait(SuiteContext& ctx, Runtime& rt, unsigned a, unsigned b, const std::string& direction,
                        std::size_t bytes) {
  ctx.progress.start(fmt::format("{} wait {} {}", direction, kLockedDouble, format_bytes(bytes)));
  const bool two_way = direction == kTwoWay;
  std::chrono::nanoseconds waited{0};
  double copy_seconds = 0;
  const std::size_t reps = wait_reps(bytes, ctx.quick);
  LockedLane ab(rt.device(a), rt.device(b), bytes, 5);
  std::optional<LockedLane> ba;
  if (two_way) ba.emplace(rt.device(b), rt.device(a), bytes, 6);
  for (std::size_t r = 0; r < reps; ++r) {
    ab.clear();
    if (ba) ba->clear();
    std::chrono::nanoseconds waits[2]{};
    const auto begin = std::chrono::steady_clock::now();
    std::thread of_b([&] {  // device b's thread
      for (std::size_t i = 0; i < ab.chunks(); ++i) {
        if (ba) ba->produce(i, waits[1]);
        ab.consume(i, waits[1]);
      }
    });
    for (std::size_t i = 0; i < ab.chunks(); ++i) {  // device a's thread
      ab.produce(i, waits[0]);
      if (ba) ba->consume(i, waits[0]);
    }
    of_b.join();
    copy_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    waited += waits[0] + waits[1];
    ab.check(kLockedDouble);
    if (ba) ba->check(kLockedDouble);
  }
  const double per = static_cast<double>(reps);
  add_wait_row(ctx, direction, kLockedDouble, bytes, std::chrono::duration<double>(waited).count() / per,
               copy_seconds / per);
}

/// hdsm: one thread per direction copying with Runtime::memcpy; the waits hdsm counted.
void hdsm_wait(SuiteContext& ctx, Runtime& rt, unsigned a, unsigned b, const std::string& direction,
               std::size_t bytes) {
  ctx.progress.start(fmt::format("{} wait {} {}", direction, kStaged, format_bytes(bytes)));
  std::vector<std::unique_ptr<SharedLane>> lanes;
  lanes.push_back(std::make_unique<SharedLane>(rt, a, b, bytes, 7));
  if (direction == kTwoWay) lanes.push_back(std::make_unique<SharedLane>(rt, b, a, bytes, 8));
  const std::size_t reps = wait_reps(bytes, ctx.quick);
  const Stats before = rt.stats();
  const auto begin = std::chrono::steady_clock::now();
  std::vector<std::thread> others;
  for (std::size_t i = 1; i < lanes.size(); ++i)
    others.emplace_back([&, i] {
      for (std::size_t r = 0; r < reps; ++r) lanes[i]->copy();
    });
  for (std::size_t r = 0; r < reps; ++r) lanes[0]->copy();
  for (auto& t : others) t.join();
  const double copy_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  const double waited = static_cast<double>(rt.stats().lock_wait_ns - before.lock_wait_ns) / 1e9;
  for (auto& lane : lanes) lane->check(kStaged);
  const double per = static_cast<double>(reps);
  add_wait_row(ctx, direction, kStaged, bytes, waited / per, copy_seconds / per);
}

/// Fig. 8 on devices a and b of `rt` (a runtime whose copies between them are staged).
void lock_wait_figure(SuiteContext& ctx, Runtime& rt, unsigned a, unsigned b) {
  for (const std::string& direction : {kOneWay, kTwoWay})
    ctx.results.add_plot({.id = direction + "-wait",
                          .title = fmt::format("{} CPU thread wait time (seed 003 Fig. 8)", direction),
                          .x = "bytes",
                          .y = "seconds",
                          .series = "version",
                          .x_label = "bytes per direction",
                          .y_label = "seconds all threads waited per copy",
                          .log_x = true,
                          .log_y = false,
                          .x_format = ValueFormat::bytes,
                          .where_column = "direction",
                          .where_value = direction + kWaitSuffix});
  const std::vector<std::size_t> all = sizes(ctx.quick);
  ctx.progress.set_total(ctx.progress.total() + all.size() * 4);
  const std::size_t first_row = ctx.results.rows().size();
  for (std::size_t bytes : all)
    for (const std::string& direction : {kOneWay, kTwoWay}) {
      locked_double_wait(ctx, rt, a, b, direction, bytes);
      hdsm_wait(ctx, rt, a, b, direction, bytes);
    }
  // Summary: the waits of both versions summed over the sizes of at least kTargetMinBytes.
  const Results& r = ctx.results;
  const std::size_t dir = r.column("direction"), ver = r.column("version"), size = r.column("bytes"),
                    sec = r.column("seconds");
  for (const std::string& direction : {kOneWay, kTwoWay}) {
    double hdsm = 0, locked = 0;
    for (std::size_t i = first_row; i < r.rows().size(); ++i) {
      const auto& row = r.rows()[i];
      if (cell_text(row[dir]) != direction + kWaitSuffix ||
          cell_number(row[size]) < static_cast<double>(kTargetMinBytes))
        continue;
      (cell_text(row[ver]) == kStaged ? hdsm : locked) += cell_number(row[sec]);
    }
    if (locked > 0)
      ctx.results.add_summary(
          {fmt::format("{} CPU thread wait, hdsm staged / locked double-buffered (>= 8 MiB)", direction),
           hdsm / locked, "x",
           fmt::format("seed Fig. 8: below 1 for medium and large copies; {:.3f} ms vs {:.3f} ms", hdsm * 1e3,
                       locked * 1e3)});
  }
  ctx.results.add_note(
      "Fig. 8 rows (direction '... wait'): seconds = total time all CPU threads waited per copy; hdsm counts "
      "waits on its enqueue locks (Stats::lock_wait_ns; the staging pool's back-pressure is not a lock and "
      "is "
      "not counted), the locked double-buffered copy the time its threads were blocked on its two buffers");
}

class HpeSuite {
 public:
  explicit HpeSuite(SuiteContext& context) : ctx_(context) {}

  void run() {
    declare_results();
    make_runtimes();
    const std::vector<std::size_t> all = sizes(ctx_.quick);
    std::size_t series = 3 + (staged_rt_ ? 1 : 0) + (peer_rt_ ? 1 : 0);
    ctx_.progress.set_total(all.size() * 2 * series + app_steps());
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

 private:
  void declare_results() {
    // Fig. 7 rows: direction, version, bytes moved each way; Figs. 9/10 rows: the app as direction,
    // "<version> x<devices>", the data set's bytes, speedup and transfer share (empty for Fig. 7).
    ctx_.results.set_columns(
        {"direction", "version", "bytes", "seconds", "GBps", "devices", "speedup", "transfer_pct"});
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
                             .where_column = "direction",
                             .where_value = direction});
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
                               .where_column = "direction",
                               .where_value = name});
      }
  }

  /// The runtimes of the hdsm series and the two devices every series uses.
  void make_runtimes() {
    Config c = ctx_.runtime.config();
    c.set("HDSM_PROTOCOL", "rolling")
        .set("HDSM_SIM_POISON", "0")
        .set("HDSM_STATS", "0")
        .set("HDSM_TRACE", "");
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
      throw std::runtime_error(fmt::format("the hpe suite needs two {} devices; {} is the only one",
                                           to_string(p.backend), p.name));
    const bool peers =
        rt->device(b_).can_access_peer(rt->device(a_)) && rt->device(a_).can_access_peer(rt->device(b_));
    ctx_.results.add_note(fmt::format("{} <-> {}: {}", rt->device(a_).name(), rt->device(b_).name(),
                                      peers ? "peers: hdsm staged skipped" : "not peers: hdsm peer skipped"));
    (peers ? peer_rt_ : staged_rt_) = std::move(rt);
    explicit_rt_ = peers ? peer_rt_.get() : staged_rt_.get();
  }

  double time(const std::string& what, const std::function<void()>& once) {
    ctx_.progress.start(what);
    const MeasureOptions options{ctx_.quick ? 0.02 : 0.1, 3};
    return measure(
               [&](std::size_t reps) {
                 for (std::size_t r = 0; r < reps; ++r) once();
               },
               options)
        .seconds_per_rep;
  }

  /// Runs `one(lane)` on every lane at once (one thread per lane beyond the first).
  template <class Lane>
  static void each_at_once(std::vector<std::unique_ptr<Lane>>& lanes, void (*one)(Lane&)) {
    std::vector<std::thread> others;
    for (std::size_t i = 1; i < lanes.size(); ++i) others.emplace_back([&, i] { one(*lanes[i]); });
    one(*lanes[0]);
    for (auto& t : others) t.join();
  }

  void add(const std::string& direction, const std::string& version, std::size_t bytes, double seconds) {
    const double moved = static_cast<double>(bytes) * (direction == kTwoWay ? 2 : 1);
    const double gbps = moved / seconds / 1e9;
    ctx_.results.add_row({{"direction", direction},
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

  void explicit_versions(const std::string& direction, std::size_t bytes) {
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

  void hdsm_version(const std::string& direction, const std::string& version, Runtime& rt,
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

  /// GB/s of a series at each size of at least kTargetMinBytes.
  std::vector<std::pair<std::size_t, double>> large(const std::string& direction,
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

  /// numerator / denominator at each size of at least kTargetMinBytes that both measured (the
  /// denominator a fixed rate when `fixed` > 0).
  std::vector<std::pair<std::size_t, double>> ratios(const std::string& direction,
                                                     const std::string& numerator,
                                                     const std::string& denominator, double fixed = 0) const {
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

  /// The smallest ratio and its size.
  std::optional<std::pair<double, std::size_t>> worst_ratio(const std::string& direction,
                                                            const std::string& numerator,
                                                            const std::string& denominator,
                                                            double fixed = 0) const {
    const auto all = ratios(direction, numerator, denominator, fixed);
    if (all.empty()) return std::nullopt;
    const auto w = std::min_element(all.begin(), all.end(),
                                    [](const auto& x, const auto& y) { return x.second < y.second; });
    return std::pair{w->second, w->first};
  }

  std::optional<double> mean_ratio(const std::string& direction, const std::string& numerator,
                                   const std::string& denominator, double fixed = 0) const {
    const auto all = ratios(direction, numerator, denominator, fixed);
    if (all.empty()) return std::nullopt;
    double sum = 0;
    for (const auto& [bytes, r] : all) sum += r;
    return sum / static_cast<double>(all.size());
  }

  void summarize() {
    Results& r = ctx_.results;
    const double link = ctx_.device.properties().link_gbps;
    const std::string sizes_text = fmt::format("sizes >= {}", format_bytes(kTargetMinBytes));
    if (link > 0) {
      if (const auto w = worst_ratio(kOneWay, kStaged, "", link))
        r.add_summary({"one-way hdsm staged / modelled link (>= 8 MiB, worst)", w->first, "x",
                       fmt::format("target >= 0.85; worst at {}, modelled link {} GB/s",
                                   format_bytes(w->second), link)});
      if (const auto m = mean_ratio(kOneWay, kPeer, "", link))
        r.add_summary({"one-way hdsm peer / modelled link (>= 8 MiB)", *m, "x",
                       fmt::format("target ~1; mean over {}", sizes_text)});
    } else {
      r.add_note(
          fmt::format("{} has no modelled link rate (unthrottled or unknown): the link ratios are omitted",
                      ctx_.device.name()));
    }
    if (const auto w = worst_ratio(kOneWay, kStaged, kNaive))
      r.add_summary({"one-way hdsm staged / naive (>= 8 MiB, worst)", w->first, "x",
                     fmt::format("target >= 1.3; worst at {}", format_bytes(w->second))});
    if (const auto m = mean_ratio(kTwoWay, kPeer, kStaged))
      r.add_summary({"two-way hdsm peer / two-way hdsm staged (>= 8 MiB)", *m, "x",
                     fmt::format("seed Fig. 7: ~2; mean over {}", sizes_text)});
    if (const auto m = mean_ratio(kOneWay, kStaged, kDouble))
      r.add_summary({"one-way hdsm staged / hand-written double-buffered (>= 8 MiB)", *m, "x",
                     fmt::format("mean over {}", sizes_text)});
    if (const auto m = mean_ratio(kTwoWay, kStaged, kDouble))
      r.add_summary({"two-way hdsm staged / hand-written double-buffered (>= 8 MiB)", *m, "x",
                     fmt::format("mean over {}", sizes_text)});
  }

  // Figs. 9 and 10.

  /// The devices (runtime indices) the apps run on: those of the chosen device's backend, at most 4.
  std::vector<unsigned> app_devices() const {
    std::vector<unsigned> out;
    for (Device* d : explicit_rt_->devices())
      if (d->properties().backend == ctx_.device.properties().backend && out.size() < 4)
        out.push_back(d->properties().index);
    return out;
  }

  std::vector<unsigned> device_counts() const {
    std::vector<unsigned> out;
    for (unsigned count : {2u, 4u})
      if (count <= app_devices().size()) out.push_back(count);
    return out;
  }

  apps::Scale app_scale() const { return ctx_.quick ? apps::Scale::quick : apps::Scale::full; }

  /// The measurements the apps' figures take (for the progress counter).
  std::size_t app_steps() const {
    const std::size_t series = 1 + (staged_rt_ ? 1 : 0) + (peer_rt_ ? 1 : 0);
    std::size_t steps = 0;
    for (const apps::MultiApp& app : apps::multi_device_apps())
      steps += app.sizes(app_scale()).size() * (1 + device_counts().size() * series);
    return steps;
  }

  struct AppTiming {
    double seconds = 0;
    double transfer = 0;  // share of the run spent waiting for exchanges
  };

  /// One configuration that time_apps measures.
  struct Contender {
    std::string what;
    std::function<apps::MultiRun()> once;
  };

  /// Times the contenders side by side: each runs once with its output checked against `want`, not
  /// timed; then the timed runs go round robin, one of each per round, at least kMinRuns rounds and
  /// more, up to kMaxRuns, until they took a set time per contender (short runs vary most on a busy
  /// machine). Load that comes and goes thus weighs on every contender alike; the medians count. The
  /// target is a worst case over 36 ratios, so each median needs enough runs that its own noise stays
  /// well inside the 5 % margin: with 3 runs of 120 ms a ratio of equal versions varied by +-6 %.
  std::vector<AppTiming> time_apps(const std::vector<Contender>& contenders, const apps::Output& want,
                                   double tolerance) {
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
    for (std::size_t i = 0; i < contenders.size(); ++i)
      out.push_back({median(seconds[i]), median(shares[i])});
    return out;
  }

  void add_app(const apps::MultiApp& app, const std::string& version, unsigned devices, std::size_t size,
               const AppTiming& t, double base_seconds) {
    const std::size_t bytes = app.bytes(size);
    const double speedup = base_seconds / t.seconds;
    ctx_.results.add_row({{"direction", std::string(app.name)},
                          {"version", fmt::format("{} x{}", version, devices)},
                          {"bytes", static_cast<std::int64_t>(bytes)},
                          {"seconds", t.seconds},
                          {"GBps", static_cast<double>(bytes) / t.seconds / 1e9},
                          {"devices", static_cast<std::int64_t>(devices)},
                          {"speedup", speedup},
                          {"transfer_pct", 100 * t.transfer}});
    ctx_.progress.finish(fmt::format("{:.2f} ms, speedup {:.2f}x, {:.0f}% exchanging", 1e3 * t.seconds,
                                     speedup, 100 * t.transfer));
  }

  void app_figures(const apps::MultiApp& app) {
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
      ctx_.progress.start(base_label);
      const AppTiming base =
          time_apps({{base_label, [&] { return app.run_explicit(one, size); }}}, want, app.tolerance).front();
      add_app(app, kExplicit, 1, size, base, base.seconds);
      for (unsigned count : device_counts()) {
        const std::vector<unsigned> indices(all.begin(), all.begin() + count);
        std::vector<Device*> devices;
        for (unsigned i : indices) devices.push_back(&explicit_rt_->device(i));
        // The hand-written version and the hdsm ones at this count, timed side by side.
        std::vector<std::string> series{kExplicit};
        std::vector<Contender> contenders{
            {fmt::format("{} explicit x{}", label, count), [&] { return app.run_explicit(devices, size); }}};
        for (const auto& [name, rt] : shared) {
          series.push_back(name);
          contenders.push_back({fmt::format("{} {} x{}", label, name, count),
                                [&, rt = rt] { return app.run_hdsm(*rt, indices, size); }});
        }
        ctx_.progress.note(
            fmt::format("{} x{}: {}, one run of each per round", label, count, fmt::join(series, ", ")));
        const std::vector<AppTiming> timed = time_apps(contenders, want, app.tolerance);
        for (std::size_t i = 0; i < timed.size(); ++i) {
          ctx_.progress.start(contenders[i].what);
          add_app(app, series[i], count, size, timed[i], base.seconds);
          timing[series[i]][{count, size}] = timed[i];
        }
        timing["base"][{count, size}] = base;
      }
    }
    app_summary(app, timing, sizes.back(), shared);
  }

  void app_summary(const apps::MultiApp& app,
                   const std::map<std::string, std::map<std::pair<unsigned, std::size_t>, AppTiming>>& timing,
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
      r.add_summary(
          {fmt::format("target: {} {} time / explicit <= {} (worst)", app.name, series, kAppTarget), worst,
           "x", missed.empty() ? std::string("met") : fmt::format("missed: {}", fmt::join(missed, ", "))});
    }
  }

  SuiteContext& ctx_;
  std::unique_ptr<Runtime> staged_rt_, peer_rt_;
  Runtime* explicit_rt_ = nullptr;
  unsigned a_ = 0, b_ = 1;
  // direction -> version -> bytes -> GB/s
  std::map<std::string, std::map<std::string, std::map<std::size_t, double>>> gbps_;
};

}  // namespace

Suite hpe_suite() {
  return {"hpe",
          "seed 003 Figs. 7, 8, 9, 10: inter-device throughput and CPU thread wait time (hand-written vs "
          "hdsm); multi-device stencil, fft, mergesort (explicit vs hdsm)",
          [](SuiteContext& context) { HpeSuite(context).run(); }};
}

}  // namespace hdsm::tool
