// Configuration: every knob is an HDSM_* environment variable and a programmatic setting.
// The single list of knobs lives in src/runtime/knobs.def; docs/configuration.md is generated
// from it (`hdsm config --markdown`) and a test checks that the two agree.
#pragma once

// Every C++ header of the host API comes through here: say what is wrong before C++17's first
// error about std::span. (C programs include <hdsm/hdsm.h>; CUDA sources <hdsm/cuda.hpp>, which
// compiles as C++17 too.)
#if defined(__cplusplus) && __cplusplus < 202002L
#error "hdsm's C++ headers need C++20 (-std=c++20, or CMake's cxx_std_20 that hdsm::hdsm carries)"
#endif

#include <hdsm/export.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

HDSM_VISIBLE_BEGIN
namespace hdsm {

enum class KnobType { integer, size, real, boolean, choice, text, peer_groups };

/// One configuration knob as the documentation and validation see it.
struct KnobInfo {
  std::string_view name;  // "HDSM_SIM_DEVICES"
  KnobType type;
  std::string_view default_value;  // as it would be written in the environment
  std::string_view accepted;       // human description of the accepted values ("1..64")
  std::string_view description;
};

/// All knobs, in documentation order.
std::span<const KnobInfo> knobs();

/// A validated set of knob values: defaults, then the environment, then programmatic settings.
/// Values are kept as their validated text; typed accessors parse on demand.
class Config {
 public:
  /// Every knob at its default.
  static Config defaults();
  /// Defaults overridden by every HDSM_* variable of the process environment. An unknown HDSM_*
  /// variable or a malformed value throws ConfigError naming the variable, value and range.
  static Config from_environment();

  /// Set one knob programmatically; validates now and throws ConfigError when invalid.
  Config& set(std::string_view name, std::string_view value);
  /// The value of a knob as text; throws ConfigError for an unknown name.
  const std::string& get(std::string_view name) const;

  std::int64_t integer(std::string_view name) const;
  std::uint64_t size(std::string_view name) const;  // bytes
  double real(std::string_view name) const;
  bool boolean(std::string_view name) const;

 private:
  std::map<std::string, std::string, std::less<>> values_;
};

/// How hdsm's threads wait for each other's hand-offs (HDSM_WAIT_POLICY, HDSM_WAIT_SPIN_US): one
/// setting for the process, which each runtime (hdsm::Runtime, crc::Runtime, a cluster session)
/// sets from its own configuration as it starts.
struct WaitPolicy {
  enum class Kind { automatic, spin, block };
  Kind kind = Kind::automatic;
  std::uint32_t spin_us = 50;  // automatic: how long a wait spins before it sleeps

  /// HDSM_WAIT_POLICY and HDSM_WAIT_SPIN_US of `config`.
  static WaitPolicy from_config(const Config& config);
};

/// HDSM_* variables that test and benchmark programs read, not the library (HDSM_MODEL_*, HDSM_TEST_*,
/// HDSM_SOURCE_DIR): no configuration error names them as unknown.
bool is_program_variable(std::string_view name) noexcept;

/// Parse a byte size: "4096", "64K", "64KiB", "1.5G", "4 GiB". Throws InvalidArgument.
std::uint64_t parse_size(std::string_view text);

namespace detail {
/// The bytes of `n` elements of T for a typed allocation: SIZE_MAX where they overflow, which no
/// memory has (the allocation fails, naming the size), never n * sizeof(T) mod 2^64.
template <class T>
constexpr std::size_t bytes_of(std::size_t n) noexcept {
  return n > SIZE_MAX / sizeof(T) ? SIZE_MAX : n * sizeof(T);
}
}  // namespace detail

}  // namespace hdsm

HDSM_VISIBLE_END
