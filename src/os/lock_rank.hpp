// Lock ranks: the order in which hdsm's locks may be taken, outer first (docs/architecture.md,
// "Locks"). A thread that holds a lock may only take one of a higher rank, or of the same rank and a
// higher order (the per-device locks of one kind, taken in device index order). Debug builds check
// every acquisition against the locks the thread holds and abort naming both; release builds keep the
// bare mutex. A lock that a fault handler takes (FaultMutex) is checked when it is locked, not when a
// try_lock takes it: a signal handler must not touch thread-local state, and the handler only
// try-locks, which cannot deadlock.
#pragma once

#include <hdsm/export.h>

#include "os/fault_mutex.hpp"

#include <cstdint>
#include <type_traits>

namespace hdsm::os {

enum class LockRank : std::uint8_t {
  call = 1,       // a device's call lock (runtime: release and launch)
  entry = 2,      // a shared object's lock
  window = 3,     // the rolling window
  engine = 4,     // the copy engine's per-device enqueue locks
  objects = 5,    // the shared space's object table
  directory = 6,  // the object directory
};
HDSM_API const char* to_string(LockRank rank) noexcept;

namespace detail {
#ifndef NDEBUG
/// Checks that `lock` (rank, order) may be taken with what this thread holds, then records it.
HDSM_API void rank_acquired(const void* lock, LockRank rank, unsigned order) noexcept;
HDSM_API void rank_released(const void* lock) noexcept;
#endif
}  // namespace detail

/// A Mutex (std::mutex, FaultMutex) with a rank; Lockable.
template <class Mutex>
class RankedMutex {
 public:
  explicit RankedMutex(LockRank rank, unsigned order = 0) noexcept {
#ifndef NDEBUG
    rank_ = rank;
    order_ = order;
#else
    (void)rank;
    (void)order;
#endif
  }
  RankedMutex(const RankedMutex&) = delete;
  RankedMutex& operator=(const RankedMutex&) = delete;

  void lock() {
#ifndef NDEBUG
    detail::rank_acquired(this, rank_, order_);
#endif
    mutex_.lock();
#ifndef NDEBUG
    tracked_ = true;
#endif
  }
  bool try_lock() {
    if (!mutex_.try_lock()) return false;
#ifndef NDEBUG
    // A try_lock in the wrong order cannot deadlock itself, but the blocking lock that follows a
    // failed one (obs::lock_counting_wait) would: so it is checked as well.
    tracked_ = !kHandlerLock;
    if (tracked_) detail::rank_acquired(this, rank_, order_);
#endif
    return true;
  }
  void unlock() {
#ifndef NDEBUG
    if (tracked_) detail::rank_released(this);
    tracked_ = false;
#endif
    mutex_.unlock();
  }

 private:
  static constexpr bool kHandlerLock = std::is_same_v<Mutex, FaultMutex>;
  Mutex mutex_;
#ifndef NDEBUG
  LockRank rank_;
  unsigned order_;
  bool tracked_ = false;  // the owner's acquisition was recorded (under the lock)
#endif
};

}  // namespace hdsm::os
