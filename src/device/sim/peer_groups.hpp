// Parsing of HDSM_SIM_PEER: "all", "none", or comma-separated groups of device ranges ("0-1,2-3").
#pragma once

#include <hdsm/export.h>

#include <string_view>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm {

/// Peer group of each of `device_count` devices (-1: in no group). Throws InvalidArgument naming
/// the bad part (not a number, reversed range, a device in two groups, beyond device_count).
std::vector<int> parse_peer_groups(std::string_view spec, unsigned device_count);

}  // namespace hdsm

HDSM_VISIBLE_END
