// `hdsm config`: the knob table, as text or as the markdown of docs/configuration.md.
#include "commands.hpp"
#include "common.hpp"
#include "table.hpp"

#include <hdsm/config.hpp>

#include <fmt/format.h>

namespace hdsm::tool {
namespace {

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
      "`HDSM_SIM_DEVICES=4 ./app`, `hdsm::Config::defaults().set(\"HDSM_SIM_DEVICES\", \"4\")` in C++ or\n"
      "`hdsm_config_set(\"HDSM_SIM_DEVICES\", \"4\")` in C. Programmatic settings override the environment,\n"
      "which overrides the defaults: a `Config` goes to `hdsm::Runtime`'s constructor, `hdsm_config_set` to\n"
      "the default runtime before it starts, and the crc and cluster runtimes take theirs through\n"
      "`crc::Options::from_config(config)` and `cluster::Options::from_config(config)` "
      "(`from_environment()`\n"
      "reads the environment alone). An invalid value (or an unknown `HDSM_*` variable) is an error whose\n"
      "message names the variable, the value and the accepted range; hdsm never falls back to a default\n"
      "silently. `hdsm info` shows the knobs that differ from their defaults.\n"
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
  Table table({"variable", "type", "default", "accepted", "description"});
  for (const KnobInfo& knob : knobs())
    table.add_row({std::string(knob.name), std::string(knob_type_name(knob.type)),
                   knob.default_value.empty() ? "(empty)" : std::string(knob.default_value),
                   std::string(knob.accepted), std::string(knob.description)});
  fmt::print("{}", table.text());
  fmt::print(
      "\nSet a knob in the environment (HDSM_SIM_DEVICES=4 ./app) or with hdsm::Config::set / "
      "hdsm_config_set.\n");
  return 0;
}

}  // namespace hdsm::tool
