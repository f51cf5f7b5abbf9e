#include "device/sim/peer_groups.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <charconv>
#include <string>

namespace hdsm {
namespace {

unsigned parse_index(std::string_view part, std::string_view spec) {
  unsigned v = 0;
  const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
  if (part.empty() || ec != std::errc{} || end != part.data() + part.size())
    throw InvalidArgument(fmt::format("'{}' in '{}' is not a device index", part, spec));
  return v;
}

}  // namespace

std::vector<int> parse_peer_groups(std::string_view spec, unsigned device_count) {
  std::vector<int> group(device_count, -1);
  if (spec == "all") {
    for (auto& g : group) g = 0;
    return group;
  }
  if (spec == "none") return group;
  // Empty (a variable set to nothing) is no list: it used to mean none, while the default is all.
  if (spec.empty()) throw InvalidArgument("empty: give all, none, or groups such as 0-1,2-3");
  int next_group = 0;
  while (!spec.empty()) {
    const auto comma = spec.find(',');
    const auto item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    if (comma != std::string_view::npos && spec.empty())
      throw InvalidArgument("a group list ends with a comma");
    const auto dash = item.find('-');
    const unsigned first = parse_index(item.substr(0, dash), item);
    const unsigned last = dash == std::string_view::npos ? first : parse_index(item.substr(dash + 1), item);
    if (last < first) throw InvalidArgument(fmt::format("range '{}' is reversed", item));
    if (last >= device_count)
      throw InvalidArgument(
          fmt::format("group '{}' names device {} but there are {} devices", item, last, device_count));
    for (unsigned d = first; d <= last; ++d) {
      if (group[d] != -1) throw InvalidArgument(fmt::format("device {} is in two peer groups", d));
      group[d] = next_group;
    }
    ++next_group;
  }
  return group;
}

}  // namespace hdsm
