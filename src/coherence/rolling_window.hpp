// Rolling-update's FIFO of dirty blocks (seed 000, section 4.3): at most capacity() blocks may be dirty
// at once; a block that becomes dirty beyond that pushes the oldest one out, which the caller uploads
// asynchronously and makes read_only (coherence::on_evict). The capacity, the rolling size, grows by a
// fixed step (HDSM_ROLLING_STEP, default 2) on every allocation, and shrinks by as much on every free.
//
// A fault handler adds blocks itself (try_add), so adding must neither allocate nor throw while there
// is room. The FIFO is a power-of-two ring of blocks in arrival order, and each block's place in it is
// kept by the caller, next to the block's state (a Place per block): membership and removal are one
// array access, with no search and no hashing. remove() leaves a hole that eviction skips. The ring is
// rebuilt (compacted, and doubled when needed) outside the handler, in on_dirty() and grow(); a rebuild
// leaves at least as many free places as live blocks, so its O(n) cost is amortised O(1).
#pragma once

#include <hdsm/export.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm::coherence {

inline constexpr std::size_t default_rolling_step = 2;

/// Not thread-safe: callers serialise every call.
class RollingWindow {
 public:
  /// Block ids are opaque to the window.
  using BlockId = std::uint64_t;
  /// Where a block is in the window; the caller keeps one per block, initialised to kOutside, at a
  /// stable address while the block is in the window (remove it before freeing the Place).
  using Place = std::uint64_t;
  static constexpr Place kOutside = 0;

  explicit RollingWindow(std::size_t capacity = 0);

  std::size_t capacity() const { return capacity_; }
  std::size_t size() const { return live_; }
  static bool contains(const Place& place) noexcept { return place != kOutside; }
  /// Raises the rolling size; keeps room for a handler to add up to min(capacity, 16384) blocks.
  void grow(std::size_t step = default_rolling_step);
  /// Lowers the rolling size (not below 0). Blocks beyond it stay dirty until they leave (a release);
  /// meanwhile each on_dirty() evicts one, so the window holds no more than it did.
  void shrink(std::size_t step) noexcept { capacity_ -= std::min(step, capacity_); }
  /// Records `block` as the newest dirty block and returns the oldest one when the window overflows
  /// (its Place is kOutside again); the new block itself is never the one returned. Throws
  /// std::logic_error when the capacity is 0 or the block is in the window already (a dirty block
  /// cannot become dirty again).
  std::optional<BlockId> on_dirty(BlockId block, Place& place);
  /// For a fault handler: adds the block when that evicts nothing and needs no allocation, and returns
  /// true; otherwise changes nothing and returns false (the caller then uses on_dirty()).
  bool try_add(BlockId block, Place& place) noexcept;
  /// Whether try_add() of a block outside the window would succeed.
  bool can_add() const noexcept { return live_ < capacity_ && tail_ - head_ < ring_.size(); }
  /// Forgets a block that left the dirty state some other way (release, free); false if it was absent.
  bool remove(Place& place) noexcept;
  void clear() noexcept;

 private:
  static constexpr std::size_t kMaxReserve = 16384;
  struct Member {
    BlockId block = 0;
    Place* place = nullptr;  // nullptr: removed
  };

  void append(BlockId block, Place& place) noexcept;  // a free place in the ring
  void skip_holes() noexcept;
  void make_room();  // rebuilds a full ring
  /// Rebuilds the ring with room for at least `blocks` live blocks, oldest first, without holes.
  void rebuild(std::size_t blocks);

  std::size_t capacity_;
  std::size_t live_ = 0;
  std::vector<Member> ring_;           // [head_, tail_) modulo its size
  std::uint64_t head_ = 0, tail_ = 0;  // positions counted from the last rebuild; Place = position + 1
};

}  // namespace hdsm::coherence

HDSM_VISIBLE_END
