// The `adsm` suite: the experiments of seed 000, section 5, on this machine's devices.
//   parboil  Fig. 7/8: time and bytes of batch, lazy and rolling update relative to explicit copies;
//            on CUDA devices (or with --um) also unified memory without and with prefetching, and
//            the targets for lazy and rolling against explicit copies and unified memory
//   stencil  Fig. 9: 3D stencil with CPU source introduction and periodic output, volume x block size
//   vecadd   Fig. 11: vector addition under rolling-update against the block size, with the link
//            bandwidth a transfer of one block gets
//   tpacf    Fig. 12: tpacf's multi-pass initialisation, rolling size x block size
//   fault    the cost of one resolved fault next to a raw SIGSEGV + mprotect round trip
//   lookup   pointer -> object and block
// Every version of a workload is checked against its reference output before its time counts.
#include "apps/app.hpp"
#include "apps/iterate.hpp"
#include "apps/parboil/parboil.hpp"
#include "apps/stencil.hpp"
#include "apps/vecadd.hpp"
#include "coherence/shared_space.hpp"
#include "common.hpp"
#include "measure.hpp"
#include "runtime/internal.hpp"
#include "runtime/runtime_impl.hpp"
#include "suite.hpp"

#include <hdsm/hdsm.hpp>

#include <fmt/format.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace hdsm::tool {
namespace {

std::uint64_t moved(const Stats& s) { return s.route(Route::h2d).bytes + s.route(Route::d2h).bytes; }

double geomean(const std::vector<double>& v) {
  double log_sum = 0;
  for (double x : v) log_sum += std::log(x);
  return v.empty() ? 0 : std::exp(log_sum / static_cast<double>(v.size()));
}

void check(const apps::Output& got, const apps::Output& want, double tolerance, const std::string& what) {
  if (const std::string why = apps::compare(got, want, tolerance); !why.empty())
    throw std::runtime_error(fmt::format("{} computed a wrong result: {}", what, why));
}

/// A memfd the stencil writes its output volumes to (no file in a shared directory).
class OutputFile {
 public:
  OutputFile() : fd_(::memfd_create("hdsm bench stencil output", MFD_CLOEXEC)) {
    if (fd_ < 0) throw SystemError("memfd_create", "stencil output file", errno);
  }
  ~OutputFile() { ::close(fd_); }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  int fd() const { return fd_; }
  void clear() const {
    if (::ftruncate(fd_, 0) != 0) throw SystemError("ftruncate", "stencil output file", errno);
    if (::lseek(fd_, 0, SEEK_SET) != 0) throw SystemError("lseek", "stencil output file", errno);
  }

 private:
  int fd_;
};

// The raw round trip the fault handler is compared with: a handler that only makes the page
// writable, on pages nobody else watches.
void raw_handler(int, siginfo_t* info, void*) {
  const auto page = reinterpret_cast<std::uintptr_t>(info->si_addr) & ~std::uintptr_t{4095};
  ::mprotect(reinterpret_cast<void*>(page), 4096, PROT_READ | PROT_WRITE);
}

class AdsmSuite {
 public:
  explicit AdsmSuite(SuiteContext& context)
      : ctx_(context), device_index_(static_cast<int>(context.device.properties().index)) {}

  void run() {
    ctx_.results.set_columns({"experiment", "workload", "version", "size", "block", "rolling", "seconds",
                              "moved", "time_ratio", "moved_ratio", "faults", "GBps"});
    declare_plots();
    ctx_.progress.set_total(count_steps());
    parboil();
    iterate();
    stencil();
    vecadd();
    tpacf();
    fault_cost();
    lookup_cost();
  }

 private:
  struct Row {
    std::string experiment, workload, version;
    std::size_t size = 0, block = 0;
    unsigned rolling = 0;
    double seconds = 0;
    std::uint64_t moved = 0;
    double time_ratio = 0, moved_ratio = 0;
    std::uint64_t faults = 0;
    double gbps = 0;
  };

  void add(const Row& r) {
    auto number_or_blank = [](double v) -> Cell { return v == 0 ? Cell{std::string{}} : Cell{v}; };
    auto count_or_blank = [](std::uint64_t v) -> Cell {
      return v == 0 ? Cell{std::string{}} : Cell{static_cast<std::int64_t>(v)};
    };
    ctx_.results.add_row({{"experiment", r.experiment},
                          {"workload", r.workload},
                          {"version", r.version},
                          {"size", count_or_blank(r.size)},
                          {"block", count_or_blank(r.block)},
                          {"rolling", count_or_blank(r.rolling)},
                          {"seconds", r.seconds},
                          {"moved", static_cast<std::int64_t>(r.moved)},
                          {"time_ratio", number_or_blank(r.time_ratio)},
                          {"moved_ratio", number_or_blank(r.moved_ratio)},
                          {"faults", static_cast<std::int64_t>(r.faults)},
                          {"GBps", number_or_blank(r.gbps)}});
  }

