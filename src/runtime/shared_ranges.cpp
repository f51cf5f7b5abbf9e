#include "runtime/shared_ranges.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <pthread.h>

namespace hdsm::detail {

constinit SharedRanges shared_ranges;

Runtime* SharedRanges::owner_at(std::uintptr_t a) const noexcept {
  if (!may_touch(reinterpret_cast<const void*>(a), 1)) return nullptr;
  const unsigned used = used_.load(std::memory_order_acquire);
  for (unsigned i = 0; i < used; ++i) {
    const ArenaSlot& s = slots_[i];
    Runtime* owner = s.owner.load(std::memory_order_acquire);
    if (owner != nullptr &&
        a - s.begin.load(std::memory_order_relaxed) < s.bytes.load(std::memory_order_relaxed))
      return owner;
  }
  return nullptr;
}

void SharedRanges::before_fork() noexcept { shared_ranges.mutex_.lock(); }
void SharedRanges::after_fork_in_parent() noexcept { shared_ranges.mutex_.unlock(); }
void SharedRanges::after_fork_in_child() noexcept {
  SharedRanges& t = shared_ranges;
  for (ArenaSlot& s : t.slots_) s.owner.store(nullptr, std::memory_order_relaxed);
  t.used_.store(0, std::memory_order_relaxed);
  t.recompute_bounds();
  t.mutex_.unlock();
}

void SharedRanges::add(std::uintptr_t begin, std::uintptr_t bytes, Runtime* owner) {
  static const int atfork = ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
  if (atfork != 0) throw SystemError("pthread_atfork", "the shared-memory range table", atfork);
  std::lock_guard lock(mutex_);
  unsigned i = 0;
  while (i < kSlots && slots_[i].owner.load(std::memory_order_relaxed) != nullptr) ++i;
  if (i == kSlots)
    throw ConfigError(
        fmt::format("too many hdsm::Runtime objects with shared memory at once ({} live); "
                    "destroy some before creating more",
                    kSlots));
  ArenaSlot& s = slots_[i];
  s.begin.store(begin, std::memory_order_relaxed);
  s.bytes.store(bytes, std::memory_order_relaxed);
  s.owner.store(owner, std::memory_order_release);
  if (i >= used_.load(std::memory_order_relaxed)) used_.store(i + 1, std::memory_order_release);
  recompute_bounds();
}

void SharedRanges::remove(const Runtime* owner) noexcept {
  std::lock_guard lock(mutex_);
  for (ArenaSlot& s : slots_)
    if (s.owner.load(std::memory_order_relaxed) == owner) s.owner.store(nullptr, std::memory_order_release);
  recompute_bounds();
}

void SharedRanges::recompute_bounds() noexcept {
  std::uintptr_t lo = UINTPTR_MAX, hi = 0;
  const unsigned used = used_.load(std::memory_order_relaxed);
  for (unsigned i = 0; i < used; ++i) {
    const ArenaSlot& s = slots_[i];
    if (s.owner.load(std::memory_order_relaxed) == nullptr) continue;
    const std::uintptr_t b = s.begin.load(std::memory_order_relaxed);
    lo = std::min(lo, b);
    hi = std::max(hi, b + s.bytes.load(std::memory_order_relaxed));
  }
  if (hi == 0) lo = 0;  // none live: an empty span
  // A reader between the two stores sees a superset of the live arenas when one was removed; when
  // one was added, no pointer into it has been handed out yet.
  lo_.store(lo, std::memory_order_release);
  hi_.store(hi, std::memory_order_release);
}

}  // namespace hdsm::detail
