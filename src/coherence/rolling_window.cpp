#include "coherence/rolling_window.hpp"

#include <fmt/format.h>

#include <iterator>
#include <stdexcept>

namespace hdsm::coherence {

std::optional<RollingWindow::BlockId> RollingWindow::on_dirty(BlockId block) {
  // With capacity 0 the only candidate would be the new block, whose write would fault again forever.
  if (capacity_ == 0) {
    throw std::logic_error(fmt::format("rolling window: block {:#x} became dirty before any grow()", block));
  }
  if (index_.contains(block)) {
    throw std::logic_error(fmt::format("rolling window: block {:#x} is dirty already", block));
  }
  order_.push_back(block);
  index_.emplace(block, std::prev(order_.end()));
  if (index_.size() <= capacity_) return std::nullopt;
  const BlockId oldest = order_.front();
  order_.pop_front();
  index_.erase(oldest);
  return oldest;
}

bool RollingWindow::remove(BlockId block) {
  const auto it = index_.find(block);
  if (it == index_.end()) return false;
  order_.erase(it->second);
  index_.erase(it);
  return true;
}

void RollingWindow::clear() {
  order_.clear();
  index_.clear();
}

}  // namespace hdsm::coherence