  void plot(Plot p, const char* experiment) {
    p.where = {{"experiment", experiment}};
    ctx_.results.add_plot(std::move(p));
  }

  void declare_plots() {
    plot({.id = "parboil-time",
          .title = "Parboil: time relative to explicit copies (seed Fig. 7)",
          .x = "workload",
          .y = "time_ratio",
          .series = "version",
          .x_label = "benchmark",
          .y_label = "time / explicit",
          .log_y = true,
          .categorical_x = true},
         "parboil");
    plot({.id = "parboil-bytes",
          .title = "Parboil: bytes moved relative to explicit copies (seed Fig. 8)",
          .x = "workload",
          .y = "moved_ratio",
          .series = "version",
          .x_label = "benchmark",
          .y_label = "bytes / explicit",
          .log_y = true,
          .categorical_x = true},
         "parboil");
    plot({.id = "iterate",
          .title = "50 sweeps with a sync after each: time relative to explicit copies",
          .x = "workload",
          .y = "time_ratio",
          .series = "version",
          .x_label = "host reads after each sweep",
          .y_label = "time / explicit",
          .log_y = true,
          .categorical_x = true},
         "iterate");
    plot({.id = "stencil",
          .title = "3D stencil: time against volume (seed Fig. 9)",
          .x = "size",
          .y = "seconds",
          .series = "version",
          .x_label = "volume (bytes of floats)",
          .y_label = "seconds",
          .log_x = true,
          .log_y = true,
          .x_format = ValueFormat::bytes},
         "stencil");
    auto against_block = [&](const char* id, const char* title, const char* y, const char* y_label,
                             const char* experiment) {
      plot({.id = id,
            .title = title,
            .x = "block",
            .y = y,
            .series = "version",
            .x_label = "block size",
            .y_label = y_label,
            .log_x = true,
            .x_format = ValueFormat::bytes},
           experiment);
    };
    against_block("vecadd", "Vector addition under rolling-update (seed Fig. 11)", "seconds", "seconds",
                  "vecadd");
    against_block("vecadd-bandwidth", "Link bandwidth of one block-sized transfer (seed Fig. 11)", "GBps",
                  "GB/s", "link");
    against_block("tpacf", "tpacf initialisation: rolling size x block size (seed Fig. 12)", "seconds",
                  "seconds", "tpacf");
  }

  // Sizes of each experiment.
  apps::Scale scale() const { return ctx_.quick ? apps::Scale::quick : apps::Scale::full; }
  int reps() const { return ctx_.quick ? 1 : 5; }
  /// Runs of each Parboil version: reps() rounded up to whole rows of balanced_orders (8 for the
  /// four versions, 6 for six with unified memory); one in --quick.
  std::size_t parboil_runs() const {
    if (ctx_.quick) return 1;
    const std::size_t rows = balanced_orders(parboil_versions().size()).size();
    return (static_cast<std::size_t>(reps()) + rows - 1) / rows * rows;
  }
  std::vector<unsigned> volumes() const {
    return ctx_.quick ? std::vector<unsigned>{64, 128} : std::vector<unsigned>{64, 128, 192, 256};
  }
  std::vector<std::size_t> stencil_blocks() const { return {256 * KiB, 1 * MiB, 32 * MiB}; }
  std::vector<std::size_t> sweep_blocks(std::size_t largest) const {
    if (ctx_.quick) return {4 * KiB, 64 * KiB, 1 * MiB, largest};
    std::vector<std::size_t> out;
    for (std::size_t b = 4 * KiB; b <= largest; b *= 2) out.push_back(b);
    return out;
  }
  std::size_t vecadd_elements() const { return ctx_.quick ? 2u << 20 : 8u << 20; }
  static constexpr std::array<unsigned, 3> kRollingSizes{1, 2, 4};

  std::size_t count_steps() const {
    return apps::parboil_apps().size() + 2 + volumes().size() * (1 + stencil_blocks().size()) + 1 +
           2 * sweep_blocks(32 * MiB).size() + kRollingSizes.size() * sweep_blocks(8 * MiB).size() + 2;
  }

  /// A runtime over the same devices as the suite's, with its own coherence settings: `version` is
  /// a protocol, or "um-prefetch" (um with HDSM_UM_PREFETCH=1).
  std::unique_ptr<Runtime> runtime(const std::string& version, std::size_t block, unsigned rolling_step = 2) {
    Config c = ctx_.runtime.config();
    c.set("HDSM_PROTOCOL", is_unified(version) ? "um" : version)
        .set("HDSM_UM_PREFETCH", version == "um-prefetch" ? "1" : "0")
        .set("HDSM_BLOCK_SIZE", std::to_string(block))
        .set("HDSM_ROLLING_STEP", std::to_string(rolling_step))
        .set("HDSM_SIM_POISON", "0")
        .set("HDSM_STATS", "0")
        .set("HDSM_TRACE", "");
    return std::make_unique<Runtime>(c);
  }
  std::size_t default_block() const {
    return static_cast<std::size_t>(ctx_.runtime.config().size("HDSM_BLOCK_SIZE"));
  }

