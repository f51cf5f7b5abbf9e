#include "suite.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include <unistd.h>

namespace hdsm::tool {

#define HDSM_SUITE(name) Suite name##_suite();
#include "suites.def"
#undef HDSM_SUITE

std::span<const Suite> suites() {
  static const std::vector<Suite> list = {
#define HDSM_SUITE(name) name##_suite(),
#include "suites.def"
#undef HDSM_SUITE
  };
  return list;
}

const Suite* find_suite(std::string_view name) {
  for (const Suite& suite : suites())
    if (suite.name == name) return &suite;
  return nullptr;
}

void Results::set_columns(std::vector<std::string> names) {
  if (!rows_.empty()) throw std::logic_error("result columns must be declared before the first row");
  columns_ = std::move(names);
}

std::size_t Results::column(std::string_view name) const {
  const auto it = std::find(columns_.begin(), columns_.end(), name);
  if (it == columns_.end())
    throw std::logic_error(
        fmt::format("no result column '{}' (columns: {})", name, fmt::join(columns_, ", ")));
  return static_cast<std::size_t>(it - columns_.begin());
}

void Results::add_row(std::initializer_list<std::pair<std::string_view, Cell>> cells) {
  if (cells.size() != columns_.size())
    throw std::logic_error(fmt::format("result row has {} cells, but there are {} columns ({})", cells.size(),
                                       columns_.size(), fmt::join(columns_, ", ")));
  std::vector<Cell> row(columns_.size());
  std::vector<bool> seen(columns_.size(), false);
  for (const auto& [name, value] : cells) {
    const std::size_t c = column(name);
    if (seen[c]) throw std::logic_error(fmt::format("result row names column '{}' twice", name));
    seen[c] = true;
    row[c] = value;
  }
  rows_.push_back(std::move(row));
}

void Results::add_plot(Plot plot) {
  column(plot.x);
  column(plot.y);
  column(plot.series);
  for (const auto& [c, value] : plot.where) column(c);
  plots_.push_back(std::move(plot));
}

void Results::add_summary(SummaryItem item) { summary_.push_back(std::move(item)); }

void Results::add_note(std::string note) { notes_.push_back(std::move(note)); }

double cell_number(const Cell& cell) {
  if (const auto* i = std::get_if<std::int64_t>(&cell)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&cell)) return *d;
  throw std::logic_error(fmt::format("result value '{}' is not a number", std::get<std::string>(cell)));
}

std::string cell_text(const Cell& cell) {
  return std::visit([](const auto& v) { return fmt::format("{}", v); }, cell);
}

Progress::Progress(std::string suite, std::FILE* stream)
    : suite_(std::move(suite)), stream_(stream), tty_(isatty(fileno(stream)) == 1) {}

Progress::~Progress() { interrupt(); }

std::string Progress::prefix() const {
  if (total_ == 0) return fmt::format("[{} {}]", suite_, step_);
  const std::size_t width = fmt::formatted_size("{}", total_);
  return fmt::format("[{} {:>{}}/{}]", suite_, step_, width, total_);
}

void Progress::start(std::string_view what) {
  interrupt();
  ++step_;
  what_ = what;
  if (tty_) {
    fmt::print(stream_, "{} {} ...", prefix(), what_);
    std::fflush(stream_);
    open_ = true;
  }
}

void Progress::finish(std::string_view result) {
  if (open_) {
    fmt::print(stream_, " {}\n", result);
    open_ = false;
  } else {
    fmt::print(stream_, "{} {} ... {}\n", prefix(), what_, result);
  }
  std::fflush(stream_);
}

void Progress::note(std::string_view text) {
  interrupt();
  fmt::print(stream_, "[{}] {}\n", suite_, text);
  std::fflush(stream_);
}

void Progress::interrupt() {
  if (!open_) return;
  std::fputc('\n', stream_);  // no fmt here: this runs from the destructor and must not throw
  std::fflush(stream_);
  open_ = false;
}

}  // namespace hdsm::tool
