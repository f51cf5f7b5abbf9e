// Coherence plans of whole objects: the transitions of protocol.hpp applied to every block of one
// object at a kernel call (release) or at the sync (acquire), as values the caller then executes.
#pragma once

#include <hdsm/export.h>

#include "coherence/protocol.hpp"

#include <cstddef>
#include <span>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm::coherence {

/// Moves blocks [first_block, first_block + blocks) of the object in `direction` (never Transfer::none).
struct CopyStep {
  Transfer direction;
  std::size_t first_block;
  std::size_t blocks;
  bool operator==(const CopyStep&) const = default;
};

struct ProtectionRun {
  std::size_t first_block;
  std::size_t blocks;
  Protection protection;
  bool operator==(const ProtectionRun&) const = default;
};

/// Adjacent blocks with the same transfer form one step and adjacent blocks with the same new
/// protection one run, both in block order. Runs cover only the blocks whose protection changes.
struct CoherencePlan {
  std::vector<CopyStep> copies;
  std::vector<ProtectionRun> protections;
  bool empty() const { return copies.empty() && protections.empty(); }
  bool operator==(const CoherencePlan&) const = default;
};

/// Both update `states` (the object's blocks, in order) to their next states in place and return what
/// to do. Under rolling-update the caller removes from its RollingWindow the blocks that were dirty
/// and are not any more.
CoherencePlan plan_release(ProtocolKind kind, std::span<BlockState> states, KernelUse use);
CoherencePlan plan_acquire(ProtocolKind kind, std::span<BlockState> states, KernelUse use);

}  // namespace hdsm::coherence

HDSM_VISIBLE_END