  /// Seconds of one run of `fn`, and the bytes `stats_of` counted during it.
  template <class F>
  std::pair<double, std::uint64_t> timed(Runtime& counted, F&& fn) {
    counted.reset_stats();
    const Stopwatch watch;
    fn();
    const double seconds = watch.seconds();
    return {seconds, moved(counted.stats())};
  }

  struct Sample {
    double seconds = 0;  // median of reps() runs
    std::uint64_t moved = 0;
  };
  /// reps() runs of `run` (which returns the workload's output) on `counted`; the first run's
  /// output goes to `check`, which throws when it is wrong.
  template <class Run, class Check>
  Sample repeat(Runtime& counted, Run run, Check check) {
    std::vector<double> seconds;
    std::uint64_t bytes = 0;
    for (int rep = 0; rep < reps(); ++rep) {
      apps::Output got;
      const auto [s, b] = timed(counted, [&] { got = run(); });
      if (rep == 0) check(got);
      seconds.push_back(s);
      bytes = b;
    }
    return {median(seconds), bytes};
  }

  static bool is_unified(const std::string& version) { return version.starts_with("um"); }
  /// The host-mapped column: on a device that shares host memory (where auto picks it), and wherever the
  /// unified memory columns are (on a CUDA GPU with memory of its own it is zero copy over the bus).
  bool host_mapped_column() const { return unified_columns() || ctx_.device.properties().shares_host_memory; }
  /// Said beside the host-mapped targets, which are for devices that share host memory, on one that
  /// does not.
  std::string own_memory_note() const {
    return ctx_.device.properties().shares_host_memory
               ? ""
               : "; this device has memory of its own: its kernels read host memory over the bus";
  }
  /// The device time of the kernels and of the copies `counted` ran on the suite's device since its
  /// stats were reset; 0 where the backend does not measure it.
  std::pair<double, double> device_seconds(const Runtime& counted) const {
    for (const DeviceStats& d : counted.stats().devices)
      if (d.name == ctx_.device.name())
        return {static_cast<double>(d.kernel_ns) / 1e9, static_cast<double>(d.transfer_ns) / 1e9};
    return {0, 0};
  }
  /// What HDSM_PROTOCOL=auto, the default, gives the suite's device, and why.
  detail::ModelChoice auto_choice() {
    const auto rt = runtime("auto", default_block());
    return detail::model_choices(*rt).at(static_cast<std::size_t>(device_index_));
  }
  /// Unified memory columns: always on a CUDA device (the baseline), on others with --um.
  bool unified_columns() const { return ctx_.um || ctx_.device.properties().backend == Backend::cuda; }
  std::vector<std::string> parboil_versions() const {
    std::vector<std::string> v{"explicit", "batch", "lazy", "rolling"};
    if (host_mapped_column()) v.emplace_back("host-mapped");
    if (unified_columns()) v.insert(v.end(), {"um", "um-prefetch"});
    return v;
  }

