// The `hpe` suite's Fig. 8 (hpe.hpp): the time CPU threads wait to get at what they share.
#include "hpe.hpp"

namespace hdsm::tool::hpe {
namespace {

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
  ctx.results.add_row({{"figure", std::string("fig8")},
                       {"workload", direction},
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

}  // namespace

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
                          .where = {{"figure", "fig8"}, {"workload", direction}}});
  const std::vector<std::size_t> all = sizes(ctx.quick);
  const std::size_t first_row = ctx.results.rows().size();
  for (std::size_t bytes : all)
    for (const std::string& direction : {kOneWay, kTwoWay}) {
      locked_double_wait(ctx, rt, a, b, direction, bytes);
      hdsm_wait(ctx, rt, a, b, direction, bytes);
    }
  // Summary: the waits of both versions summed over the sizes of at least kTargetMinBytes.
  const Results& r = ctx.results;
  const std::size_t fig = r.column("figure"), dir = r.column("workload"), ver = r.column("version"),
                    size = r.column("bytes"), sec = r.column("seconds");
  for (const std::string& direction : {kOneWay, kTwoWay}) {
    double hdsm = 0, locked = 0;
    for (std::size_t i = first_row; i < r.rows().size(); ++i) {
      const auto& row = r.rows()[i];
      if (cell_text(row[fig]) != "fig8" || cell_text(row[dir]) != direction ||
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
      "Fig. 8 rows (figure fig8): seconds = total time all CPU threads waited per copy; hdsm counts "
      "waits on its enqueue locks (Stats::lock_wait_ns; the staging pool's back-pressure is not a lock and "
      "is "
      "not counted), the locked double-buffered copy the time its threads were blocked on its two buffers");
}
}  // namespace hdsm::tool::hpe
