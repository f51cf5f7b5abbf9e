// Rolling-update's FIFO of dirty blocks (seed 000, section 4.3): at most capacity() blocks may be dirty
// at once; a block that becomes dirty beyond that pushes the oldest one out, which the caller uploads
// asynchronously and makes read_only (coherence::on_evict). The capacity, the rolling size, grows by a
// fixed step (HDSM_ROLLING_STEP, default 2) on every allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>

namespace hdsm::coherence {

inline constexpr std::size_t default_rolling_step = 2;

/// Not thread-safe: callers serialise every call.
class RollingWindow {
 public:
  /// Block ids are opaque to the window.
  using BlockId = std::uint64_t;

  explicit RollingWindow(std::size_t capacity = 0) : capacity_(capacity) {}

  std::size_t capacity() const { return capacity_; }
  std::size_t size() const { return index_.size(); }
  bool contains(BlockId block) const { return index_.contains(block); }

  void grow(std::size_t step = default_rolling_step) { capacity_ += step; }

  /// Records `block` as the newest dirty block and returns the oldest one when the window overflows;
  /// the new block itself is never the one returned. Throws std::logic_error when the capacity is 0
  /// or the block is in the window already (a dirty block cannot become dirty again).
  std::optional<BlockId> on_dirty(BlockId block);
  /// Forgets a block that left the dirty state some other way (release, free); false if it was absent.
  bool remove(BlockId block);
  void clear();

 private:
  std::size_t capacity_;
  std::list<BlockId> order_;  // oldest first
  std::unordered_map<BlockId, std::list<BlockId>::iterator> index_;
};

}  // namespace hdsm::coherence