  // Fig. 7/8. The versions run interleaved in balanced orders (balanced_orders), so drift on a
  // shared machine and what one version leaves behind hit all of them alike; the median of each
  // version's parboil_runs() counts. Unified memory migrates pages in the driver, out of hdsm's
  // sight: its versions count no bytes and get no bytes ratio.
  void parboil() {
    const std::vector<std::string> all = parboil_versions();
    const auto orders = balanced_orders(all.size());
    std::map<std::string, std::unique_ptr<Runtime>> runtimes;
    for (const std::string& v : all)
      if (v != "explicit") runtimes[v] = runtime(v, default_block());
    std::map<std::string, std::vector<double>> time_ratios, moved_ratios;  // by version, one per app
    // host-mapped time / explicit time less its copies, and / explicit kernel time; one per app.
    std::vector<double> mapped_to_computing, mapped_to_kernels;
    for (const apps::App& app : apps::parboil_apps()) {
      ctx_.progress.start(fmt::format("parboil {}", app.name));
      const apps::Output want = app.run_reference(scale());
      std::map<std::string, std::vector<double>> seconds;
      std::vector<double> kernels, computing;  // the explicit version's kernel time, and time less copies
      std::map<std::string, std::uint64_t> bytes;
      for (std::size_t rep = 0; rep < parboil_runs(); ++rep) {
        for (const std::size_t index : orders[rep % orders.size()]) {
          const std::string& v = all[index];
          apps::Output got;
          Runtime& counted = v == "explicit" ? ctx_.runtime : *runtimes[v];
          const auto [s, b] = timed(counted, [&] {
            got = v == "explicit" ? app.run_explicit(ctx_.device, scale())
                                  : app.run_adsm(counted, device_index_, scale());
          });
          if (rep == 0) check(got, want, app.tolerance, fmt::format("{} ({})", app.name, v));
          seconds[v].push_back(s);
          bytes[v] = b;
          if (v == "explicit") {
            const auto [kernel, transfer] = device_seconds(counted);
            kernels.push_back(kernel);
            computing.push_back(transfer > 0 ? s - transfer : 0);
          }
        }
      }
      const double base = median(seconds["explicit"]);
      const double kernel_base = median(kernels), computing_base = median(computing);
      if (kernel_base > 0)
        add({.experiment = "parboil",
             .workload = std::string(app.name),
             .version = "explicit kernels",
             .seconds = kernel_base,
             .time_ratio = kernel_base / base});
      if (computing_base > 0)
        add({.experiment = "parboil",
             .workload = std::string(app.name),
             .version = "explicit less copies",
             .seconds = computing_base,
             .time_ratio = computing_base / base});
      if (host_mapped_column() && kernel_base > 0 && computing_base > 0) {
        mapped_to_kernels.push_back(median(seconds["host-mapped"]) / kernel_base);
        mapped_to_computing.push_back(median(seconds["host-mapped"]) / computing_base);
      }
      const double base_bytes = static_cast<double>(std::max<std::uint64_t>(1, bytes["explicit"]));
      for (const std::string& v : all) {
        const double t = median(seconds[v]) / base;
        const double m = is_unified(v) ? 0 : static_cast<double>(bytes[v]) / base_bytes;
        add({.experiment = "parboil",
             .workload = std::string(app.name),
             .version = v,
             .seconds = median(seconds[v]),
             .moved = bytes[v],
             .time_ratio = t,
             .moved_ratio = m});
        time_ratios[v].push_back(t);
        if (!is_unified(v)) moved_ratios[v].push_back(m);
      }
      std::string ratios;
      for (const std::string& v : all)
        if (v != "explicit")
          ratios += fmt::format("{}{} {:.2f}x", ratios.empty() ? "" : ", ", v, median(seconds[v]) / base);
      ctx_.progress.finish(fmt::format("explicit {:.3f} s; {}", base, ratios));
    }
    for (const std::string& v : all) {
      if (v == "explicit") continue;
      ctx_.results.add_summary(
          {fmt::format("parboil {} time / explicit (geomean)", v), geomean(time_ratios[v]), "x",
           fmt::format("{} apps, median of {} runs each", time_ratios[v].size(), parboil_runs())});
      if (!is_unified(v))
        ctx_.results.add_summary(
            {fmt::format("parboil {} bytes / explicit (geomean)", v), geomean(moved_ratios[v]), "x", ""});
    }
    const auto worst = std::max_element(time_ratios["batch"].begin(), time_ratios["batch"].end());
    ctx_.results.add_summary(
        {"parboil batch worst slow-down", *worst, "x",
         std::string(
             apps::parboil_apps()[static_cast<std::size_t>(worst - time_ratios["batch"].begin())].name)});
    parboil_targets(time_ratios);
    if (host_mapped_column() && mapped_to_computing.size() == apps::parboil_apps().size()) {
      const auto name_at = [](const std::vector<double>& v, std::vector<double>::const_iterator it) {
        return std::string(apps::parboil_apps()[static_cast<std::size_t>(it - v.begin())].name);
      };
      const auto worst = std::max_element(mapped_to_computing.begin(), mapped_to_computing.end());
      ctx_.results.add_summary(
          {"target: parboil host-mapped time / explicit time less its copies <= 1.1 on every app (worst)",
           *worst, "x",
           fmt::format("{}; {}{}", *worst <= 1.1 ? "met" : "missed", name_at(mapped_to_computing, worst),
                       own_memory_note())});
      const auto worst_kernels = std::max_element(mapped_to_kernels.begin(), mapped_to_kernels.end());
      ctx_.results.add_summary({"parboil host-mapped time / explicit kernel time alone (worst)",
                                *worst_kernels, "x",
                                fmt::format("{}: the CPU's own phases count in the first only",
                                            name_at(mapped_to_kernels, worst_kernels))});
      ctx_.results.add_note(
          "parboil explicit kernels, explicit less copies: the explicit version's kernel device time, and "
          "its time "
          "less the device time of its copies (OpenCL profiling; sim: modelled), what it would take if "
          "copying were "
          "free; host-mapped copies nothing");
    }
    const detail::ModelChoice chosen = auto_choice();
    ctx_.results.add_note(fmt::format(
        "auto, the default HDSM_PROTOCOL, gives {} the {} model ({}): its column is what a user gets without "
        "setting anything",
        ctx_.device.name(), chosen.model, chosen.why));
    if (unified_columns())
      ctx_.results.add_note(
          ctx_.device.properties().backend == Backend::cuda
              ? "parboil um, um-prefetch: HDSM_PROTOCOL=um (cudaMallocManaged) without and with "
                "HDSM_UM_PREFETCH; "
                "the driver's page migrations are not counted as bytes moved"
              : "parboil um, um-prefetch (--um): on this device unified memory is memory the CPU and the "
                "kernels "
                "share, as on an integrated GPU; its times say nothing about a discrete GPU");
  }

