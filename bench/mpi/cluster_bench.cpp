// The cluster experiments of seed 004 (Fig. 3, Table 3, lazy against eager), run by `hdsm bench
// cluster` as `mpirun -np R hdsm_cluster_bench --threads T ...`, or with --baseline as one plain
// process (the same kernels on one executor, no cluster runtime, no MPI). For every app it runs the
// app `--repeat` times (short apps more often) after a warm-up, checks the output against the reference, and
// rank 0 prints one CSV line:
//   csv,app,mode,ranks,threads,seconds,global_pages,modified_pages,kernels,lazy_kernels,
//       modified_bytes,payload_bytes,header_bytes,vector_bytes,wire_bytes,multi_writer_pages,write_faults,fetches,
//       alloc_seconds,to_global_seconds,kernel_seconds,from_global_seconds,free_seconds,host_seconds
// (seconds: the median run; counters: one run, summed over the ranks; the last six: rank 0's mean
// time a run in each kind of call, and in the rest of the run, the app's host code). Progress goes
// to stderr.
#include "apps/cluster_target.hpp"
#include "apps/grid.hpp"

#include <hdsm/cluster.hpp>

#include <mpi.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace {

namespace apps = hdsm::apps;
namespace cl = hdsm::cluster;

struct Args {
  std::string app = "all";
  apps::Scale scale = apps::Scale::quick;
  bool baseline = false;
  unsigned threads = 0;
  int repeat = 3;
  std::int64_t lazy_pages = -1;  // -1: the knob's
  int private_pages = -1;        // -1: the knob's
  std::string mode = "cluster";
};

Args parse(int argc, char** argv) {
  Args a;
  std::string scale = "quick";
  CLI::App cli("seed 004's cluster experiments on one app or all (run under mpirun, or --baseline)");
  cli.add_option("--app", a.app, "an app of the seed's Table 2, or all");
  cli.add_option("--scale", scale, "test, quick or full")->check(CLI::IsMember({"test", "quick", "full"}));
  cli.add_flag("--baseline", a.baseline,
               "one plain process: the kernels on one executor, no cluster runtime");
  cli.add_option("--threads", a.threads, "threads a rank (0: one per CPU it may use)");
  cli.add_option(
         "--repeat", a.repeat,
         "timed runs after the warm-up, at least (short apps run up to 0.5 s, 50 runs at most; the median "
         "counts)")
      ->check(CLI::PositiveNumber);
  cli.add_option("--lazy-pages", a.lazy_pages, "the lazy-update threshold (-1: HDSM_CLUSTER_LAZY_PAGES)");
  cli.add_option("--private-pages", a.private_pages,
                 "1: pages one rank touched stay private to it; 0: every page shared (-1: "
                 "HDSM_CLUSTER_PRIVATE_PAGES)")
      ->check(CLI::Range(-1, 1));
  cli.add_option("--mode", a.mode, "the label of the CSV lines");
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(cli.exit(e));  // NOLINT(concurrency-mt-unsafe): before any thread starts
  }
  a.scale = scale == "test" ? apps::Scale::test : scale == "full" ? apps::Scale::full : apps::Scale::quick;
  return a;
}

/// The kB after `key` in /proc/self/smaps_rollup (huge pages mapped now), or -1.
long long rollup_kb(const std::string& text, const char* key) {
  const std::size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  const char* number = text.c_str() + at + std::strlen(key);
  char* end = nullptr;
  const long long kb = std::strtoll(number, &end, 10);
  return end == number ? -1 : kb;
}

/// The word in brackets of a transparent_hugepage policy file ("always [madvise] never"), or "?".
std::string thp_policy(const char* file) {
  std::FILE* f = std::fopen(file, "r");
  if (f == nullptr) return "?";
  char line[256] = {};
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  const char* open = read ? std::strchr(line, '[') : nullptr;
  const char* close = open != nullptr ? std::strchr(open, ']') : nullptr;
  return close != nullptr ? std::string(open + 1, close) : "?";
}

