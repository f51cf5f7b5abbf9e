#include "runtime/direct_objects.hpp"

#include <hdsm/error.hpp>

#include "runtime/shared_ranges.hpp"

#include <pthread.h>

namespace hdsm::detail {

DirectObjects& direct_objects() {
  static DirectObjects* const table =
      new DirectObjects;  // NOLINT(cppcoreguidelines-owning-memory): never freed
  return *table;
}

// The mutex is held across fork(); a child starts with no object (its parent's runtimes do not
// live in it, and its own allocations may land where their objects were).
void DirectObjects::before_fork() noexcept { direct_objects().mutex_.lock(); }
void DirectObjects::after_fork_in_parent() noexcept { direct_objects().mutex_.unlock(); }
void DirectObjects::after_fork_in_child() noexcept {
  DirectObjects& t = direct_objects();
  t.objects_.clear();
  t.owners_.clear();
  t.publish_owners();
  t.mutex_.unlock();
}

void DirectObjects::publish_owners() noexcept {
  sole_owner_.store(owners_.size() == 1 ? owners_.begin()->first : nullptr, std::memory_order_relaxed);
  owner_count_.store(owners_.size(), std::memory_order_release);
}

void DirectObjects::add(const void* start, std::size_t bytes, const Runtime* owner) {
  static const int atfork = ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
  if (atfork != 0) throw SystemError("pthread_atfork", "the host-mapped and unified object table", atfork);
  std::lock_guard lock(mutex_);
  objects_.insert_or_assign(reinterpret_cast<std::uintptr_t>(start), std::pair{bytes, owner});
  ++owners_[owner];
  publish_owners();
}

void DirectObjects::remove(const void* start) noexcept {
  std::lock_guard lock(mutex_);
  const auto it = objects_.find(reinterpret_cast<std::uintptr_t>(start));
  if (it == objects_.end()) return;
  const auto owner = owners_.find(it->second.second);
  if (owner != owners_.end() && --owner->second == 0) owners_.erase(owner);
  objects_.erase(it);
  publish_owners();
}

const Runtime* DirectObjects::other_owner(const void* p, std::size_t n, const Runtime* self) const {
  const std::size_t owners = owner_count_.load(std::memory_order_acquire);
  if (owners == 0 || (owners == 1 && sole_owner_.load(std::memory_order_relaxed) == self)) return nullptr;
  const auto first = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t span = n == 0 ? 1 : n;
  std::lock_guard lock(mutex_);
  auto it = objects_.upper_bound(first);
  if (it != objects_.begin()) --it;  // the one before p may reach into the range
  for (; it != objects_.end(); ++it) {
    if (it->first >= first && it->first - first >= span) break;  // no overflow of first + span
    if (it->first + it->second.first > first && it->second.second != self) return it->second.second;
  }
  return nullptr;
}

const Runtime* foreign_owner(const void* p, std::size_t n, const Runtime* self) {
  // An arena is one range: its first and last byte tell whether [p, p + n) reaches into another's.
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (const std::uintptr_t at : {a, n > 1 ? a + (n - 1) : a}) {
    const Runtime* arena = shared_ranges.owner_at(at);
    if (arena != nullptr && arena != self) return arena;
  }
  return direct_objects().other_owner(p, n, self);
}

}  // namespace hdsm::detail