  // The targets as summary rows: lazy and rolling within 1.03x of explicit copies on a GPU
  // (1.05x on OpenCL), geometric mean over the apps; and, where unified memory ran, at least as fast
  // as unified memory without prefetching on every app.
  void parboil_targets(const std::map<std::string, std::vector<double>>& time_ratios) {
    const bool opencl = ctx_.device.properties().backend == Backend::opencl;
    if (!opencl && !unified_columns()) return;
    const double bound = opencl ? 1.05 : 1.03;
    for (const char* v : {"lazy", "rolling"}) {
      const double g = geomean(time_ratios.at(v));
      ctx_.results.add_summary({fmt::format("target: parboil {} time / explicit <= {} (geomean)", v, bound),
                                g, "x", g <= bound ? "met" : "missed"});
    }
    if (!unified_columns()) return;
    for (const char* v : {"lazy", "rolling"}) {
      double worst = 0;
      std::vector<std::string> missed;
      for (std::size_t i = 0; i < apps::parboil_apps().size(); ++i) {
        const double r = time_ratios.at(v)[i] / time_ratios.at("um")[i];  // the same explicit base
        worst = std::max(worst, r);
        if (r > 1) missed.push_back(fmt::format("{} {:.3f}x", apps::parboil_apps()[i].name, r));
      }
      ctx_.results.add_summary(
          {fmt::format("target: parboil {} time / um <= 1 on every app (worst)", v), worst, "x",
           missed.empty() ? std::string("met") : fmt::format("missed: {}", fmt::join(missed, ", "))});
    }
  }

  // The iterative workloads: 50 sweeps of one kernel with a sync after each, the CPU reading 16
  // scattered elements after every sweep (sparse reads) or nothing (no reads), under every version
  // in balanced orders as parboil's. Where the device shares host memory, host-mapped moves nothing
  // and takes no fault: the workload on which the original GMAC was 6x faster than hdsm.
  void iterate() {
    std::vector<std::string> all{"explicit", "lazy", "rolling"};
    if (host_mapped_column()) all.emplace_back("host-mapped");
    std::map<std::string, std::unique_ptr<Runtime>> runtimes;
    for (const std::string& v : all)
      if (v != "explicit") runtimes[v] = runtime(v, default_block());
    const auto orders = balanced_orders(all.size());
    for (const unsigned probes : {16u, 0u}) {
      apps::IterateProblem problem = apps::iterate_problem(scale());
      problem.probes = probes;
      const std::string workload = probes != 0 ? "sparse reads" : "no reads";
      ctx_.progress.start(
          fmt::format("iterate, {}: {} sweeps of {} floats", workload, problem.steps, problem.n));
      const apps::Output want = apps::iterate_reference(problem);
      std::map<std::string, std::vector<double>> seconds;
      std::map<std::string, std::uint64_t> bytes, faults;
      for (std::size_t rep = 0; rep < parboil_runs(); ++rep) {
        for (const std::size_t index : orders[rep % orders.size()]) {
          const std::string& v = all[index];
          Runtime& counted = v == "explicit" ? ctx_.runtime : *runtimes[v];
          apps::Output got;
          const auto [s, b] = timed(counted, [&] {
            got = v == "explicit" ? apps::iterate_explicit(ctx_.device, problem)
                                  : apps::iterate_adsm(counted, device_index_, problem);
          });
          if (rep == 0)
            check(got, want, apps::kIterateTolerance, fmt::format("iterate {} ({})", workload, v));
          seconds[v].push_back(s);
          bytes[v] = b;
          faults[v] = counted.stats().read_faults + counted.stats().write_faults;
        }
      }
      const double base = median(seconds["explicit"]);
      std::string ratios;
      for (const std::string& v : all) {
        add({.experiment = "iterate",
             .workload = workload,
             .version = v,
             .size = problem.n * sizeof(float),
             .seconds = median(seconds[v]),
             .moved = bytes[v],
             .time_ratio = median(seconds[v]) / base,
             .faults = faults[v]});
        if (v == "explicit") continue;
        ctx_.results.add_summary(
            {fmt::format("iterate {} {} time / explicit", workload, v), median(seconds[v]) / base, "x",
             fmt::format("median of {} runs, {} faults a run", parboil_runs(), faults[v])});
        ratios += fmt::format("{}{} {:.2f}x", ratios.empty() ? "" : ", ", v, median(seconds[v]) / base);
      }
      // The target is the sparse-read workload's (where the original GMAC was 6x faster); without reads
      // nothing moves after the first upload under any model, so they are level.
      if (host_mapped_column() && probes != 0) {
        const double copying = std::min(median(seconds["lazy"]), median(seconds["rolling"]));
        const double r = median(seconds["host-mapped"]) / copying;
        ctx_.results.add_summary({fmt::format("target: iterate {} host-mapped time / the faster of lazy and "
                                              "rolling < 1",
                                              workload),
                                  r, "x", fmt::format("{}{}", r < 1 ? "met" : "missed", own_memory_note())});
      }
      ctx_.progress.finish(fmt::format("explicit {:.3f} s; {}", base, ratios));
    }
  }

