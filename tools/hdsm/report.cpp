#include "report.hpp"

#include "plot.hpp"

#include "table.hpp"

#include <hdsm/error.hpp>

#include "os/cpu_binding.hpp"
#include "os/errno_text.hpp"
#include "os/files.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <map>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

namespace hdsm::tool {
namespace {

// Below this share of the cores for this process, the report calls the machine busy.
constexpr double kFreeShare = 0.8;

std::string csv_field(const Cell& cell) {
  std::string text = cell_text(cell);
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + '"';
}

nlohmann::ordered_json cell_json(const Cell& cell) {
  return std::visit([](const auto& v) { return nlohmann::ordered_json(v); }, cell);
}

nlohmann::ordered_json device_json(const DeviceProperties& p) {
  return {{"index", p.index},
          {"name", p.name},
          {"backend", std::string(to_string(p.backend))},
          {"memory_bytes", p.memory_bytes},
          {"copy_engines", p.copy_engines},
          {"peer_group", p.peer_group},
          {"link_gbps", p.link_gbps},
          {"latency_us", p.latency_us}};
}

std::string value_text(const SummaryItem& item) {
  if (item.unit == "x") return format_number(item.value) + "x";
  if (item.unit.empty()) return format_number(item.value);
  return fmt::format("{} {}", format_number(item.value), item.unit);
}

std::string describe_device(const DeviceProperties& p) {
  return fmt::format("{} ({}, {}, {} copy engines, link {}, latency {} us)", p.name, to_string(p.backend),
                     format_bytes(p.memory_bytes), p.copy_engines, link_text(p), p.latency_us);
}

std::string format_key(double x, ValueFormat format) {
  if (format == ValueFormat::bytes) return format_bytes(static_cast<std::size_t>(x));
  if (format == ValueFormat::integer) return fmt::format("{:.0f}", x);
  return format_number(x);
}

/// The data of a plot as a table: one row per x value, one column per series.
std::string pivot_markdown(const Results& results, const Plot& plot) {
  const PlotData data = plot_data(results, plot);
  std::map<double, std::map<std::string, double>> cells;
  for (const auto& s : data.series)
    for (const auto& [x, y] : s.points) cells[x][s.name] = y;
  std::vector<std::string> header{plot.x_label.empty() ? plot.x : plot.x_label};
  for (const auto& s : data.series) header.push_back(s.name);
  Table table(header);
  for (std::size_t c = 0; c < header.size(); ++c) table.align_right(c);
  for (const auto& [x, by_series] : cells) {
    std::vector<std::string> row{plot.categorical_x ? data.categories.at(static_cast<std::size_t>(x))
                                                    : format_key(x, plot.x_format)};
    for (const auto& s : data.series) {
      const auto it = by_series.find(s.name);
      row.push_back(it == by_series.end() ? "–" : format_number(it->second));
    }
    table.add_row(std::move(row));
  }
  return table.markdown();
}

std::string summary_markdown(const Results& results) {
  Table table({"metric", "value", "detail"});
  table.align_right(1);
  for (const auto& item : results.summary()) table.add_row({item.metric, value_text(item), item.detail});
  return table.markdown();
}

// The report's word on the machine's other work during a suite.
std::string busy_markdown(const SuiteOutcome& outcome, unsigned cores) {
  std::string md;
  bool busy = false;
  if (outcome.share_before >= 0 && outcome.share_after >= 0) {
    md += fmt::format(
        "Other work on the machine: spinning on each of the {} usable cores for 50 ms, this process got "
        "{:.2f} of their time before the suite and {:.2f} after it.",
        cores, outcome.share_before, outcome.share_after);
    busy = std::min(outcome.share_before, outcome.share_after) < kFreeShare;
  }
  if (outcome.others_during >= 0) {
    md += fmt::format(
        " During the suite, other processes (and the hypervisor) took {:.2f} of these cores' time.",
        outcome.others_during);
    busy = busy || outcome.others_during > 1 - kFreeShare;
  }
  if (md.empty()) return md;
  md += "\n\n";
  if (busy)
    md +=
        "**Other work competed for the cores: this suite's times and ratios may be off by any factor; "
        "rerun it on a quiet machine.**\n\n";
  return md;
}

}  // namespace

double core_share(std::chrono::milliseconds span) {
  const unsigned threads = std::max(1u, os::usable_cpus());
  std::vector<double> shares(threads, 0.0);
  const auto spin = [&](unsigned i) {
    timespec cpu0{}, cpu1{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
    const auto start = std::chrono::steady_clock::now();
    auto now = start;
    while (now - start < span) now = std::chrono::steady_clock::now();
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu1);
    const double cpu = static_cast<double>(cpu1.tv_sec - cpu0.tv_sec) +
                       static_cast<double>(cpu1.tv_nsec - cpu0.tv_nsec) * 1e-9;
    shares[i] = cpu / std::chrono::duration<double>(now - start).count();
  };
  std::vector<std::thread> spinners;
  for (unsigned i = 1; i < threads; ++i) spinners.emplace_back(spin, i);
  spin(0);
  for (auto& t : spinners) t.join();
  double sum = 0;
  for (const double s : shares) sum += std::min(1.0, s);
  return sum / threads;
}

std::string results_csv(const Results& results) {
  std::string out = fmt::format("{}\n", fmt::join(results.columns(), ","));
  for (const auto& row : results.rows()) {
    std::vector<std::string> fields;
    fields.reserve(row.size());
    for (const auto& cell : row) fields.push_back(csv_field(cell));
    out += fmt::format("{}\n", fmt::join(fields, ","));
  }
  return out;
}

nlohmann::ordered_json suite_json(const RunInfo& run, const SuiteOutcome& outcome) {
  const Results& results = outcome.results;
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  for (const auto& knob : run.knobs) config[knob.name] = knob.value;

  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& row : results.rows()) {
    nlohmann::ordered_json object = nlohmann::ordered_json::object();
    for (std::size_t c = 0; c < row.size(); ++c) object[results.columns()[c]] = cell_json(row[c]);
    rows.push_back(std::move(object));
  }
  nlohmann::ordered_json summary = nlohmann::ordered_json::array();
  for (const auto& item : results.summary())
    summary.push_back(
        {{"metric", item.metric}, {"value", item.value}, {"unit", item.unit}, {"detail", item.detail}});
  nlohmann::ordered_json plots = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < results.plots().size(); ++i) {
    const Plot& plot = results.plots()[i];
    plots.push_back({{"id", plot.id},
                     {"title", plot.title},
                     {"x", plot.x},
                     {"y", plot.y},
                     {"series", plot.series},
                     {"file", i < outcome.svg_files.size() && !outcome.svg_files[i].empty()
                                  ? nlohmann::ordered_json(outcome.svg_files[i])
                                  : nlohmann::ordered_json(nullptr)}});
  }
  return {{"suite", std::string(outcome.suite->name)},
          {"description", std::string(outcome.suite->description)},
          {"date", run.date},
          {"hdsm_version", run.version},
          {"host", run.host},
          {"device", outcome.suite->uses_device ? device_json(run.device) : nlohmann::ordered_json(nullptr)},
          {"non_default_knobs", config},
          {"quick", run.quick},
          {"seconds", outcome.seconds},
          {"core_share_before", outcome.share_before},
          {"core_share_after", outcome.share_after},
          {"others_share_during", outcome.others_during},
          {"columns", results.columns()},
          {"rows", rows},
          {"summary", summary},
          {"notes", results.notes()},
          {"plots", plots}};
}

