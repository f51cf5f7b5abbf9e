// The objects of the direct memory models (host-mapped, unified) of every Runtime in the process.
// Those objects are plain host or managed allocations, not views of an arena that shared_ranges
// knows: without this table one runtime took another's object for host memory, and copied into
// it or passed it to a kernel unordered with the owner's calls on it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

namespace hdsm {
class Runtime;
}

namespace hdsm::detail {

class DirectObjects {
 public:
  DirectObjects() = default;

  /// Registers [start, start + bytes) as an object of `owner`.
  void add(const void* start, std::size_t bytes, const Runtime* owner);
  /// Forgets the object at `start` (nothing when none is registered there).
  void remove(const void* start) noexcept;
  /// The runtime other than `self` that owns an object [p, p + n) touches (n 0: the byte at p), or
  /// nullptr. Lock-free while every registered object is `self`'s, or while there is none.
  const Runtime* other_owner(const void* p, std::size_t n, const Runtime* self) const;

 private:
  static void before_fork() noexcept;
  static void after_fork_in_parent() noexcept;
  static void after_fork_in_child() noexcept;
  void publish_owners() noexcept;  // mutex_ held

  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::pair<std::size_t, const Runtime*>> objects_;  // start -> bytes, owner
  std::map<const Runtime*, std::size_t> owners_;                              // owner -> objects
  std::atomic<std::size_t> owner_count_{0};
  std::atomic<const Runtime*> sole_owner_{nullptr};  // the owner while there is exactly one
};

/// The process's table (never destroyed: objects may be freed from static destructors).
DirectObjects& direct_objects();

/// The runtime other than `self` whose shared memory [p, p + n) touches (n 0: the byte at p): an
/// ADSM arena of another runtime, or another runtime's host-mapped or unified object; nullptr for
/// host memory and for `self`'s own objects.
const Runtime* foreign_owner(const void* p, std::size_t n, const Runtime* self);

}  // namespace hdsm::detail
