// What `hdsm bench` writes: per suite a CSV and a JSON file, and one report.md for the whole run;
// plus the summary table printed at the end.
#pragma once

#include "common.hpp"
#include "suite.hpp"

#include <hdsm/device.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
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
  bool device_used = true;         // false: no suite of the run uses a device
  std::vector<ChangedKnob> knobs;  // non-default configuration
  bool quick = false;
};

/// What running one suite gave.
struct SuiteOutcome {
  const Suite* suite = nullptr;
  Results results;
  double seconds = 0;
  // The share of the usable cores this process got just before and after the suite (core_share());
  // negative where not measured.
  double share_before = -1, share_after = -1;
  // The share of the usable cores' time other work took during the suite (OtherWork); negative where
  // not measured.
  double others_during = -1;
  std::string error;                   // empty when the suite succeeded
  std::vector<std::string> svg_files;  // per plot of results: file name in the output folder, or empty
  std::string plot_problem;            // why plots are missing, if they are
  bool failed() const { return !error.empty(); }
};

/// The share of CPU time one spinning thread per usable core gets over `span` (1: the cores were
/// free): other work on the machine, whatever the container counts, makes a benchmark's times
/// unreliable when it takes the cores.
double core_share(std::chrono::milliseconds span = std::chrono::milliseconds(50));

std::string results_csv(const Results& results);
nlohmann::ordered_json suite_json(const RunInfo& run, const SuiteOutcome& outcome);
std::string report_markdown(const RunInfo& run, std::span<const SuiteOutcome> outcomes);
/// The table printed on stdout at the end: suite, metric, value, detail.
std::string summary_text(std::span<const SuiteOutcome> outcomes);

/// What a quick run's figures are, in the report and under the summary.
inline constexpr std::string_view kQuickNote =
    "A quick run checks that every experiment works: one run of each at small sizes, so its ratios, and "
    "the targets they meet or miss, are not measurements";

/// Write a whole file; throws std::runtime_error naming the path.
void write_file(const std::filesystem::path& path, std::string_view content);

}  // namespace hdsm::tool