std::string report_markdown(const RunInfo& run, std::span<const SuiteOutcome> outcomes) {
  std::string md = "# hdsm bench report\n\n";
  md += fmt::format(
      "- date: {}\n- hdsm version: {}\n- host: {}\n- device: {}\n- mode: {}\n", run.date, run.version,
      run.host, run.device_used ? describe_device(run.device) : "none (the suites run on the host's CPUs)",
      run.quick ? fmt::format("quick (--quick). {}", kQuickNote) : "full");
  if (run.knobs.empty()) {
    md += "- configuration: every knob at its default\n";
  } else {
    std::vector<std::string> knobs;
    knobs.reserve(run.knobs.size());
    for (const auto& k : run.knobs)
      knobs.push_back(fmt::format("`{}` = {} (default {})", k.name, display_value(k.type, k.value),
                                  display_value(k.type, k.default_value)));
    md += fmt::format("- configuration (non-default knobs): {}\n", fmt::join(knobs, ", "));
  }

  for (const SuiteOutcome& outcome : outcomes) {
    const std::string name(outcome.suite->name);
    md += fmt::format("\n## {}\n\n{}\n\n", name, outcome.suite->description);
    if (outcome.failed()) {
      // An error may run over lines (a program's output): a code block keeps its dashes and
      // hashes from turning into rules and headings.
      if (outcome.error.find('\n') == std::string::npos)
        md += fmt::format("**Failed** after {:.1f} s: {}\n", outcome.seconds, outcome.error);
      else
        md += fmt::format("**Failed** after {:.1f} s:\n\n```\n{}\n```\n", outcome.seconds, outcome.error);
      continue;
    }
    md += fmt::format("Ran in {:.1f} s. Data: [{}.csv]({}.csv), [{}.json]({}.json).\n\n", outcome.seconds,
                      name, name, name, name);
    if (!outcome.suite->uses_device && run.device_used)
      md += "It runs on the host's CPUs alone: the device above is not used.\n\n";
    md += busy_markdown(outcome, os::usable_cpus());
    if (!outcome.results.summary().empty())
      md += "### Summary\n\n" + summary_markdown(outcome.results) + "\n";
    if (!outcome.results.notes().empty()) {
      md += "Notes:\n\n";
      for (const auto& note : outcome.results.notes()) md += fmt::format("- {}\n", note);
      md += '\n';
    }
    const auto& plots = outcome.results.plots();
    for (std::size_t i = 0; i < plots.size(); ++i) {
      md += fmt::format("### {}\n\n", plots[i].title);
      if (i < outcome.svg_files.size() && !outcome.svg_files[i].empty())
        md += fmt::format("![{}]({})\n\n", plots[i].title, outcome.svg_files[i]);
      else
        md += fmt::format("(plot not drawn: {})\n\n", outcome.plot_problem);
      md += fmt::format("{} by {}:\n\n", plots[i].y_label.empty() ? plots[i].y : plots[i].y_label,
                        plots[i].x_label.empty() ? plots[i].x : plots[i].x_label);
      md += pivot_markdown(outcome.results, plots[i]) + "\n";
    }
  }
  while (md.size() >= 2 && md.ends_with("\n\n")) md.pop_back();
  return md;
}

std::string summary_text(std::span<const SuiteOutcome> outcomes) {
  Table table({"suite", "metric", "value", "detail"});
  table.align_right(2);
  for (const SuiteOutcome& outcome : outcomes) {
    const std::string name(outcome.suite->name);
    if (outcome.failed()) {
      // Its first line: the table's rows are lines (the whole error is on standard error and in the report).
      const std::string& error = outcome.error;
      const std::size_t end = error.find('\n');
      table.add_row({name, "FAILED", "", end == std::string::npos ? error : error.substr(0, end) + " ..."});
      continue;
    }
    if (outcome.results.summary().empty()) table.add_row({name, "(no summary)", "", ""});
    for (const auto& item : outcome.results.summary())
      table.add_row({name, item.metric, value_text(item), item.detail});
  }
  return table.text();
}

void write_file(const std::filesystem::path& path, std::string_view content) {
  if (const std::string failure = os::replace_file(path.string(), content, 0666); !failure.empty())
    throw std::runtime_error(fmt::format("cannot write {}: {}", path.string(), failure));
}

}  // namespace hdsm::tool
