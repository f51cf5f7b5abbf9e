#include <hdsm/config.hpp>
#include <hdsm/error.hpp>

#include "device/sim/peer_groups.hpp"
#include "os/spin_wait.hpp"
#include "runtime/knobs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

extern char** environ;

namespace hdsm {
namespace {

struct KnobSpec {
  KnobInfo info;
  double min, max;
};

constexpr KnobSpec kKnobs[] = {
#define HDSM_KNOB(id, name, type, def, accepted, lo, hi, desc) \
  {{name, KnobType::type, def, accepted, desc}, static_cast<double>(lo), static_cast<double>(hi)},
#include "runtime/knobs.def"
#undef HDSM_KNOB
};

const KnobInfo kInfos[] = {
#define HDSM_KNOB(id, name, type, def, accepted, lo, hi, desc) {name, KnobType::type, def, accepted, desc},
#include "runtime/knobs.def"
#undef HDSM_KNOB
};

const KnobSpec* find_knob(std::string_view name) {
  for (const auto& k : kKnobs)
    if (k.info.name == name) return &k;
  return nullptr;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool parse_double(std::string_view text, double& out) {
  text = trim(text);
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && end == text.data() + text.size() && std::isfinite(out);
}

bool parse_bool(std::string_view text, bool& out) {
  const std::string t = lower(trim(text));
  if (t == "1" || t == "true" || t == "on" || t == "yes") return out = true, true;
  if (t == "0" || t == "false" || t == "off" || t == "no") return out = false, true;
  return false;
}

[[noreturn]] void invalid(const KnobSpec& k, std::string_view value, std::string_view why) {
  throw ConfigError(
      fmt::format("{}={} is invalid: {}; accepted: {}", k.info.name, value, why, k.info.accepted));
}

void check_range(const KnobSpec& k, std::string_view value, double v) {
  if (v < k.min || v > k.max) invalid(k, value, "out of range");
}

// Validates `value` for knob `k` and returns its canonical text.
std::string validate(const KnobSpec& k, std::string_view value) {
  switch (k.info.type) {
    case KnobType::integer: {
      std::int64_t v = 0;
      const auto t = trim(value);
      const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (t.empty() || ec != std::errc{} || end != t.data() + t.size()) invalid(k, value, "not an integer");
      check_range(k, value, static_cast<double>(v));
      return std::to_string(v);
    }
    case KnobType::size: {
      std::uint64_t v = 0;
      try {
        v = parse_size(value);
      } catch (const InvalidArgument& e) {
        invalid(k, value, "not a byte size (examples: 4096, 64KiB, 4GiB)");
      }
      check_range(k, value, static_cast<double>(v));
      // The sizes whose accepted values say "a power of two" are refused here, where every program
      // and `hdsm info` see it, not only when a subsystem first uses them.
      if (k.info.accepted.find("power of two") != std::string_view::npos && v != 0 && !std::has_single_bit(v))
        invalid(k, value, "not a power of two");
      return std::to_string(v);
    }
    case KnobType::real: {
      double v = 0;
      if (!parse_double(value, v)) invalid(k, value, "not a number");
      check_range(k, value, v);
      // No knob means anything by a rate or time that small, and a rate divides: 1e-300 GB/s would
      // make a copy's modelled time overflow.
      if (v != 0 && std::abs(v) < 1e-6) invalid(k, value, "too small: 0, or at least 1e-6");
      return std::string(trim(value));
    }
    case KnobType::boolean: {
      bool v = false;
      if (!parse_bool(value, v)) invalid(k, value, "not a boolean");
      return v ? "1" : "0";
    }
    case KnobType::choice: {
      std::string t = lower(trim(value));
      std::string_view choices = k.info.accepted;
      while (!choices.empty()) {
        const auto bar = choices.find('|');
        if (choices.substr(0, bar) == t) return t;
        choices = bar == std::string_view::npos ? std::string_view{} : choices.substr(bar + 1);
      }
      invalid(k, value, "not one of the choices");
    }
    case KnobType::peer_groups:
      try {
        (void)parse_peer_groups(value, 64);
      } catch (const InvalidArgument& e) {
        invalid(k, value, e.what());
      }
      return lower(trim(value));
    case KnobType::text:
      return std::string(value);
  }
  return std::string(value);
}

}  // namespace

std::span<const KnobInfo> knobs() { return kInfos; }

std::string_view knob_name(Knob knob) { return kKnobs[static_cast<int>(knob)].info.name; }

void apply_wait_policy(const Config& config) {
  const std::string& policy = config.get(knob_name(Knob::wait_policy));
  os::set_wait_policy(policy == "spin"    ? os::WaitPolicy::spin
                      : policy == "block" ? os::WaitPolicy::block
                                          : os::WaitPolicy::automatic,
                      static_cast<std::uint32_t>(config.integer(knob_name(Knob::wait_spin_us))));
}

std::uint64_t parse_size(std::string_view text) {
  const auto t = trim(text);
  std::size_t digits = 0;
  while (digits < t.size() && (std::isdigit(static_cast<unsigned char>(t[digits])) || t[digits] == '.'))
    ++digits;
  double number = 0;
  if (digits == 0 || !parse_double(t.substr(0, digits), number))
    throw InvalidArgument(fmt::format("'{}' is not a byte size", text));
  const std::string unit = lower(trim(t.substr(digits)));
  double scale = 0;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib")
    scale = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib")
    scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    throw InvalidArgument(fmt::format("'{}' has an unknown size unit '{}'", text, unit));
  const double bytes = number * scale;
  if (bytes > 1.8e19 || bytes != std::floor(bytes))
    throw InvalidArgument(fmt::format("'{}' is not a whole number of bytes", text));
  return static_cast<std::uint64_t>(bytes);
}

bool is_program_variable(std::string_view name) noexcept {
  return name.starts_with("HDSM_MODEL_") || name.starts_with("HDSM_TEST_") || name == "HDSM_SOURCE_DIR";
}

Config Config::defaults() {
  Config c;
  for (const auto& k : kKnobs) c.values_.emplace(std::string(k.info.name), validate(k, k.info.default_value));
  return c;
}

Config Config::from_environment() {
  Config c = defaults();
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (!entry.starts_with("HDSM_")) continue;
    const auto eq = entry.find('=');
    const auto name = entry.substr(0, eq);
    const auto value = eq == std::string_view::npos ? std::string_view{} : entry.substr(eq + 1);
    if (find_knob(name) == nullptr) {
      if (is_program_variable(name)) continue;
      std::string known;
      for (const auto& k : kKnobs) known += fmt::format("{}{}", known.empty() ? "" : ", ", k.info.name);
      throw ConfigError(fmt::format("unknown configuration variable {} (value '{}'); known variables: {}",
                                    name, value, known));
    }
    c.set(name, value);
  }
  return c;
}

Config& Config::set(std::string_view name, std::string_view value) {
  const KnobSpec* k = find_knob(name);
  if (k == nullptr)
    throw ConfigError(fmt::format("unknown configuration knob '{}' (value '{}')", name, value));
  values_.insert_or_assign(std::string(name), validate(*k, value));
  return *this;
}

const std::string& Config::get(std::string_view name) const {
  const auto it = values_.find(name);
  if (it == values_.end()) throw ConfigError(fmt::format("unknown configuration knob '{}'", name));
  return it->second;
}

std::int64_t Config::integer(std::string_view name) const { return std::stoll(get(name)); }
std::uint64_t Config::size(std::string_view name) const { return std::stoull(get(name)); }
double Config::real(std::string_view name) const { return std::stod(get(name)); }
bool Config::boolean(std::string_view name) const { return get(name) == "1"; }

}  // namespace hdsm
