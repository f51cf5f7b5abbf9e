#include "plot.hpp"

#include "common.hpp"
#include "report.hpp"

#include "os/errno_text.hpp"
#include "os/files.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace hdsm::tool {
namespace {

constexpr std::string_view kGnuplot = "gnuplot";
constexpr std::size_t kMaxTicLabels = 9;

/// A gnuplot single-quoted string literal (a quote inside is doubled, a control character is a
/// space: a newline would end the command, and the rest of the text would run as gnuplot's own).
std::string gnuplot_string(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += '\'';
    out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c;
  }
  out += '\'';
  return out;
}

// The smallest and largest x of every series' points.
struct XRange {
  double lo = 0, hi = 0;
  bool any = false;
};
XRange x_range(const std::vector<PlotSeries>& series) {
  XRange r;
  for (const auto& s : series)
    for (const auto& p : s.points) {
      r.lo = r.any ? std::min(r.lo, p.first) : p.first;
      r.hi = r.any ? std::max(r.hi, p.first) : p.first;
      r.any = true;
    }
  return r;
}

std::string byte_tics(const std::vector<PlotSeries>& series) {
  std::vector<double> xs;
  for (const auto& s : series)
    for (const auto& p : s.points) xs.push_back(p.first);
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  const std::size_t every = (xs.size() + kMaxTicLabels - 1) / kMaxTicLabels;
  std::vector<std::string> tics;
  for (std::size_t i = 0; i < xs.size(); i += std::max<std::size_t>(every, 1))
    tics.push_back(fmt::format("{} {}", gnuplot_string(short_bytes(static_cast<std::size_t>(xs[i]))), xs[i]));
  return fmt::format("set xtics ({})\n", fmt::join(tics, ", "));
}

std::string find_in_path(std::string_view program) {
  const char* path = std::getenv("PATH");  // NOLINT(concurrency-mt-unsafe): nothing sets the environment
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const std::size_t colon = dirs.find(':');
    const std::string_view dir = dirs.substr(0, colon);
    std::string candidate = fmt::format("{}/{}", dir.empty() ? std::string_view(".") : dir, program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) return {};
    dirs.remove_prefix(colon + 1);
  }
}

/// Ignores SIGPIPE while alive, so a gnuplot that dies early turns into EPIPE, not our death.
class IgnoreSigpipe {
 public:
  IgnoreSigpipe() {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &previous_);
  }
  ~IgnoreSigpipe() { sigaction(SIGPIPE, &previous_, nullptr); }
  IgnoreSigpipe(const IgnoreSigpipe&) = delete;
  IgnoreSigpipe& operator=(const IgnoreSigpipe&) = delete;

 private:
  struct sigaction previous_ {};
};

/// Start gnuplot with its stdin on a pipe and its stdout on `output` (where the SVG goes); returns
/// its pid and the write end of the pipe.
std::pair<pid_t, int> spawn_gnuplot(const Plot& plot, int output) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    throw std::runtime_error(fmt::format("plot '{}': pipe failed: {}", plot.id, os::errno_text(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, output, STDOUT_FILENO);
  char arg0[] = "gnuplot";
  char* argv[] = {arg0, nullptr};
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, arg0, &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[0]);
  if (err != 0) {
    close(fds[1]);
    throw std::runtime_error(
        fmt::format("plot '{}': cannot start {}: {}", plot.id, kGnuplot, os::errno_text(err)));
  }
  return {pid, fds[1]};
}

/// gnuplot's exit status; one that has not exited after kPlotSeconds is killed (a plot takes well
/// under a second), so a hung gnuplot cannot hold the benchmark's results back forever.
constexpr int kPlotSeconds = 120;
int wait_for(pid_t pid, const Plot& plot) {
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kPlotSeconds);
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0 && errno != EINTR)
      throw std::runtime_error(
          fmt::format("plot '{}': waitpid on {} failed: {}", plot.id, kGnuplot, os::errno_text(errno)));
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      throw std::runtime_error(
          fmt::format("plot '{}': {} did not finish within {} s", plot.id, kGnuplot, kPlotSeconds));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

