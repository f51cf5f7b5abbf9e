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
#include <vector>

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

// A knob whose accepted values are "0 or min..max": 0 stands for something of its own (the device's
// memory, none), and the values between are refused.
bool zero_apart(const KnobSpec& k) {
  const std::string_view accepted = k.info.accepted;
  return accepted.starts_with("0 or") || accepted.starts_with("0 (") || accepted.starts_with("0, or");
}

void check_range(const KnobSpec& k, std::string_view value, double v) {
  if (v == 0 && zero_apart(k)) return;
  if (v < k.min || v > k.max) invalid(k, value, "out of range");
}

/// The choice `bool_text` (a boolean in any of parse_bool's spellings) stands for in a choice knob that
/// has on and off, or 1 and 0, among its values: "yes" is "on" to HDSM_OPENCL as to a boolean knob.
std::string boolean_choice(const KnobSpec& k, std::string_view bool_text) {
  bool v = false;
  if (!parse_bool(bool_text, v)) return {};
  const std::string choices = "|" + std::string(k.info.accepted) + "|";
  if (choices.find("|on|") != std::string::npos && choices.find("|off|") != std::string::npos)
    return v ? "on" : "off";
  if (choices.find("|1|") != std::string::npos && choices.find("|0|") != std::string::npos)
    return v ? "1" : "0";
  return {};
}

/// A device index: digits alone.
bool parse_index(std::string_view text, unsigned& index) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), index);
  return !text.empty() && ec == std::errc{} && end == text.data() + text.size();
}

/// A comma-separated list of device indices, spaces allowed around them, none twice; its canonical
/// text ("0,2"), or "" with `why` set.
std::string index_list(std::string_view text, std::string& why) {
  std::string out;
  std::vector<unsigned> seen;
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view item = trim(text.substr(at, comma - at));
    unsigned d = 0;
    if (!parse_index(item, d)) {
      why = fmt::format("'{}' is not a device index", item);
      return {};
    }
    if (std::find(seen.begin(), seen.end(), d) != seen.end()) {
      why = fmt::format("device {} is named twice", d);
      return {};
    }
    seen.push_back(d);
    out += fmt::format("{}{}", out.empty() ? "" : ",", d);
    at = comma + 1;
  }
  return out;
}

// The text knobs with a format of their own: checked where every knob is (a program's Config, the
// environment, `hdsm config`), not first when a subsystem uses them, and given in canonical form.
std::string validate_text(const KnobSpec& k, std::string_view value) {
  const std::string_view name = k.info.name;
  if (name == "HDSM_DEVICE") {
    std::string t = lower(trim(value));
    const auto colon = t.find(':');
    const std::string_view backend = std::string_view(t).substr(0, colon);
    if (backend != "sim" && backend != "opencl" && backend != "cuda")
      invalid(k, value, fmt::format("'{}' is no backend (sim, opencl or cuda)", backend));
    if (colon != std::string::npos) {
      const std::string_view digits = std::string_view(t).substr(colon + 1);
      unsigned index = 0;
      if (!parse_index(digits, index)) invalid(k, value, fmt::format("'{}' is not a device index", digits));
    }
    return t;
  }
  if (name == "HDSM_SKELETON_DEVICES") {
    std::string t = lower(trim(value));
    if (t == "default" || t == "all") return t;
    std::string why;
    std::string list = index_list(t, why);
    if (list.empty()) invalid(k, value, why);
    return list;  // each index is checked against the runtime's devices at the first skeleton call
  }
  if (name == "HDSM_CACHE_DIR") {
    if (lower(trim(value)) == "off") return "off";
    // A relative folder would follow the working directory, a cache in every folder a program runs in.
    if (!value.empty() && value.front() != '/') invalid(k, value, "not an absolute path");
    return std::string(value);
  }
  return std::string(value);
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
      if (!parse_bool(value, v)) invalid(k, value, "not a boolean (1, true, on or yes; 0, false, off or no)");
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
      if (std::string b = boolean_choice(k, t); !b.empty()) return b;
      invalid(k, value, "not one of the choices");
    }
    case KnobType::peer_groups: {
      std::string t = lower(value);
      std::erase_if(t, [](unsigned char c) { return std::isspace(c) != 0; });  // "0-1, 2-3"
      try {
        (void)parse_peer_groups(t, 64);
      } catch (const InvalidArgument& e) {
        invalid(k, value, e.what());
      }
      return t;
    }
    case KnobType::text:
      return validate_text(k, value);
  }
  return std::string(value);
}

}  // namespace

std::span<const KnobInfo> knobs() { return kInfos; }

std::string_view knob_name(Knob knob) { return kKnobs[static_cast<int>(knob)].info.name; }

void check_option(std::string_view option, Knob knob, double value, std::string_view shown) {
  const KnobSpec& k = kKnobs[static_cast<int>(knob)];
  if ((value == 0 && zero_apart(k)) || (value >= k.min && value <= k.max)) return;
  throw InvalidArgument(
      fmt::format("{} = {} is out of range: {} accepts {}", option, shown, k.info.name, k.info.accepted));
}

WaitPolicy WaitPolicy::from_config(const Config& config) {
  const std::string& policy = config.get(knob_name(Knob::wait_policy));
  return {policy == "spin"    ? Kind::spin
          : policy == "block" ? Kind::block
                              : Kind::automatic,
          static_cast<std::uint32_t>(config.integer(knob_name(Knob::wait_spin_us)))};
}

void check_wait_policy(const WaitPolicy& policy, std::string_view option) {
  if (policy.kind != WaitPolicy::Kind::automatic && policy.kind != WaitPolicy::Kind::spin &&
      policy.kind != WaitPolicy::Kind::block)
    throw InvalidArgument(fmt::format(
        "{}.kind = {} is no WaitPolicy::Kind (automatic, spin or block, HDSM_WAIT_POLICY's choices)", option,
        static_cast<int>(policy.kind)));
  check_option(fmt::format("{}.spin_us", option), Knob::wait_spin_us, policy.spin_us,
               fmt::to_string(policy.spin_us));
}

void apply_wait_policy(const WaitPolicy& policy) {
  os::set_wait_policy(policy.kind == WaitPolicy::Kind::spin    ? os::WaitPolicy::spin
                      : policy.kind == WaitPolicy::Kind::block ? os::WaitPolicy::block
                                                               : os::WaitPolicy::automatic,
                      policy.spin_us);
}

void apply_wait_policy(const Config& config) { apply_wait_policy(WaitPolicy::from_config(config)); }

void check_knob_relations(const Config& config) {
  const auto at_least = [&](Knob big, std::uint64_t times, Knob small, std::string_view what) {
    const std::uint64_t b = config.size(knob_name(big)), s = config.size(knob_name(small));
    if (b / times < s)
      throw ConfigError(fmt::format("{}={} is less than {} {}={}: {}", knob_name(big), format_bytes(b),
                                    times == 1 ? "one" : "two", knob_name(small), format_bytes(s), what));
  };
  at_least(Knob::staging_bytes, 1, Knob::staging_chunk, "the staging pool holds at least one chunk");
  at_least(Knob::mpi_staging_bytes, 2, Knob::mpi_chunk, "an MPI transfer stages through two chunks");
  at_least(Knob::crc_local_store, 1, Knob::crc_page_size,
           "a crc worker's local store holds at least one page");
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
