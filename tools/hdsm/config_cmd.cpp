// `hdsm config`: the knob table, as text or as the markdown of docs/configuration.md.
#include "commands.hpp"
#include "common.hpp"
#include "table.hpp"

#include "runtime/knobs.hpp"

#include <hdsm/config.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

extern char** environ;

namespace hdsm::tool {
namespace {

// `text` as lines of at most `width` columns (a longer word stays whole), each after `indent`.
std::string wrapped(std::string_view text, std::string_view indent, std::size_t width) {
  std::string out;
  std::string line(indent);
  std::size_t words = 0;
  while (!text.empty()) {
    const std::size_t start = text.find_first_not_of(' ');
    if (start == std::string_view::npos) break;
    text.remove_prefix(start);
    const std::size_t end = std::min(text.find(' '), text.size());
    const std::string_view word = text.substr(0, end);
    if (words > 0 && display_width(line) + 1 + display_width(word) > width) {
      out += line + "\n";
      line = std::string(indent);
      words = 0;
    }
    if (words++ > 0) line += ' ';
    line += word;
    text.remove_prefix(end);
  }
  if (words > 0) out += line + "\n";
  return out;
}

std::string markdown_code(std::string_view value) {
  if (value.empty()) return "(empty)";
  // A backtick inside the value needs a longer fence around it.
  const std::string fence = value.find('`') == std::string_view::npos ? "`" : "``";
  const std::string_view pad = value.front() == '`' || value.back() == '`' ? " " : "";
  return fmt::format("{}{}{}{}{}", fence, pad, value, pad, fence);
}

}  // namespace

std::string configuration_markdown() {
  std::string md =
      "# Configuration\n"
      "\n"
      "Every knob of hdsm is an environment variable and a programmatic setting with the same name:\n"
      "`HDSM_SIM_DEVICES=4 ./app`, `hdsm::Config::from_environment().set(\"HDSM_SIM_DEVICES\", \"4\")` in\n"
      "C++ or `hdsm_config_set(\"HDSM_SIM_DEVICES\", \"4\")` in C. Programmatic settings override the\n"
      "environment, which overrides the defaults (`Config::defaults()` is the defaults alone, without the\n"
      "environment): a `Config` goes to `hdsm::Runtime`'s constructor, `hdsm_config_set` to\n"
      "the default runtime before it starts, and the crc and cluster runtimes take theirs through\n"
      "`crc::Options::from_config(config)` and `cluster::Options::from_config(config)` "
      "(`from_environment()`\n"
      "reads the environment alone). An invalid value (or an unknown `HDSM_*` variable; those that test\n"
      "and benchmark programs read, `HDSM_MODEL_*`, `HDSM_TEST_*` and `HDSM_SOURCE_DIR`, excepted) is an\n"
      "error whose message names the variable, the value and the accepted range; hdsm never falls back to\n"
      "a default silently. `hdsm config` lists every knob with what the environment sets it to and checks "
      "those\n"
      "values (it exits 1 naming an invalid value or an unknown `HDSM_*` variable); `hdsm info` shows\n"
      "the knobs that differ from their defaults. Knobs that must fit each other (a pool and its chunk, a\n"
      "local store and its page) are checked when a runtime starts, and by `hdsm config`.\n"
      "\n"
      "Spellings: a boolean is `0` or `1`, or `false`/`true`, `no`/`yes`, `off`/`on` in any case; a\n"
      "choice that has `on` and `off` (or `1` and `0`) takes the same spellings; choices and backends\n"
      "are case-insensitive. A size is a number of bytes, possibly with a fraction, and an optional unit\n"
      "`B`, `K`/`KB`/`KiB`, `M`/`MB`/`MiB`, `G`/`GB`/`GiB` or `T`/`TB`/`TiB`, all powers of 1024 (`64KiB`,\n"
      "`1.5 GiB`); a size that comes to no whole number of bytes is refused.\n"
      "\n"
      "This file is generated from the knob list in `src/runtime/knobs.def`, and a test checks that it is\n"
      "up to date. After changing a knob, regenerate it with\n"
      "\n"
      "```sh\n"
      "hdsm config --markdown > docs/configuration.md\n"
      "```\n"
      "\n";
  Table table({"Variable", "Type", "Default", "Accepted values", "Description"});
  for (const KnobInfo& knob : knobs())
    table.add_row({markdown_code(knob.name), std::string(knob_type_name(knob.type)),
                   markdown_code(knob.default_value), std::string(knob.accepted),
                   std::string(knob.description)});
  md += table.markdown();
  return md;
}

int run_config(bool markdown) {
  if (markdown) {
    fmt::print("{}", configuration_markdown());
    return 0;
  }
  // Each knob as a block: its line, what the environment sets it to (checked as a runtime would
  // check it), and its description wrapped, so a typo or a bad value shows here before a program
  // fails on it.
  int status = 0;
  std::vector<std::string> refused;                          // why each refused value is, for standard error
  std::map<std::string_view, std::string_view> environment;  // the HDSM_* variables
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::size_t eq = entry.find('=');
    if (entry.starts_with("HDSM_") && eq != std::string_view::npos)
      environment.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  for (const KnobInfo& knob : knobs()) {
    fmt::print("{}  {}, default {}, accepted {}\n", knob.name, knob_type_name(knob.type),
               knob.default_value.empty() ? "(empty)" : display_value(knob.type, knob.default_value),
               knob.accepted);
    if (const auto set = environment.find(knob.name); set != environment.end()) {
      try {
        Config checked = Config::defaults();
        checked.set(knob.name, set->second);
        fmt::print("  set here: {}\n", display_value(knob.type, checked.get(knob.name)));
      } catch (const std::exception& e) {
        fmt::print("  set here, INVALID: {}\n", e.what());
        refused.emplace_back(e.what());  // names the knob and the value
        status = kExitFailure;
      }
      environment.erase(set);
    }
    fmt::print("{}\n", wrapped(knob.description, "  ", 100));
  }
  fmt::print(
      "Set a knob in the environment (HDSM_SIM_DEVICES=4 ./app) or with hdsm::Config::set / "
      "hdsm_config_set.\n");
  // Standard error names each refused value too: standard output may go to a file.
  for (const std::string& why : refused) fmt::print(stderr, "error: {}\n", why);
  for (const auto& [name, value] : environment) {
    if (is_program_variable(name)) continue;
    fmt::print(stderr, "error: {}={} is no hdsm knob: a program started with it fails\n", name, value);
    status = kExitFailure;
  }
  if (status == 0) {  // each value is valid: do they fit each other?
    try {
      check_knob_relations(Config::from_environment());
    } catch (const ConfigError& e) {
      fmt::print(stderr, "error: {}\n", e.what());
      status = kExitFailure;
    }
  }
  if (status != 0) fmt::print(stderr, "error: the environment sets a knob hdsm would refuse\n");
  return status;
}

}  // namespace hdsm::tool
