#include "common.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <sstream>
#include <system_error>
#include <utility>

namespace hdsm::tool {
namespace {

bool same_value(const KnobInfo& knob, const std::string& value) {
  if (value == knob.default_value) return true;
  try {
    switch (knob.type) {
      case KnobType::size:
        return parse_size(value) == parse_size(knob.default_value);
      case KnobType::real:
        return std::stod(value) == std::stod(std::string(knob.default_value));
      default:
        return false;
    }
  } catch (const std::exception&) {
    return false;  // not comparable as numbers (e.g. an empty default): the texts decide
  }
}

}  // namespace

std::vector<ChangedKnob> changed_knobs(const Config& config) {
  std::vector<ChangedKnob> changed;
  for (const KnobInfo& knob : knobs()) {
    const std::string& value = config.get(knob.name);
    if (!same_value(knob, value))
      changed.push_back({std::string(knob.name), knob.type, value, std::string(knob.default_value)});
  }
  return changed;
}

std::string display_value(KnobType type, std::string_view value) {
  if (value.empty()) return "(empty)";
  if (type == KnobType::size) {
    try {
      return format_bytes(parse_size(value));
    } catch (const std::exception&) {
      // not a size after all: show the text
    }
  }
  return std::string(value);
}

std::string_view knob_type_name(KnobType type) {
  switch (type) {
    case KnobType::integer:
      return "integer";
    case KnobType::size:
      return "size";
    case KnobType::real:
      return "real";
    case KnobType::boolean:
      return "boolean";
    case KnobType::choice:
      return "choice";
    case KnobType::text:
      return "text";
    case KnobType::peer_groups:
      return "peer groups";
  }
  return "unknown";
}

std::string short_bytes(std::size_t bytes) {
  static constexpr const char* units[] = {"", "K", "M", "G", "T"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  if (value == std::floor(value)) return fmt::format("{}{}", static_cast<std::uint64_t>(value), units[unit]);
  return fmt::format("{:.1f}{}", value, units[unit]);
}

std::string format_gbps(double gbps) { return fmt::format("{} GB/s", format_number(gbps)); }

std::string link_text(const DeviceProperties& p) {
  if (p.link_gbps > 0) return fmt::format("{} GB/s", p.link_gbps);
  return p.backend == Backend::sim ? "unthrottled" : "unknown";
}

std::string format_number(double value) {
  const double magnitude = std::fabs(value);
  if (value == 0) return "0";
  if (magnitude >= 100) return fmt::format("{:.0f}", value);
  if (magnitude >= 10) return fmt::format("{:.1f}", value);
  // Three significant digits below 10: ratios near 1 read 0.955 or 1.04, never 0.96 beside a
  // summary's 0.955, and 0.0933 keeps as many digits as 0.16 shows.
  return fmt::format("{:#.3g}", value);  // '#' keeps the zeros: 1.00, not 1
}

std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string companion_program(std::string_view name) {
  std::error_code error;
  const std::filesystem::path tool = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw SystemError("readlink", "/proc/self/exe (where hdsm's bench programs lie)", error.value());
  const std::filesystem::path here = tool.parent_path();
#if defined(HDSM_LIBEXEC_FROM_BIN)
  const std::filesystem::path installed = here / HDSM_LIBEXEC_FROM_BIN / name;
#else
  const std::filesystem::path installed = here / name;
#endif
  for (const std::filesystem::path& p : {here / name, installed})
    if (::access(p.c_str(), X_OK) == 0) return p.lexically_normal().string();
  throw std::runtime_error(fmt::format("{} is neither next to {} nor in {}: install hdsm with it", name,
                                       tool.string(), installed.parent_path().lexically_normal().string()));
}

std::string shell_quoted(std::string_view text) {
  std::string quoted = "'";
  for (const char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

CommandResult run_reporting(const std::string& command, std::string_view who, std::size_t fields,
                            const std::function<void(const std::vector<std::string>&)>& row,
                            const std::function<bool(const std::string&)>& other) {
  // pclose on every way out: a throw below must not leave the child unwaited and the pipe open.
  struct Pipe {
    std::FILE* file;
    explicit Pipe(std::FILE* f) : file(f) {}
    Pipe(const Pipe&) = delete;
    Pipe& operator=(const Pipe&) = delete;
    ~Pipe() {
      if (file != nullptr) (void)::pclose(file);
    }
    int close() { return ::pclose(std::exchange(file, nullptr)); }
  };
  // NOLINTNEXTLINE(bugprone-command-processor): the callers' commands are the build's own programs
  Pipe pipe{::popen(command.c_str(), "r")};
  if (pipe.file == nullptr) throw SystemError("popen", command, errno);
  CommandResult result;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe.file) != nullptr) {
    std::string text(buffer);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    if (other && other(text)) continue;
    if (text.rfind("csv,", 0) != 0) {
      result.other_lines += text + "\n";
      continue;
    }
    std::vector<std::string> f;
    std::stringstream in(text.substr(4));
    for (std::string cell; std::getline(in, cell, ',');) f.push_back(cell);
    try {
      if (f.size() != fields) throw std::invalid_argument("field count");
      row(f);
    } catch (const std::logic_error&) {  // std::stoull and friends: invalid_argument, out_of_range
      throw std::runtime_error(fmt::format("{}: malformed line from '{}': {}", who, command, text));
    }
  }
  result.status = pipe.close();
  return result;
}

std::string wait_status_text(int status) {
  if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("signal {}", WTERMSIG(status));
  return fmt::format("wait status {}", status);
}

}  // namespace hdsm::tool