  // Fig. 9. Timed runs write the volume every 4 of 8 steps; the bytes-per-step target is taken from
  // runs without output, since the output moves the whole volume for every protocol.
  void stencil() {
    const OutputFile file;
    auto lazy = runtime("lazy", default_block());
    std::map<std::size_t, std::unique_ptr<Runtime>> rolling;
    for (std::size_t b : stencil_blocks()) rolling[b] = runtime("rolling", b);
    for (unsigned edge : volumes()) {
      const apps::StencilProblem problem{edge, edge, edge, 8, 4};
      const std::size_t volume = problem.points() * sizeof(float);
      const apps::Output want = apps::stencil_reference(problem);
      auto one = [&](Runtime& rt, const std::string& version, std::size_t block) {
        ctx_.progress.start(fmt::format("stencil {}^3 {}", edge, version));
        const Sample sample = repeat(
            rt,
            [&] {
              file.clear();
              return apps::stencil_adsm(rt, device_index_, problem, file.fd());
            },
            [&](const apps::Output& got) {
              check(got, want, apps::kStencilTolerance, fmt::format("stencil {}^3 {}", edge, version));
            });
        add({.experiment = "stencil",
             .workload = fmt::format("{}^3", edge),
             .version = version,
             .size = volume,
             .block = block,
             .seconds = sample.seconds,
             .moved = sample.moved});
        ctx_.progress.finish(fmt::format("{:.3f} s, {} moved", sample.seconds, format_bytes(sample.moved)));
      };
      one(*lazy, "lazy", 0);
      for (std::size_t b : stencil_blocks()) one(*rolling[b], fmt::format("rolling {}", format_bytes(b)), b);
    }
    // Traffic per step at the largest volume, without output: the difference between a long and a
    // short run, so the CPU's final read of the volume cancels out.
    const unsigned edge = volumes().back();
    constexpr unsigned kShort = 2, kLong = 6;
    ctx_.progress.start(fmt::format("stencil {}^3 bytes per step, no output", edge));
    const std::size_t block = stencil_blocks().front();
    auto per_step = [&](Runtime& rt) {
      auto bytes = [&](unsigned steps) {
        return timed(rt,
                     [&] {
                       apps::stencil_adsm(rt, device_index_, {edge, edge, edge, steps, 0}, -1);
                     })
            .second;
      };
      const std::uint64_t few = bytes(kShort), many = bytes(kLong);
      return static_cast<double>(many - std::min(many, few)) / (kLong - kShort);
    };
    const double lazy_step = per_step(*lazy), rolling_step = per_step(*rolling[block]);
    const double ratio = rolling_step / std::max(1.0, lazy_step);
    ctx_.results.add_summary(
        {fmt::format("stencil {}^3: rolling ({}) bytes per step / lazy", edge, format_bytes(block)), ratio,
         "x",
         fmt::format("{} vs {} per step", format_bytes(static_cast<std::uint64_t>(rolling_step)),
                     format_bytes(static_cast<std::uint64_t>(lazy_step)))});
    ctx_.progress.finish(fmt::format("rolling/lazy = {:.4f}", ratio));
  }

