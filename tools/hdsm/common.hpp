// Small helpers shared by the subcommands of the hdsm tool.
#pragma once

#include <hdsm/config.hpp>
#include <hdsm/device.hpp>

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace hdsm::tool {

/// A mistake on the command line (unknown suite, unknown device): exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

inline constexpr std::size_t KiB = 1024;
inline constexpr std::size_t MiB = 1024 * KiB;
inline constexpr std::size_t GiB = 1024 * MiB;

/// A knob whose active value differs from its default.
struct ChangedKnob {
  std::string name;
  KnobType type;
  std::string value;  // as the configuration holds it (sizes in bytes)
  std::string default_value;
};

/// A knob value for people: sizes as "1 GiB", empty text as "(empty)", anything else unchanged.
std::string display_value(KnobType type, std::string_view value);

/// The knobs of `config` that differ from their defaults, in documentation order. Sizes and reals
/// are compared by value, so "4GiB" and "4 GiB" count as the same setting.
std::vector<ChangedKnob> changed_knobs(const Config& config);

std::string_view knob_type_name(KnobType type);

/// Compact byte count for axis labels and narrow columns: "4K", "64K", "1M", "256M", "1.5G".
std::string short_bytes(std::size_t bytes);

/// A rate in GB/s (1e9 bytes per second) with a precision that suits its magnitude.
std::string format_gbps(double gbps);
/// A device's link as its properties model it: "12 GB/s", "unthrottled" (a sim link modelled with
/// no limit) or "unknown" (a real device, which reports none).
std::string link_text(const DeviceProperties& p);

/// A plain number with about three significant digits and no exponent for everyday magnitudes.
std::string format_number(double value);
/// "met" or "missed": how a summary line's detail says whether its figure reached its target.
inline std::string verdict(bool met) { return met ? "met" : "missed"; }
/// A child's wait status (pclose, waitpid) in words: "exit code 1", "signal 9".
std::string wait_status_text(int status);

/// Current UTC time as ISO 8601 ("2024-05-01T12:34:56Z").
std::string utc_timestamp();

/// The path of `name`, a program of hdsm's that `hdsm bench` starts: next to this tool (the build
/// tree), or in the libexec directory it was installed with. std::runtime_error naming both places
/// when neither holds it.
std::string companion_program(std::string_view name);
/// `text` quoted for /bin/sh (a popen command line).
std::string shell_quoted(std::string_view text);

/// What a companion program run by run_reporting() left: its wait status and the lines that were
/// not data (for the error message when it failed).
struct CommandResult {
  int status = 0;
  std::string other_lines;
};
/// Runs `command` with /bin/sh and gives each line of its output that starts with "csv," to `row`
/// as the comma-separated fields after it; `other` sees the remaining lines first and returns true
/// for those it took. A row with a field count other than `fields`, or whose numbers do not parse
/// (std::invalid_argument, std::out_of_range from `row`), is a std::runtime_error naming `who` and
/// the line. The command is always waited for, also when `row` throws.
CommandResult run_reporting(const std::string& command, std::string_view who, std::size_t fields,
                            const std::function<void(const std::vector<std::string>&)>& row,
                            const std::function<bool(const std::string&)>& other = {});

}  // namespace hdsm::tool