/// Where the app's data lies in transparent huge pages while its first kernel runs: the
/// baseline's anonymous memory may get them where the cluster's shared memfd views do not.
std::string huge_pages_now() {
  std::string text;
  if (std::FILE* f = std::fopen("/proc/self/smaps_rollup", "r")) {
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) text.append(buffer, n);
    std::fclose(f);
  }
  return "huge pages: anonymous " + std::to_string(rollup_kb(text, "AnonHugePages:") / 1024) +
         " MiB, shared " + std::to_string(rollup_kb(text, "ShmemPmdMapped:") / 1024) + " MiB; THP " +
         thp_policy("/sys/kernel/mm/transparent_hugepage/enabled") + ", shmem " +
         thp_policy("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// Counts the pages an app allocates (Table 3's global pages), notes the huge pages at its first
/// launch, and adds up the seconds of each kind of call while `timing`: where a run's time goes
/// (a one-rank overhead in the allocations or copies, not in the kernels, grows with the cores).
class Counting final : public apps::GridTarget {
 public:
  explicit Counting(apps::GridTarget& inner) : inner_(inner) {}
  void* alloc_bytes(std::size_t bytes) override {
    if (!timing) pages += (bytes + 4095) / 4096;  // one run's, the warm-up's
    return timed(kAlloc, [&] { return inner_.alloc_bytes(bytes); });
  }
  void free(void* p) override {
    timed(kFree, [&] { inner_.free(p); });
  }
  void to_global(void* d, const void* s, std::size_t n) override {
    timed(kToGlobal, [&] { inner_.to_global(d, s, n); });
  }
  void from_global(void* d, const void* s, std::size_t n) override {
    timed(kFromGlobal, [&] { inner_.from_global(d, s, n); });
  }
  void launch(const hdsm::Kernel& k, const hdsm::Launch& l, const hdsm::ArgPack& a) override {
    if (huge.empty()) huge = huge_pages_now();
    timed(kLaunch, [&] { inner_.launch(k, l, a); });
  }
  /// Mean seconds a run in alloc, to_global, launch, from_global and free, and in the rest of the
  /// run (the app's host code), over `runs` timed runs that took `total` seconds together.
  std::array<double, 6> per_run(int runs, double total) const {
    std::array<double, 6> s{};
    double calls = 0;
    for (std::size_t p = 0; p < kPhases; ++p) {
      s[p] = seconds_[p] / std::max(runs, 1);
      calls += seconds_[p];
    }
    s[kPhases] = std::max(0.0, total - calls) / std::max(runs, 1);
    return s;
  }
  std::uint64_t pages = 0;
  std::string huge;
  bool timing = false;  // the timed runs: add up the calls' seconds

 private:
  enum Phase { kAlloc, kToGlobal, kLaunch, kFromGlobal, kFree, kPhases };
  template <class F>
  std::invoke_result_t<F> timed(Phase phase, F&& f) {
    if (!timing) return f();
    struct Add {  // also when f throws (the run fails then anyway)
      double& to;
      std::chrono::steady_clock::time_point start;
      ~Add() { to += seconds_since(start); }
    } add{seconds_[phase], std::chrono::steady_clock::now()};
    return f();
  }
  apps::GridTarget& inner_;
  double seconds_[kPhases] = {};
};

int run(const Args& args, int rank, int ranks) {
  std::vector<const apps::GridApp*> list;
  for (const auto& app : apps::grid_apps())
    if (args.app == "all" || args.app == app.name) list.push_back(&app);
  if (list.empty()) throw std::runtime_error("no app named " + args.app);
  for (const apps::GridApp* app : list) {
    const apps::Output want = app->run_reference(args.scale);
    std::unique_ptr<apps::GridTarget> target;
    if (args.baseline)
      target = std::make_unique<apps::ProcessTarget>(args.threads);
    else
      target = std::make_unique<apps::ClusterTarget>();
    Counting counting(*target);
    const auto warm_start = std::chrono::steady_clock::now();
    const std::string error = apps::compare(app->run(counting, args.scale), want, app->tolerance);  // warm-up
    if (!error.empty()) throw std::runtime_error(std::string(app->name) + " is wrong: " + error);
    // Short apps (scan takes 20 ms) run more often, up to half a second in all, so their median
    // is not one noisy run of a shared machine. Every rank runs as often as the slowest says.
    double warm = seconds_since(warm_start);
    if (!args.baseline) MPI_Allreduce(MPI_IN_PLACE, &warm, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const int runs =
        std::clamp(static_cast<int>(0.5 / std::max(warm, 1e-6)), args.repeat, std::max(args.repeat, 50));
    std::vector<double> times;
    double total = 0;  // the runs' seconds (the slowest rank's), less the calls' for the host code
    cl::Stats stats;
    counting.timing = true;
    for (int r = 0; r < runs; ++r) {
      if (!args.baseline) {
        cl::sync();
        cl::reset_stats();
      }
      const auto start = std::chrono::steady_clock::now();
      const apps::Output out = app->run(counting, args.scale);
      double t = seconds_since(start);
      // Every run's output, not only the warm-up's, before its time counts (outside the time).
      if (const std::string wrong = apps::compare(out, want, app->tolerance); !wrong.empty())
        throw std::runtime_error(std::string(app->name) + " run " + std::to_string(r + 1) +
                                 " is wrong: " + wrong);
      if (!args.baseline) {
        stats = cl::stats();
        MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  // the slowest rank
      }
      times.push_back(t);
      total += t;
    }
    std::sort(times.begin(), times.end());
    // The median: of an even count, the mean of the two middle runs.
    const std::size_t middle = times.size() / 2;
    const double median = times.size() % 2 == 1 ? times[middle] : (times[middle - 1] + times[middle]) / 2;
    std::uint64_t sums[8] = {stats.modified_bytes, stats.payload_bytes, stats.header_bytes, stats.wire_bytes,
                             stats.write_faults,   stats.fetches,       stats.vector_bytes, 0};
    if (!args.baseline) MPI_Allreduce(MPI_IN_PLACE, sums, 8, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
      const std::array<double, 6> phase = counting.per_run(runs, total);
      std::printf(
          "csv,%s,%s,%d,%u,%.6f,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%.6f,%.6f,%.6f,%."
          "6f,"
          "%.6f,%.6f\n",
          std::string(app->name).c_str(), args.mode.c_str(), ranks, args.threads, median,
          static_cast<unsigned long long>(counting.pages),
          static_cast<unsigned long long>(stats.pages_modified_max),
          static_cast<unsigned long long>(stats.kernels), static_cast<unsigned long long>(stats.lazy_kernels),
          static_cast<unsigned long long>(sums[0]), static_cast<unsigned long long>(sums[1]),
          static_cast<unsigned long long>(sums[2]), static_cast<unsigned long long>(sums[6]),
          static_cast<unsigned long long>(sums[3]), static_cast<unsigned long long>(stats.pages_multi_writer),
          static_cast<unsigned long long>(sums[4]), static_cast<unsigned long long>(sums[5]), phase[0],
          phase[1], phase[2], phase[3], phase[4], phase[5]);
      std::fflush(stdout);
      std::fprintf(stderr,
                   "  %s %s %dx%u: %.4f s (rank 0's %s; a run: alloc %.2f, to %.2f, kernels %.2f, from %.2f, "
                   "free %.2f, host code %.2f ms)\n",
                   std::string(app->name).c_str(), args.mode.c_str(), ranks, args.threads, median,
                   counting.huge.c_str(), phase[0] * 1e3, phase[1] * 1e3, phase[2] * 1e3, phase[3] * 1e3,
                   phase[4] * 1e3, phase[5] * 1e3);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse(argc, argv);
    if (args.baseline) return run(args, 0, 1);
    cl::Options o = cl::Options::from_environment();
    o.threads = args.threads;
    if (args.lazy_pages >= 0) o.lazy_pages = static_cast<std::uint64_t>(args.lazy_pages);
    if (args.private_pages >= 0) o.private_pages = args.private_pages == 1;
    o.check_races = false;
    cl::Session session(&argc, &argv, o);
    return run(args, session.rank(), session.ranks());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hdsm_cluster_bench: %s\n", e.what());
    return 1;
  }
}