  // Fig. 11.
  void vecadd() {
    const std::size_t n = vecadd_elements();
    const apps::Output want = apps::vecadd_reference(n);
    for (std::size_t block : sweep_blocks(32 * MiB)) {
      ctx_.progress.start(fmt::format("vecadd {} floats, block {}", n, format_bytes(block)));
      auto rt = runtime("rolling", block);
      const Sample sample = repeat(
          *rt, [&] { return apps::vecadd_adsm(*rt, device_index_, n); },
          [&](const apps::Output& got) {
            check(got, want, 0, fmt::format("vecadd (block {})", format_bytes(block)));
          });
      const std::uint64_t faults = rt->stats().read_faults + rt->stats().write_faults;  // of the last run
      add({.experiment = "vecadd",
           .workload = fmt::format("{} floats", n),
           .version = "rolling",
           .size = n * 4,
           .block = block,
           .seconds = sample.seconds,
           .moved = sample.moved,
           .faults = faults});
      ctx_.progress.finish(fmt::format("{:.3f} s, {} faults", sample.seconds, faults));
    }
    // What one transfer of a block gets from the link (pageable source, as the runtime's copies).
    const std::size_t largest = sweep_blocks(32 * MiB).back();
    std::vector<std::byte> host(largest, std::byte{1});
    const DeviceBuffer buffer = ctx_.device.alloc(largest);
    auto queue = ctx_.device.create_queue();
    for (std::size_t block : sweep_blocks(32 * MiB)) {
      ctx_.progress.start(fmt::format("link bandwidth, {} transfers", format_bytes(block)));
      const Measurement m = measure(
          [&](std::size_t r) {
            for (std::size_t i = 0; i < r; ++i) queue->copy_to_device(buffer, 0, host.data(), block);
            queue->synchronize();
          },
          {ctx_.quick ? 0.015 : 0.05, 3});
      const double gbps = static_cast<double>(block) / m.seconds_per_rep / 1e9;
      add({.experiment = "link",
           .workload = "H2D pageable",
           .version = "H2D",
           .block = block,
           .seconds = m.seconds_per_rep,
           .moved = block,
           .gbps = gbps});
      ctx_.progress.finish(format_gbps(gbps));
    }
    ctx_.device.free(buffer);
  }

  // Fig. 12.
  void tpacf() {
    const apps::App* app = apps::find_app("tpacf");
    std::optional<apps::Output> first;
    for (unsigned rolling : kRollingSizes) {
      for (std::size_t block : sweep_blocks(8 * MiB)) {
        ctx_.progress.start(
            fmt::format("tpacf init, rolling size {}, block {}", rolling, format_bytes(block)));
        auto rt = runtime("rolling", block, rolling);
        // Every configuration computes what the first one did (the apps tests check tpacf itself).
        const Sample sample = repeat(
            *rt, [&] { return apps::parboil::tpacf_init_adsm(*rt, device_index_, scale()); },
            [&](const apps::Output& got) {
              if (!first) first = got;
              check(got, *first, app->tolerance, "tpacf initialisation");
            });
        add({.experiment = "tpacf",
             .workload = "tpacf init",
             .version = fmt::format("rolling size {}", rolling),
             .block = block,
             .rolling = rolling,
             .seconds = sample.seconds,
             .moved = sample.moved});
        ctx_.progress.finish(fmt::format("{:.3f} s, {} moved", sample.seconds, format_bytes(sample.moved)));
      }
    }
  }

  // One write fault per 4 KiB block of read-only shared memory (no data moves), against the same
  // number of raw faults whose handler only calls mprotect. Both sides touch their pages first, so
  // neither pays for allocating pages inside the timed faults.
  void fault_cost() {
    constexpr std::size_t kObjects = 4, kPagesPerObject = 1024, kPages = kObjects * kPagesPerObject;
    ctx_.progress.start(fmt::format("fault cost, {} faults each", kPages));
    // The rolling window grows by the step per object: 4 x 1024 blocks fit, so nothing is evicted.
    auto rt = runtime("rolling", 4 * KiB, kPagesPerObject);
    std::vector<double> adsm_us, raw_us;
    for (int rep = 0; rep < std::max(3, reps()); ++rep) {
      std::vector<volatile char*> shared;
      shared.reserve(kObjects);
      for (std::size_t o = 0; o < kObjects; ++o)
        shared.push_back(static_cast<volatile char*>(rt->alloc(kPagesPerObject * 4 * KiB, device_index_)));
      std::uint64_t sum = 0;
      for (volatile char* object : shared)
        for (std::size_t i = 0; i < kPagesPerObject; ++i)
          sum += static_cast<std::uint64_t>(object[i * 4 * KiB]);
      if (sum != 0) throw std::logic_error("fault cost: a new shared object is not zero");
      // The device zero-fills new objects in the background; the raw side has no such neighbour.
      hdsm::detail::impl_of(*rt).shared_space().wait_transfers();
      rt->reset_stats();
      Stopwatch watch;
      for (volatile char* object : shared)
        for (std::size_t i = 0; i < kPagesPerObject; ++i) object[i * 4 * KiB] = 1;
      adsm_us.push_back(watch.seconds() * 1e6 / kPages);
      const Stats s = rt->stats();
      // The raw side runs before the frees: their madvise flushes take the CPUs the runtime's
      // threads last ran on out of the process's TLB mask, and mprotect's flush costs less with one
      // CPU in it than with two (docs/benchmarks.md). Both sides then see the same mask.
      raw_us.push_back(raw_round_trip(kPages));
      for (volatile char* object : shared) rt->free(const_cast<char*>(object));
      if (s.write_faults != kPages || moved(s) != 0)
        throw std::logic_error(fmt::format("fault cost: {} faults moving {} bytes, expected {} moving none",
                                           s.write_faults, moved(s), kPages));
    }
    const double adsm = median(adsm_us), raw = median(raw_us);
    add({.experiment = "fault",
         .workload = "write fault, 4 KiB block",
         .version = "hdsm",
         .seconds = adsm / 1e6,
         .faults = kPages});
    add({.experiment = "fault",
         .workload = "write fault, 4 KiB page of a shared memfd mapping",
         .version = "raw SIGSEGV+mprotect",
         .seconds = raw / 1e6,
         .faults = kPages});
    ctx_.results.add_summary({"fault handling / raw round trip", adsm / raw, "x",
                              fmt::format("{:.2f} us vs {:.2f} us per fault", adsm, raw)});
    ctx_.progress.finish(fmt::format("{:.2f} us vs raw {:.2f} us", adsm, raw));
  }