/// The whole content of the memory file `fd`, from its start.
std::string read_all(int fd, const Plot& plot) {
  std::string text;
  char buffer[65536];
  for (off_t offset = 0;;) {
    const ssize_t n = pread(fd, buffer, sizeof buffer, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw std::runtime_error(
          fmt::format("plot '{}': reading {}'s output failed: {}", plot.id, kGnuplot, os::errno_text(errno)));
    if (n == 0) return text;
    text.append(buffer, static_cast<std::size_t>(n));
    offset += n;
  }
}

/// `text` as XML character data.
std::string xml_text(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else
      out += c;
  }
  return out;
}

}  // namespace

PlotData plot_data(const Results& results, const Plot& plot) {
  const std::size_t xc = results.column(plot.x), yc = results.column(plot.y),
                    sc = results.column(plot.series);
  std::vector<std::pair<std::size_t, std::string>> where;
  where.reserve(plot.where.size());
  for (const auto& [column, value] : plot.where) where.emplace_back(results.column(column), value);
  PlotData data;
  for (const auto& row : results.rows()) {
    if (std::any_of(where.begin(), where.end(),
                    [&](const auto& w) { return cell_text(row[w.first]) != w.second; }))
      continue;
    if (const auto* text = std::get_if<std::string>(&row[yc]); text != nullptr && text->empty())
      continue;  // a row without a value for y (a ratio that does not apply) is no point
    const std::string name = cell_text(row[sc]);
    auto it = std::find_if(data.series.begin(), data.series.end(),
                           [&](const PlotSeries& s) { return s.name == name; });
    if (it == data.series.end()) it = data.series.insert(data.series.end(), PlotSeries{name, {}});
    double x = 0;
    if (plot.categorical_x) {
      const std::string category = cell_text(row[xc]);
      auto c = std::find(data.categories.begin(), data.categories.end(), category);
      if (c == data.categories.end()) c = data.categories.insert(data.categories.end(), category);
      x = static_cast<double>(c - data.categories.begin());
    } else {
      x = cell_number(row[xc]);
    }
    it->points.emplace_back(x, cell_number(row[yc]));
  }
  for (auto& s : data.series) std::sort(s.points.begin(), s.points.end());
  return data;
}

bool gnuplot_available() { return !find_in_path(kGnuplot).empty(); }

