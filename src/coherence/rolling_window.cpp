#include "coherence/rolling_window.hpp"
#include "os/fault_path.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <stdexcept>

namespace hdsm::coherence {

RollingWindow::RollingWindow(std::size_t capacity) : capacity_(capacity) {
  if (capacity_ > 0) rebuild(std::min(capacity_, kMaxReserve));
}

void RollingWindow::grow(std::size_t step) {
  capacity_ += step;
  const std::size_t target = std::min(capacity_, kMaxReserve);
  if (ring_.size() < 2 * target) rebuild(target);
}

std::optional<RollingWindow::BlockId> RollingWindow::on_dirty(BlockId block, Place& place) {
  // With capacity 0 the only candidate would be the new block, whose write would fault again forever.
  if (capacity_ == 0)
    throw std::logic_error(fmt::format("rolling window: block {:#x} became dirty before any grow()", block));
  if (contains(place))
    throw std::logic_error(fmt::format("rolling window: block {:#x} is dirty already", block));
  make_room();
  append(block, place);
  std::optional<BlockId> evicted;
  if (live_ > capacity_) {
    Member& oldest = ring_[head_ & (ring_.size() - 1)];  // skip_holes() keeps a live block at the head
    evicted = oldest.block;
    *oldest.place = kOutside;
    oldest.place = nullptr;
    --live_;
    skip_holes();
  }
  make_room();  // for the next block, so that a fault handler can add it
  return evicted;
}

HDSM_FAULT_PATH bool RollingWindow::try_add(BlockId block, Place& place) noexcept {
  if (!can_add() || contains(place)) return false;
  append(block, place);
  return true;
}

bool RollingWindow::remove(Place& place) noexcept {
  if (!contains(place)) return false;
  ring_[(place - 1) & (ring_.size() - 1)].place = nullptr;
  place = kOutside;
  --live_;
  // Holes at either end give their places back at once; those in between wait for eviction or a rebuild.
  skip_holes();
  while (tail_ > head_ && ring_[(tail_ - 1) & (ring_.size() - 1)].place == nullptr) --tail_;
  return true;
}

void RollingWindow::clear() noexcept {
  for (std::uint64_t p = head_; p < tail_; ++p)
    if (Member& m = ring_[p & (ring_.size() - 1)]; m.place != nullptr) {
      *m.place = kOutside;
      m.place = nullptr;
    }
  live_ = 0;
  head_ = tail_ = 0;
}

HDSM_FAULT_PATH void RollingWindow::append(BlockId block, Place& place) noexcept {
  ring_[tail_ & (ring_.size() - 1)] = {block, &place};
  place = ++tail_;  // position + 1, never kOutside
  ++live_;
}

void RollingWindow::make_room() {
  if (tail_ - head_ == ring_.size()) rebuild(std::max(2 * (live_ + 1), std::min(capacity_, kMaxReserve)));
}

void RollingWindow::skip_holes() noexcept {
  while (head_ < tail_ && ring_[head_ & (ring_.size() - 1)].place == nullptr) ++head_;
}

void RollingWindow::rebuild(std::size_t blocks) {
  const std::size_t places = std::bit_ceil(std::max<std::size_t>(16, 2 * std::max(blocks, live_ + 1)));
  std::vector<Member> ring(places);
  std::uint64_t n = 0;
  for (std::uint64_t p = head_; p < tail_; ++p)
    if (const Member& m = ring_[p & (ring_.size() - 1)]; m.place != nullptr) {
      ring[n] = m;
      *m.place = ++n;
    }
  ring_ = std::move(ring);
  head_ = 0;
  tail_ = n;
}

}  // namespace hdsm::coherence
