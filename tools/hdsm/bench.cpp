// `hdsm bench`: run suites on one device and write CSV, JSON, SVG plots and report.md.
#include "commands.hpp"
#include "common.hpp"
#include "measure.hpp"
#include "plot.hpp"
#include "report.hpp"
#include "suite.hpp"
#include "table.hpp"

#include <hdsm/hdsm.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <regex>

#include <unistd.h>

namespace hdsm::tool {
namespace fs = std::filesystem;
namespace {

std::string known_suites() {
  std::vector<std::string_view> names;
  for (const Suite& suite : suites()) names.push_back(suite.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

std::vector<const Suite*> select_suites(const std::vector<std::string>& names) {
  std::vector<const Suite*> selected;
  if (names.empty()) {
    for (const Suite& suite : suites()) selected.push_back(&suite);
    return selected;
  }
  for (const auto& name : names) {
    const Suite* suite = find_suite(name);
    if (suite == nullptr)
      throw UsageError(fmt::format("unknown suite '{}'; known suites: {}", name, known_suites()));
    if (std::find(selected.begin(), selected.end(), suite) == selected.end()) selected.push_back(suite);
  }
  return selected;
}

/// "sim", "opencl:1": a backend and optionally the index among its devices (HDSM_DEVICE's syntax).
bool names_a_backend(const std::string& wanted) {
  static const std::regex spec("(sim|opencl|cuda)(:[0-9]{1,4})?");
  return std::regex_match(wanted, spec);
}

/// The device of `runtime` named `wanted` or with that index (as `hdsm info` lists them); null if none.
Device* find_device(const Runtime& runtime, const std::string& wanted) {
  const bool is_index =
      !wanted.empty() && wanted.size() < 6 &&
      std::all_of(wanted.begin(), wanted.end(), [](unsigned char c) { return std::isdigit(c); });
  for (Device* device : runtime.devices())
    if (device->name() == wanted || (is_index && device->properties().index == std::stoul(wanted)))
      return device;
  return nullptr;
}

Device& select_device(const Runtime& runtime, const std::string& wanted) {
  if (wanted.empty()) return runtime.default_device();
  if (Device* device = find_device(runtime, wanted)) return *device;
  const auto devices = runtime.devices();
  std::vector<std::string> listed;
  for (const Device* device : devices)
    listed.push_back(fmt::format("{} ({})", device->properties().index, device->name()));
  throw UsageError(fmt::format("unknown device '{}'; devices: {}", wanted, fmt::join(listed, ", ")));
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

void print_suite_list() {
  Table table({"suite", "description"});
  for (const Suite& suite : suites())
    table.add_row({std::string(suite.name), std::string(suite.description)});
  fmt::print("{}", table.text());
}

/// Plots, CSV and JSON of one finished suite. Returns false when a plot could not be drawn.
bool write_suite_outputs(const fs::path& out, const RunInfo& run, SuiteOutcome& outcome, bool draw_plots) {
  const std::string name(outcome.suite->name);
  bool plots_ok = true;
  for (const Plot& plot : outcome.results.plots()) {
    std::string file = fmt::format("{}-{}.svg", name, plot.id);
    bool drawn = draw_plots;
    if (draw_plots) {
      try {
        render_svg(outcome.results, plot, out / file);
      } catch (const std::exception& e) {
        fmt::print(stderr, "hdsm: error: {}\n", e.what());
        outcome.plot_problem = e.what();
        plots_ok = false;
        drawn = false;
      }
    } else {
      outcome.plot_problem = "gnuplot was not found on the PATH";
    }
    if (!drawn) {
      // An earlier run's plot would pass for this run's beside its CSV and JSON.
      std::error_code ignored;
      fs::remove(out / file, ignored);
      file.clear();
    }
    outcome.svg_files.push_back(file);
  }
  write_file(out / (name + ".csv"), results_csv(outcome.results));
  // Knob values and paths are bytes, not always UTF-8 (a Latin-1 file name): such a byte becomes
  // U+FFFD rather than failing the suite after it ran.
  write_file(out / (name + ".json"),
             suite_json(run, outcome).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  return plots_ok;
}

/// Outputs of an earlier run would pass for this run's: remove them when the suite failed.
void remove_stale_outputs(const fs::path& out, const SuiteOutcome& outcome) {
  const std::string name(outcome.suite->name);
  std::error_code ignored;
  fs::remove(out / (name + ".csv"), ignored);
  fs::remove(out / (name + ".json"), ignored);
  for (const Plot& plot : outcome.results.plots())
    fs::remove(out / fmt::format("{}-{}.svg", name, plot.id), ignored);
}

}  // namespace

int run_bench(const BenchOptions& options) {
  const std::vector<const Suite*> selected = select_suites(options.suites);  // a misspelt one: exit 2
  if (options.out.empty()) throw UsageError("--out: an empty folder name (the default is report)");
  if (options.um && std::none_of(selected.begin(), selected.end(),
                                 [](const Suite* suite) { return suite->name == "adsm"; }))
    throw UsageError("--um applies to the adsm suite, which this run does not include");
  const bool device_used =
      std::any_of(selected.begin(), selected.end(), [](const Suite* suite) { return suite->uses_device; });
  if (!device_used && !options.device.empty()) {
    std::vector<std::string_view> names;
    names.reserve(selected.size());
    for (const Suite* suite : selected) names.push_back(suite->name);
    throw UsageError(fmt::format("--device {}: {} run{} on the host's CPUs and use{} no device",
                                 options.device, fmt::join(names, " and "), names.size() == 1 ? "s" : "",
                                 names.size() == 1 ? "s" : ""));
  }
  if (options.list) {
    print_suite_list();
    return 0;
  }
  Config config = Config::from_environment();
  // Backends and device names are lower case, and HDSM_DEVICE takes them in any case: so does --device.
  std::string wanted = options.device;
  std::transform(wanted.begin(), wanted.end(), wanted.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const bool backend_named = names_a_backend(wanted);
  // A device of a backend the runtime opens only on request (opencl, cuda): ask for it, so the
  // suites' own runtimes, made from this configuration, open it too.
  if (backend_named) config.set("HDSM_DEVICE", wanted);
  if (wanted.starts_with("opencl")) config.set("HDSM_OPENCL", "on");
  if (wanted.starts_with("cuda")) config.set("HDSM_CUDA", "on");
  std::unique_ptr<Runtime> owned;
  try {
    owned = std::make_unique<Runtime>(config);
  } catch (const NoDevice& e) {
    if (!backend_named) throw;
    throw UsageError(fmt::format("--device {}: {}", options.device, e.what()));  // exit status 2
  }
  // An index or name that `hdsm info` lists may be a device of a backend opened on request only
  // (info opens them all): look for it there too, and measure with that runtime, whose list also
  // names every device where the name is none of them.
  if (!backend_named && !wanted.empty() && find_device(*owned, wanted) == nullptr)
    owned = runtime_with_every_backend();
  Runtime& runtime = *owned;
  Device& device = backend_named ? runtime.default_device() : select_device(runtime, wanted);

  const fs::path out(options.out);
  std::error_code error;
  fs::create_directories(out, error);
  if (error || !fs::is_directory(out))
    throw std::runtime_error(fmt::format("cannot create the output folder {}: {}", out.string(),
                                         error ? error.message() : "a file of that name exists"));
  // Before any suite runs: a folder that takes no files would lose every result at the end.
  const fs::path report = out / "report.md";
  try {
    write_file(out / ".hdsm-bench-write-check", "");
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("the output folder {} takes no files ({})", out.string(), e.what()));
  }
  fs::remove(out / ".hdsm-bench-write-check", error);
  // An earlier run's report would describe this run's files if this one is interrupted.
  fs::remove(report, error);

  const bool draw_plots = gnuplot_available();
  if (!draw_plots)
    fmt::print(stderr,
               "hdsm: gnuplot not found on the PATH: skipping plots (CSV, JSON and report.md are still "
               "written; install gnuplot-nox to get SVG plots)\n");

  const RunInfo run{utc_timestamp(),     version(),   host_name(),
                    device.properties(), device_used, changed_knobs(runtime.config()),
                    options.quick};
  std::vector<std::string_view> names;
  names.reserve(selected.size());
  for (const Suite* suite : selected) names.push_back(suite->name);
  fmt::print(stderr, "hdsm bench: {} on {}{}, output in {}\n", fmt::join(names, ", "),
             device_used ? device.name() : std::string("the host's CPUs"), options.quick ? " (quick)" : "",
             out.string());

  std::vector<SuiteOutcome> outcomes;
  bool ok = true;
  for (const Suite* suite : selected) {
    SuiteOutcome outcome;
    outcome.suite = suite;
    outcome.share_before = core_share();
    Stopwatch watch;
    const OtherWork others;
    {
      Progress progress(std::string(suite->name), stderr);
      SuiteContext context{runtime, device, options.quick, options.um, progress, outcome.results};
      try {
        suite->run(context);
      } catch (const std::exception& e) {
        progress.interrupt();
        outcome.error = e.what();
      }
    }
    outcome.seconds = watch.seconds();
    outcome.others_during = others.share();
    outcome.share_after = core_share();
    if (!outcome.failed()) {
      try {
        ok = write_suite_outputs(out, run, outcome, draw_plots) && ok;
      } catch (const std::exception& e) {  // the next suites still run, and the report says so
        outcome.error = fmt::format("its results could not be written: {}", e.what());
      }
    }
    if (outcome.failed()) {
      fmt::print(stderr, "hdsm: error: suite '{}' failed: {}\n", suite->name, outcome.error);
      remove_stale_outputs(out, outcome);
      ok = false;
    } else {
      fmt::print(stderr, "[{}] done in {:.1f} s\n", suite->name, outcome.seconds);
    }
    outcomes.push_back(std::move(outcome));
  }

  // The report first: standard output may fail (a full disk, a closed pipe), and the report is the
  // run's record.
  bool reported = true;
  try {
    write_file(report, report_markdown(run, outcomes));
  } catch (const std::exception& e) {
    fmt::print(stderr, "hdsm: error: {}\n", e.what());
    reported = false;
  }
  try {
    fmt::print("{}", summary_text(outcomes));
    if (options.quick) fmt::print("{}.\n", kQuickNote);
  } catch (const std::exception& e) {
    fmt::print(stderr, "hdsm: error: the summary could not be written to standard output: {}\n", e.what());
    ok = false;
  }
  if (!reported) return kExitFailure;
  fmt::print(stderr, "hdsm bench: wrote {}\n", report.string());
  return ok ? 0 : kExitFailure;
}

}  // namespace hdsm::tool