  /// µs per raw fault on `pages` populated read-only pages of a shared memfd mapping, the kind the
  /// arena's user view is (mprotect on a shared file mapping costs more than on anonymous memory).
  static double raw_round_trip(std::size_t pages) {
    const std::size_t bytes = pages * 4096;
    const int fd = ::memfd_create("hdsm bench raw faults", MFD_CLOEXEC);
    if (fd < 0) throw SystemError("memfd_create", "raw fault benchmark area", errno);
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int err = errno;
      ::close(fd);
      throw SystemError("ftruncate", "raw fault benchmark area", err);
    }
    void* area = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    const int map_errno = errno;
    ::close(fd);
    if (area == MAP_FAILED) throw SystemError("mmap", "raw fault benchmark area", map_errno);
    if (::mprotect(area, bytes, PROT_READ) != 0)
      throw SystemError("mprotect", "raw fault benchmark area", errno);
    struct sigaction mine {
    }, saved{};
    mine.sa_sigaction = raw_handler;
    mine.sa_flags = SA_SIGINFO;
    sigemptyset(&mine.sa_mask);
    if (::sigaction(SIGSEGV, &mine, &saved) != 0) throw SystemError("sigaction", "raw fault handler", errno);
    auto* p = static_cast<volatile char*>(area);
    Stopwatch watch;
    for (std::size_t i = 0; i < pages; ++i) p[i * 4096] = 1;
    const double us = watch.seconds() * 1e6 / static_cast<double>(pages);
    ::sigaction(SIGSEGV, &saved, nullptr);
    ::munmap(area, bytes);
    return us;
  }

  // Random interior pointers of 64 live objects.
  void lookup_cost() {
    constexpr std::size_t kLookups = 1u << 22;
    ctx_.progress.start(fmt::format("pointer lookup, {} lookups", kLookups));
    auto rt = runtime("rolling", default_block());
    std::vector<char*> objects;
    objects.reserve(64);
    for (int i = 0; i < 64; ++i) objects.push_back(static_cast<char*>(rt->alloc(4 * MiB, device_index_)));
    std::vector<const void*> pointers(4096);
    std::uint64_t state = 0x2545F4914F6CDD1Dull;
    for (auto& p : pointers) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      p = objects[state % objects.size()] + (state >> 20) % (4 * MiB);
    }
    const coherence::Directory& directory = hdsm::detail::impl_of(*rt).shared_space().directory();
    std::size_t found = 0;
    Stopwatch watch;
    for (std::size_t i = 0; i < kLookups; ++i) found += directory.lookup(pointers[i % pointers.size()]).block;
    const double ns = watch.seconds() * 1e9 / static_cast<double>(kLookups);
    for (char* o : objects) rt->free(o);
    if (found == 0) throw std::logic_error("pointer lookup found nothing");
    add({.experiment = "lookup",
         .workload = "pointer -> object, block",
         .version = "hdsm",
         .seconds = ns / 1e9});
    ctx_.results.add_summary(
        {"pointer -> block lookup", ns, "ns", "64 objects of 4 MiB, random interior pointers"});
    ctx_.progress.finish(fmt::format("{:.1f} ns", ns));
  }

  SuiteContext& ctx_;
  int device_index_;
};

}  // namespace

Suite adsm_suite() {
  return {"adsm",
          "seed 000 Fig. 7-12: coherence protocols on Parboil-like apps, stencil, vecadd, tpacf; fault and "
          "lookup cost",
          [](SuiteContext& context) { AdsmSuite(context).run(); }};
}

}  // namespace hdsm::tool
