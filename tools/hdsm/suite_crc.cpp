// The `crc` suite: seed 002's evaluation of centralized release consistency on the threads
// transport.
//   fig10  fetch and flush cost per page against the page size (128 B - 16 KiB) for the protocol
//          (a handshake with the home), read-only and single-writer pages (direct copies), and a
//          raw copy of the same bytes into a local area;
//   sync   lock acquire + release and barrier latency against the number of workers;
//   fig11  each application's time against the page size, normalized to 1 KiB (plain version);
//   fig12  each application's speedup over one worker, plain and optimized (in place and with store
//          copies);
//   fig13  each application's time against its OpenMP version on as many threads as workers.
// Every application run is checked against its serial reference before its time counts.
#include "apps/crc_apps.hpp"
#include "common.hpp"
#include "measure.hpp"
#include "os/cpu_binding.hpp"
#include "suite.hpp"

#include <hdsm/crc.hpp>
#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hdsm::tool {
namespace {

namespace crc = hdsm::crc;
namespace capps = apps::crc_apps;

crc::Options options(int workers) {
  crc::Options o = crc::Options::from_environment();
  o.workers = workers;
  o.shared_bytes = std::max<std::size_t>(o.shared_bytes, std::size_t{256} << 20);
  return o;
}

// HDSM_CRC_WORKERS, else one per core but the home's, and at least two (a speedup needs them).
int suite_workers() {
  const crc::Options o = crc::Options::from_environment();
  if (o.workers > 0) return o.workers;
  return static_cast<int>(std::max(2u, os::usable_cpus() - 1));
}

// Seconds per page of one variant: a sequential walk over `bytes`, one access per page, so every
// access misses (fetch: a read; flush: a write, whose miss first writes back the modified victim).
double page_cost(crc::Runtime& rt, std::size_t page, const std::string& variant, bool flush,
                 std::size_t bytes) {
  rt.page_size(page);
  auto* a = rt.alloc<std::byte>(bytes);
  const std::size_t pages = bytes / page;
  const MeasureOptions mo{.min_total_seconds = 0.05, .batches = 3};
  std::size_t at = 0;
  // Decided once, not by a string compare in every repetition, which the variant would pay.
  const bool single = variant == "single-writer", read_only = variant == "read-only";
  const Measurement m = measure(
      [&](std::size_t reps) {
        rt.run([&] {
          for (std::size_t r = 0; r < reps; ++r) {
            std::byte* p = a + (at % pages) * page;
            ++at;
            if (flush) {
              if (single)
                crc::write_single(p, std::byte{1});
              else
                crc::write(p, std::byte{1});
            } else {
              const std::byte b = read_only ? crc::read_only(p) : crc::read(p);
              if (b == std::byte{7}) throw std::logic_error("unexpected byte");
            }
          }
        });
      },
      mo);
  rt.free(a);
  return m.seconds_per_rep;
}

// The raw copy runs on the worker's thread, inside a region, as the variants do: the VM's two cores
// differed by up to 30 % in copy speed for minutes at a time, and a raw copy timed on the main thread
// while the variant ran on the worker's moved the ratio by that much.
double raw_copy_cost(crc::Runtime& rt, std::size_t page, std::size_t store, bool flush, std::size_t bytes) {
  // Both areas start on a page boundary, as the shared space's pages and the local store's frames
  // do (a vector's data 16 bytes past one copies 8 KiB up to 20 % slower here).
  constexpr std::size_t kAlign = 4096;
  std::vector<std::byte> big_bytes(bytes + kAlign, std::byte{1}), local_bytes(store + kAlign, std::byte{2});
  const auto aligned = [](std::vector<std::byte>& v) {
    const auto a = reinterpret_cast<std::uintptr_t>(v.data());
    return v.data() + ((kAlign - a % kAlign) % kAlign);
  };
  std::byte* const big = aligned(big_bytes);
  std::byte* const local = aligned(local_bytes);
  const std::size_t frames = std::max<std::size_t>(1, store / page);
  std::size_t at = 0, frame = 0;
  const Measurement m = measure(
      [&](std::size_t reps) {
        rt.run([&] {
          for (std::size_t r = 0; r < reps; ++r) {
            std::byte* l = local + (frame % frames) * page;
            const std::size_t pages = bytes / page;
            // As in the page buffer: the victim is the page that came in `frames` misses ago, and the
            // next page comes into its frame. (Writing back the page read just before, hot in the
            // cache, made the raw flush 15-25 % cheaper than any buffer of `frames` pages can be.)
            if (flush) std::memcpy(big + ((at + pages - frames % pages) % pages) * page, l, page);
            std::memcpy(l, big + (at % pages) * page, page);
            ++at;
            ++frame;
          }
        });
      },
      {.min_total_seconds = 0.05, .batches = 3});
  return m.seconds_per_rep;
}

void fig10(SuiteContext& ctx) {
  const std::vector<std::size_t> pages =
      ctx.quick ? std::vector<std::size_t>{128, 1024, 8192}
                : std::vector<std::size_t>{128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  const std::size_t bytes = ctx.quick ? 8 << 20 : 32 << 20;
  crc::Runtime rt(options(1));
  const std::size_t store = crc::Options::from_environment().local_store;
  for (const bool flush : {false, true}) {
    const std::string op = flush ? "flush" : "fetch";
    for (const std::size_t page : pages) {
      ctx.progress.start(fmt::format("fig10 {} {} B pages", op, page));
      // Each variant is timed right after a raw copy of its own, in pairs, and the ratio is the
      // median of the pairs' ratios: the VM's drift between measurements stays out of it. More
      // pairs at 8 KiB, where the targets are.
      const int pairs = ctx.quick ? 1 : page == 8192 ? 5 : 1;
      std::vector<double> raws;
      std::string line;
      for (const std::string variant : {"protocol", "read-only", "single-writer"}) {
        if (!flush && variant == "single-writer") continue;  // a single writer's fetch is the read-only one
        if (flush && variant == "read-only") continue;
        std::vector<double> times, ratios, paired;
        for (int k = 0; k < pairs; ++k) {
          const double raw = raw_copy_cost(rt, page, store, flush, bytes);
          const double t = page_cost(rt, page, variant, flush, bytes);
          raws.push_back(raw);
          paired.push_back(raw);
          times.push_back(t);
          ratios.push_back(t / raw);
        }
        const double s = median(times), ratio = median(ratios);
        ctx.results.add_row({{"experiment", "fig10"},
                             {"app", op},
                             {"variant", variant},
                             {"page", static_cast<std::int64_t>(page)},
                             {"workers", std::int64_t{1}},
                             {"seconds", s},
                             {"ratio", ratio},
                             {"conflict_misses", std::int64_t{0}},
                             {"raw_seconds", median(paired)}});
        line += fmt::format("{}{} {:.0f} ns ({:.2f}x)", line.empty() ? "" : ", ", variant, s * 1e9, ratio);
        if (page == 8192)
          ctx.results.add_summary(
              {fmt::format("fig10 {} 8 KiB pages: {} / raw copy", op, variant), ratio, "x",
               fmt::format("{}: target {}; median of {} pair{}: {:.0f} ns per page, raw copy {:.0f} ns",
                           verdict(ratio <= (variant == "protocol" ? 2.0 : 1.1)),
                           variant == "protocol" ? "<= 2" : "<= 1.1", pairs, pairs == 1 ? "" : "s", s * 1e9,
                           median(paired) * 1e9)});
      }
      const double raw = median(raws);
      ctx.results.add_row({{"experiment", "fig10"},
                           {"app", op},
                           {"variant", "raw copy"},
                           {"page", static_cast<std::int64_t>(page)},
                           {"workers", std::int64_t{1}},
                           {"seconds", raw},
                           {"ratio", 1.0},
                           {"conflict_misses", std::int64_t{0}},
                           {"raw_seconds", raw}});
      line += fmt::format(", raw copy {:.0f} ns", raw * 1e9);
      ctx.progress.finish(line);
    }
  }
}

// The sync experiments' largest worker count: one per core, and one more (oversubscribed).
int sync_most_workers(const SuiteContext& ctx) {
  const int cores = static_cast<int>(os::usable_cpus());
  return ctx.quick ? 3 : std::max(4, cores);
}

void sync(SuiteContext& ctx) {
  const int cores = static_cast<int>(os::usable_cpus());
  const int most = sync_most_workers(ctx);
  for (int workers = 1; workers <= most; ++workers) {
    crc::Runtime rt(options(workers));
    for (const std::string op : {"lock", "barrier"}) {
      ctx.progress.start(fmt::format("sync {} with {} worker{}", op, workers, workers > 1 ? "s" : ""));
      const MeasureOptions mo{.min_total_seconds = ctx.quick ? 0.03 : 0.2, .batches = 3};
      const bool lock = op == "lock";  // decided once, not by a string compare in every repetition
      const Measurement m = measure(
          [&](std::size_t reps) {
            rt.run([&] {
              for (std::size_t r = 0; r < reps; ++r) {
                if (lock) {
                  crc::lock(1);
                  crc::unlock(1);
                } else {
                  crc::barrier();
                }
              }
            });
          },
          mo);
      // Locks: every worker takes the lock reps times, so the lock is handed on workers * reps
      // times; the cost of one acquire + release is the time over that.
      const double each = op == "lock" ? m.seconds_per_rep / workers : m.seconds_per_rep;
      const bool fits = workers + 1 <= cores;
      ctx.results.add_row({{"experiment", "sync"},
                           {"app", op},
                           {"variant", fits ? "on own cores" : "oversubscribed"},
                           {"page", std::int64_t{0}},
                           {"workers", static_cast<std::int64_t>(workers)},
                           {"seconds", each},
                           {"ratio", std::string()},  // none applies: empty, as elsewhere
                           {"conflict_misses", std::int64_t{0}},
                           {"raw_seconds", std::string()}});
      ctx.progress.finish(fmt::format("{:.2f} us{}", each * 1e6, fits ? "" : " (workers + home > cores)"));
      if (workers == 1 || workers + 1 == cores)
        ctx.results.add_summary(
            {fmt::format("{} {} with {} worker{}", op == "lock" ? "lock acquire + release" : "barrier",
                         fits ? "latency" : "latency (oversubscribed)", workers, workers > 1 ? "s" : ""),
             each * 1e6, "us",
             fmt::format("{}target {} us with workers + home on their own cores; seed: {} us with 8 SPEs",
                         fits ? verdict(each * 1e6 <= (op == "lock" ? 3.0 : 2.0)) + ": " : "",
                         op == "lock" ? "3" : "2", op == "lock" ? "6.47" : "3.14")});
    }
  }
}

// One app run, checked, timed.
double timed(const capps::CrcApp& app, crc::Runtime& rt, capps::Version v, apps::Scale scale,
             const apps::Output& want) {
  const Stopwatch watch;
  const apps::Output got = app.run(rt, v, scale);
  const double s = watch.seconds();
  if (const std::string wrong = apps::compare(got, want, app.tolerance); !wrong.empty())
    throw std::runtime_error(fmt::format("crc suite: {} is wrong: {}", app.name, wrong));
  return s;
}

double timed_openmp(const capps::CrcApp& app, int threads, apps::Scale scale, const apps::Output& want) {
  const Stopwatch watch;
  const apps::Output got = app.run_openmp(threads, scale);
  const double s = watch.seconds();
  if (const std::string wrong = apps::compare(got, want, app.tolerance); !wrong.empty())
    throw std::runtime_error(fmt::format("crc suite: OpenMP {} is wrong: {}", app.name, wrong));
  return s;
}

// Fig. 11 for one app: its plain version on `workers` workers, time against the page size. Its
// runtime ends here, before figs. 12 and 13 time the app beside OpenMP.
void fig11(SuiteContext& ctx, const capps::CrcApp& app, const apps::Output& want, int workers, int reps) {
  const apps::Scale scale = ctx.quick ? apps::Scale::quick : apps::Scale::full;
  const std::vector<std::size_t> pages = ctx.quick ? std::vector<std::size_t>{1024, 4096}
                                                   : std::vector<std::size_t>{1024, 2048, 4096, 8192, 16384};
  double at_1k = 0;
  crc::Runtime rt(options(workers));
  for (const std::size_t page : pages) {
    ctx.progress.start(fmt::format("fig11 {} at {} B pages, {} workers", app.name, page, workers));
    rt.page_size(page);
    rt.reset_stats();
    std::vector<double> s(static_cast<std::size_t>(reps));
    for (double& one : s) one = timed(app, rt, capps::Version::plain, scale, want);
    const double t = median(s);
    if (page == pages.front()) at_1k = t;
    const crc::Stats st = rt.stats();
    ctx.results.add_row({{"experiment", "fig11"},
                         {"app", std::string(app.name)},
                         {"variant", "plain"},
                         {"page", static_cast<std::int64_t>(page)},
                         {"workers", static_cast<std::int64_t>(workers)},
                         {"seconds", t},
                         {"ratio", t / at_1k},
                         {"conflict_misses",
                          static_cast<std::int64_t>(st.conflict_misses / static_cast<std::uint64_t>(reps))},
                         {"raw_seconds", std::string()}});
    ctx.progress.finish(fmt::format("{:.4f} s ({:.2f}x of 1 KiB), {} conflict misses", t, t / at_1k,
                                    st.conflict_misses / static_cast<std::uint64_t>(reps)));
    if (page == 4096)
      ctx.results.add_summary({fmt::format("{} conflict misses at 4 KiB pages ({} local store)", app.name,
                                           format_bytes(crc::Options::from_environment().local_store)),
                               static_cast<double>(st.conflict_misses) / reps, "",
                               app.name == "stream" || app.name == "jacobi" || app.name == "md"
                                   ? verdict(st.conflict_misses == 0) + ": target 0"
                                   : std::string("target 0 for stream, jacobi and md")});
  }
}

void apps_experiments(SuiteContext& ctx) {
  const apps::Scale scale = ctx.quick ? apps::Scale::quick : apps::Scale::full;
  const int reps = ctx.quick ? 1 : 3;
  const int workers = suite_workers();
  std::vector<std::string> impossible;  // speedups above the workers' count
  for (const capps::CrcApp& app : capps::crc_apps()) {
    const apps::Output want = app.run_reference(scale);
    fig11(ctx, app, want, workers, reps);
    // Figs. 12 and 13: one worker against `workers`, plain and optimized, and OpenMP on as many
    // threads; interleaved, taking turns. The optimized version runs twice: with its localized
    // read-only and single-writer pages in place (zero copy, the default), and copied through the
    // local store as on the seed's machine.
    struct Run {
      capps::Version v;
      bool zero_copy;
      const char* label;
    };
    for (const Run run :
         {Run{capps::Version::plain, true, "plain"}, Run{capps::Version::optimized, true, "optimized"},
          Run{capps::Version::optimized, false, "optimized, store copies"}}) {
      crc::Options on_n = options(workers), on_1 = options(1);
      on_n.zero_copy = on_1.zero_copy = run.zero_copy;
      on_n.page_size = on_1.page_size = 4096;
      crc::Runtime many(on_n), one(on_1);
      const capps::Version v = run.v;
      const std::string version = run.label;
      ctx.progress.start(fmt::format("fig12/13 {} {}: 1 and {} workers, OpenMP", app.name, version, workers));
      std::vector<double> t1, tn, omp;
      // Short runs (the optimized versions take tens of milliseconds) take more turns, up to nine or
      // a second and a half, so one disturbed run on a shared machine does not become the median.
      const Stopwatch turns;
      for (int r = 0; r < reps || (!ctx.quick && r < 9 && turns.seconds() < 1.5); ++r) {
        t1.push_back(timed(app, one, v, scale, want));
        tn.push_back(timed(app, many, v, scale, want));
        omp.push_back(timed_openmp(app, workers, scale, want));
      }
      const double a = median(t1), b = median(tn), o = median(omp);
      // The optimized versions run at their own page size (smaller where the local store holds fewer
      // than four frames of it), the plain ones at 4 KiB.
      std::size_t used = 4096;
      if (v == capps::Version::optimized) {
        used = capps::set_optimized_page(many, app.optimized_page_size);
        many.page_size(4096);
      }
      const auto page = static_cast<std::int64_t>(used);
      // The times the ratios come from: one worker's and OpenMP's, in rows of their own.
      ctx.results.add_row({{"experiment", "fig12 one worker"},
                           {"app", std::string(app.name)},
                           {"variant", version},
                           {"page", page},
                           {"workers", std::int64_t{1}},
                           {"seconds", a},
                           {"ratio", 1.0},
                           {"conflict_misses", std::int64_t{0}},
                           {"raw_seconds", std::string()}});
      ctx.results.add_row({{"experiment", "fig13 OpenMP"},
                           {"app", std::string(app.name)},
                           {"variant", "OpenMP beside " + version},
                           {"page", std::int64_t{0}},
                           {"workers", static_cast<std::int64_t>(workers)},
                           {"seconds", o},
                           {"ratio", 1.0},
                           {"conflict_misses", std::int64_t{0}},
                           {"raw_seconds", std::string()}});
      ctx.results.add_row({{"experiment", "fig12"},
                           {"app", std::string(app.name)},
                           {"variant", version},
                           {"page", page},
                           {"workers", static_cast<std::int64_t>(workers)},
                           {"seconds", b},
                           {"ratio", a / b},
                           {"conflict_misses", std::int64_t{0}},
                           {"raw_seconds", std::string()}});
      ctx.results.add_row({{"experiment", "fig13"},
                           {"app", std::string(app.name)},
                           {"variant", version},
                           {"page", page},
                           {"workers", static_cast<std::int64_t>(workers)},
                           {"seconds", b},
                           {"ratio", b / o},
                           {"conflict_misses", std::int64_t{0}},
                           {"raw_seconds", std::string()}});
      ctx.results.add_summary(
          {fmt::format("{} {} time / OpenMP on {} thread{}", app.name, version, workers,
                       workers > 1 ? "s" : ""),
           b / o, "x",
           fmt::format("{:.4f} vs {:.4f} s; speedup over 1 worker {:.2f}x{}", b, o, a / b,
                       v == capps::Version::optimized && run.zero_copy &&
                               (app.name == "stream" || app.name == "jacobi" || app.name == "md")
                           ? "; " + verdict(b / o <= 1.3) + ": target <= 1.3"
                           : "")});
      ctx.progress.finish(
          fmt::format("1 worker {:.4f} s, {} {:.4f} s (speedup {:.2f}x), OpenMP {:.4f} s ({:.2f}x)", a,
                      workers, b, a / b, o, b / o));
      // More than the workers can give: the one-worker time was inflated (other work took the cores
      // from the spinning worker and home), not a measurement of crc.
      if (a / b > 1.5 * static_cast<double>(workers))
        impossible.push_back(fmt::format("{} {} {:.1f}x", app.name, version, a / b));
    }
  }
  if (!impossible.empty())
    ctx.results.add_note(fmt::format(
        "speedups over one worker above what {} workers can give ({}): the one-worker runs were slowed by "
        "other work on the machine (the spinning waits of a worker and the home that fit the cores lose "
        "their cores to it); rerun on a quiet machine",
        workers, fmt::join(impossible, ", ")));
  const bool chosen = crc::Options::from_environment().workers > 0;
  ctx.results.add_note(fmt::format(
      "applications on {} worker{} ({}) and a {} local store; the OpenMP versions on as many threads. The "
      "home serves the workers from its own thread.{}",
      workers, workers > 1 ? "s" : "",
      chosen ? "HDSM_CRC_WORKERS" : "the suite's default: one per core but the home's, at least 2",
      format_bytes(crc::Options::from_environment().local_store),
      workers == 1 ? " With one worker, Figs. 12 and 13 compare one worker with itself." : ""));
}

void run(SuiteContext& ctx) {
  ctx.results.set_columns({"experiment", "app", "variant", "page", "workers", "seconds", "ratio",
                           "conflict_misses", "raw_seconds"});
  ctx.results.add_plot({.id = "fig10-fetch",
                        .title = "Fetch cost per page (seed 002 Fig. 10a)",
                        .x = "page",
                        .y = "seconds",
                        .series = "variant",
                        .x_label = "page size",
                        .y_label = "seconds per page",
                        .log_x = true,
                        .log_y = true,
                        .x_format = ValueFormat::bytes,
                        .where = {{"experiment", "fig10"}, {"app", "fetch"}}});
  ctx.results.add_plot({.id = "fig10-flush",
                        .title = "Flush cost per page, with the fetch after it (seed 002 Fig. 10b)",
                        .x = "page",
                        .y = "seconds",
                        .series = "variant",
                        .x_label = "page size",
                        .y_label = "seconds per page",
                        .log_x = true,
                        .log_y = true,
                        .x_format = ValueFormat::bytes,
                        .where = {{"experiment", "fig10"}, {"app", "flush"}}});
  // One plot each, with the worker counts whose workers and home outnumber the cores as a series
  // of their own.
  for (const std::string op : {"lock", "barrier"})
    ctx.results.add_plot({.id = "sync-" + op,
                          .title = op == "lock" ? "Lock acquire + release latency" : "Barrier latency",
                          .x = "workers",
                          .y = "seconds",
                          .series = "variant",
                          .x_label = "workers",
                          .y_label = "seconds",
                          .log_y = true,
                          .x_format = ValueFormat::integer,
                          .where = {{"experiment", "sync"}, {"app", op}}});
  ctx.results.add_plot({.id = "fig11",
                        .title = "Time against page size, normalized to 1 KiB (seed 002 Fig. 11)",
                        .x = "page",
                        .y = "ratio",
                        .series = "app",
                        .x_label = "page size",
                        .y_label = "time / time at 1 KiB",
                        .log_x = true,
                        .x_format = ValueFormat::bytes,
                        .where = {{"experiment", "fig11"}}});
  ctx.results.add_plot({.id = "fig12",
                        .title = "Speedup over one worker (seed 002 Fig. 12)",
                        .x = "app",
                        .y = "ratio",
                        .series = "variant",
                        .x_label = "application",
                        .y_label = "speedup",
                        .categorical_x = true,
                        .where = {{"experiment", "fig12"}}});
  ctx.results.add_plot({.id = "fig13",
                        .title = "Time against OpenMP on the same threads (seed 002 Fig. 13)",
                        .x = "app",
                        .y = "ratio",
                        .series = "variant",
                        .x_label = "application",
                        .y_label = "time / OpenMP",
                        .categorical_x = true,
                        .where = {{"experiment", "fig13"}}});
  const std::size_t apps_steps = capps::crc_apps().size() * ((ctx.quick ? 2 : 5) + 3);
  const std::size_t fig10_steps = ctx.quick ? 3 * 2 : 8 * 2;  // page sizes x (fetch, flush)
  ctx.progress.set_total(fig10_steps + static_cast<std::size_t>(sync_most_workers(ctx)) * 2 + apps_steps);
  fig10(ctx);
  sync(ctx);
  apps_experiments(ctx);
}

}  // namespace

Suite crc_suite() {
  return {"crc",
          "seed 002 Figs. 10-13: centralized release consistency: fetch/flush cost, locks and barriers, page "
          "size, "
          "speedup and OpenMP",
          run, /*uses_device=*/false};
}

}  // namespace hdsm::tool