std::string gnuplot_script(const Results& results, const Plot& plot) {
  const PlotData data = plot_data(results, plot);
  const std::vector<PlotSeries>& series = data.series;
  const std::vector<std::string>& categories = data.categories;
  std::string script;
  script += "set terminal svg size 900,560 dynamic noenhanced font 'sans,12' background rgb 'white'\n";
  script += "set output\n";  // stdout, which render_svg reads: no file name reaches the script
  script += fmt::format("set title {}\n", gnuplot_string(plot.title));
  script += fmt::format("set xlabel {}\n", gnuplot_string(plot.x_label.empty() ? plot.x : plot.x_label));
  script += fmt::format("set ylabel {}\n", gnuplot_string(plot.y_label.empty() ? plot.y : plot.y_label));
  script += "set grid\nset key outside right top\nset pointsize 0.8\n";
  if (plot.log_x) {
    script += fmt::format("set logscale x {}\n", plot.x_format == ValueFormat::bytes ? 2 : 10);
    // Pad the range so the first and last points (and their tic labels) sit inside the border.
    const XRange x = x_range(series);
    if (x.any && x.lo > 0) script += fmt::format("set xrange [{}:{}]\n", x.lo / 1.5, x.hi * 1.5);
  }
  if (plot.categorical_x) {
    std::vector<std::string> tics;
    tics.reserve(categories.size());
    for (std::size_t i = 0; i < categories.size(); ++i)
      tics.push_back(fmt::format("{} {}", gnuplot_string(categories[i]), i));
    script += fmt::format("set xtics ({})\nset xrange [-0.6:{}]\nset style fill solid 0.8 border -1\n",
                          fmt::join(tics, ", "), static_cast<double>(categories.size()) - 0.4);
  }
  if (plot.log_y) script += "set logscale y 10\n";
  // Bars on a log axis grow from the bottom of the range: start below 1 so ratios of 1 show.
  if (plot.log_y && plot.categorical_x) script += "set yrange [0.25:*]\n";
  if (plot.x_format == ValueFormat::bytes) script += byte_tics(series);
  if (plot.x_format == ValueFormat::integer) {
    // A tic at every count where they are few (workers on a small host), gnuplot's own beyond.
    const XRange x = x_range(series);
    if (x.hi - x.lo <= 24) script += "set xtics 1\n";
    script += "set format x '%.0f'\n";
  }
  if (!plot.log_y) script += "set yrange [0:*]\n";

  std::vector<std::string> lines;
  for (std::size_t i = 0; i < series.size(); ++i) {
    script += fmt::format("$s{} << EOD\n", i);
    // Bars of one category sit side by side, one slot per series, within 0.8 of an x unit.
    const double width = 0.8 / static_cast<double>(series.size());
    const double shift = plot.categorical_x ? (static_cast<double>(i) + 0.5) * width - 0.4 : 0.0;
    for (const auto& [x, y] : series[i].points) script += fmt::format("{} {}\n", x + shift, y);
    script += "EOD\n";
    lines.push_back(plot.categorical_x ? fmt::format("$s{} using 1:2:({}) with boxes title {}", i, width,
                                                     gnuplot_string(series[i].name))
                                       : fmt::format("$s{} using 1:2 with linespoints lw 2 title {}", i,
                                                     gnuplot_string(series[i].name)));
  }
  if (lines.empty()) throw std::runtime_error(fmt::format("plot '{}' has no data", plot.id));
  script += fmt::format("plot {}\nset output\n", fmt::join(lines, ", \\\n     "));
  return script;
}

void render_svg(const Results& results, const Plot& plot, const std::filesystem::path& svg) {
  const std::string script = gnuplot_script(results, plot);
  // gnuplot's output goes to a memory file, checked before it is written out under its name.
  struct Descriptor {
    int fd;
    ~Descriptor() { close(fd); }
    int get() const { return fd; }
  };
  const int memory = memfd_create("hdsm bench plot", MFD_CLOEXEC);
  if (memory < 0)
    throw std::runtime_error(
        fmt::format("plot '{}': memfd_create failed: {}", plot.id, os::errno_text(errno)));
  const Descriptor output{memory};

  IgnoreSigpipe guard;
  const auto [pid, fd] = spawn_gnuplot(plot, output.get());
  const bool written = os::write_all(fd, script);
  const int write_errno = errno;
  close(fd);
  const int status = wait_for(pid, plot);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error(fmt::format("plot '{}': {} failed ({}) drawing {}", plot.id, kGnuplot,
                                         WIFEXITED(status)
                                             ? fmt::format("exit status {}", WEXITSTATUS(status))
                                             : fmt::format("signal {}", WTERMSIG(status)),
                                         svg.string()));
  if (!written)
    throw std::runtime_error(fmt::format("plot '{}': writing the script to {} failed: {}", plot.id, kGnuplot,
                                         os::errno_text(write_errno)));
  std::string text = read_all(output.get(), plot);
  // gnuplot exits 0 whatever happened to its output: only a whole document counts as drawn.
  const std::size_t end = text.find_last_not_of(" \n\r\t");
  if (end == std::string::npos || end < 5 || text.compare(end - 5, 6, "</svg>") != 0)
    throw std::runtime_error(fmt::format("plot '{}': {} wrote no complete SVG document ({} bytes) for {}",
                                         plot.id, kGnuplot, text.size(), svg.string()));
  // Its <title> says "Gnuplot": the plot's own is the one a viewer should show.
  constexpr std::string_view kDefaultTitle = "<title>Gnuplot</title>";
  if (const std::size_t at = text.find(kDefaultTitle); at != std::string::npos)
    text.replace(at, kDefaultTitle.size(), fmt::format("<title>{}</title>", xml_text(plot.title)));
  write_file(svg, text);
}

}  // namespace hdsm::tool
