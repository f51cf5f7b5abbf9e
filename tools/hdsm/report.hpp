// What `hdsm bench` writes: per suite a CSV and a JSON file, and one report.md for the whole run;
// plus the summary table printed at the end.
#pragma once

#include "common.hpp"
#include "suite.hpp"

#include <hdsm/device.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hdsm::tool {

/// Facts about one `hdsm bench` run that every output repeats.
struct RunInfo {
  std::string date;     // ISO 8601, UTC
  std::string version;  // hdsm::version()
  std::string host;
  DeviceProperties device;
  std::vector<ChangedKnob> knobs;  // non-default configuration
  bool quick = false;
};

/// What running one suite gave.
struct SuiteOutcome {
  const Suite* suite = nullptr;
  Results results;
  double seconds = 0;
  // Threads of other processes ready to run, on average, just before and after the suite
  // (other_runnable()); negative where /proc/loadavg could not be read.
  double busy_before = -1, busy_after = -1;
  std::string error;                   // empty when the suite succeeded
  std::vector<std::string> svg_files;  // per plot of results: file name in the output folder, or empty
  std::string plot_problem;            // why plots are missing, if they are
  bool failed() const { return !error.empty(); }
};

/// The threads other than the caller that are ready to run, averaged over `samples` looks at
/// /proc/loadavg 20 ms apart: the machine's other work, which makes a benchmark's times unreliable
/// when it needs the cores. Negative where the file cannot be read.
double other_runnable(int samples = 10);

std::string results_csv(const Results& results);
nlohmann::ordered_json suite_json(const RunInfo& run, const SuiteOutcome& outcome);
std::string report_markdown(const RunInfo& run, std::span<const SuiteOutcome> outcomes);
/// The table printed on stdout at the end: suite, metric, value, detail.
std::string summary_text(std::span<const SuiteOutcome> outcomes);

/// Write a whole file; throws std::runtime_error naming the path.
void write_file(const std::filesystem::path& path, std::string_view content);

}  // namespace hdsm::tool
