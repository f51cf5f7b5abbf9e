// The registry of `hdsm bench` suites and what a suite works with: the runtime, the chosen device,
// a progress reporter and a result sink (one table of named columns, plots, summary lines).
//
// A new suite is a file suite_<name>.cpp defining `hdsm::tool::Suite <name>_suite()` plus one line
// HDSM_SUITE(<name>) in suites.def.
#pragma once

#include <hdsm/device.hpp>
#include <hdsm/runtime.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace hdsm::tool {

/// One value of a result row.
using Cell = std::variant<std::int64_t, double, std::string>;

/// How axis values and table keys of a column are written.
enum class ValueFormat { number, bytes, integer };

/// One plot of a suite's results: y against x, one line per distinct value of the series column.
struct Plot {
  std::string id;  // the SVG is <suite>-<id>.svg
  std::string title;
  std::string x;  // column names of the result table
  std::string y;
  std::string series;
  std::string x_label;
  std::string y_label;
  bool log_x = false;
  bool log_y = false;
  ValueFormat x_format = ValueFormat::number;
  /// x holds names (apps, versions): one group of bars per name instead of lines.
  bool categorical_x = false;
  /// Only the rows whose every `where` column reads its value (a suite's table may hold several
  /// experiments); empty: every row.
  std::vector<std::pair<std::string, std::string>> where;
};

/// One line of a suite's summary: a derived figure with the numbers it came from.
struct SummaryItem {
  std::string metric;
  double value = 0;
  std::string unit;  // "x" for ratios, "GB/s", ...
  std::string detail;
};

/// Everything a suite produces.
class Results {
 public:
  /// Declare the columns once, before the first row.
  void set_columns(std::vector<std::string> names);
  /// A row naming every declared column once; throws std::logic_error otherwise.
  void add_row(std::initializer_list<std::pair<std::string_view, Cell>> cells);
  /// Declare a plot; its columns must exist.
  void add_plot(Plot plot);
  void add_summary(SummaryItem item);
  /// A remark for the report (a skipped series, a clamped size range).
  void add_note(std::string note);

  const std::vector<std::string>& columns() const { return columns_; }
  const std::vector<std::vector<Cell>>& rows() const { return rows_; }
  const std::vector<Plot>& plots() const { return plots_; }
  const std::vector<SummaryItem>& summary() const { return summary_; }
  const std::vector<std::string>& notes() const { return notes_; }

  /// Index of a column; throws std::logic_error naming the known columns.
  std::size_t column(std::string_view name) const;

 private:
  std::vector<std::string> columns_;
  std::vector<std::vector<Cell>> rows_;
  std::vector<Plot> plots_;
  std::vector<SummaryItem> summary_;
  std::vector<std::string> notes_;
};

/// A number as a double (integers converted); throws std::logic_error for text.
double cell_number(const Cell& cell);
/// A cell as text (numbers in their shortest exact form).
std::string cell_text(const Cell& cell);

/// One line per measurement on stderr: "[transfer  12/68] H2D pinned 64 MiB ... 2.95 GB/s". On a
/// terminal the line is shown while the measurement runs and completed in place.
class Progress {
 public:
  Progress(std::string suite, std::FILE* stream);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// Number of steps the suite expects to report (for the "12/68" counter); may be revised.
  void set_total(std::size_t steps) { total_ = steps; }
  std::size_t total() const { return total_; }
  /// A measurement starts; `what` says what is measured.
  void start(std::string_view what);
  /// The measurement started last has finished with this result.
  void finish(std::string_view result);
  /// A line that is not a measurement (a skipped series, a warning).
  void note(std::string_view text);
  /// End a line left open by start() (after an error).
  void interrupt();

 private:
  std::string prefix() const;
  std::string suite_;
  std::FILE* stream_;
  bool tty_;
  bool open_ = false;
  std::size_t step_ = 0;
  std::size_t total_ = 0;
  std::string what_;
};

struct SuiteContext {
  Runtime& runtime;
  Device& device;
  bool quick;
  /// `--um`: measure unified memory (HDSM_PROTOCOL=um) where a suite can, on any device that has
  /// it (the adsm suite always does on CUDA devices).
  bool um;
  Progress& progress;
  Results& results;
};

struct Suite {
  std::string_view name;
  std::string_view description;  // one line
  void (*run)(SuiteContext& context);
  /// false: the suite runs on the host's CPUs alone (crc, cluster); the chosen device is not used.
  bool uses_device = true;
};

/// Every registered suite, in the order of suites.def.
std::span<const Suite> suites();
/// The suite with this name, or nullptr.
const Suite* find_suite(std::string_view name);

}  // namespace hdsm::tool
