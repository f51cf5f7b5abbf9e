#include "coherence/plan.hpp"

namespace hdsm::coherence {

namespace {

using ProtocolEvent = Transition (*)(ProtocolKind, BlockState, KernelUse) noexcept;

void add_copy(std::vector<CopyStep>& copies, Transfer direction, std::size_t block) {
  if (direction == Transfer::none) return;
  if (!copies.empty()) {
    CopyStep& last = copies.back();
    if (last.direction == direction && last.first_block + last.blocks == block) {
      ++last.blocks;
      return;
    }
  }
  copies.push_back({direction, block, 1});
}

void add_protection(std::vector<ProtectionRun>& runs, Protection protection, std::size_t block) {
  if (!runs.empty()) {
    ProtectionRun& last = runs.back();
    if (last.protection == protection && last.first_block + last.blocks == block) {
      ++last.blocks;
      return;
    }
  }
  runs.push_back({block, 1, protection});
}

CoherencePlan plan(ProtocolEvent event, ProtocolKind kind, std::span<BlockState> states, KernelUse use) {
  CoherencePlan result;
  for (std::size_t b = 0; b < states.size(); ++b) {
    const Transition t = event(kind, states[b], use);
    add_copy(result.copies, t.transfer, b);
    if (t.protection != protection_of(kind, states[b])) add_protection(result.protections, t.protection, b);
    states[b] = t.next;
  }
  return result;
}

}  // namespace

CoherencePlan plan_release(ProtocolKind kind, std::span<BlockState> states, KernelUse use) {
  return plan(&on_release, kind, states, use);
}

CoherencePlan plan_acquire(ProtocolKind kind, std::span<BlockState> states, KernelUse use) {
  return plan(&on_acquire, kind, states, use);
}

}  // namespace hdsm::coherence
