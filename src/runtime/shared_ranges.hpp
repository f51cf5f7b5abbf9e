// The user views of the live arenas of every Runtime in the process. Readers take no lock: the
// interposed libc calls (read, memcpy, ...) ask "may this range be shared?" on every call, and a
// fault handler may ask too. The answer for host memory must cost one range compare, so the table
// keeps the bounds of all live arenas next to the per-runtime slots.
#pragma once

#include <hdsm/export.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

HDSM_VISIBLE_BEGIN
namespace hdsm {
class Runtime;
}

namespace hdsm::detail {

class SharedRanges {
 public:
  /// Live arenas at once; each reserves address space for all its devices, so hundreds of them
  /// already exhaust the 47-bit address space of x86-64.
  static constexpr unsigned kSlots = 256;

  constexpr SharedRanges() = default;

  /// The span from the lowest live arena to the end of the highest, read once for several pointers.
  struct Bounds {
    std::uintptr_t lo, span;
    /// One range check: true when p may lie in a live arena (owner() tells for certain).
    bool holds(const void* p) const noexcept { return reinterpret_cast<std::uintptr_t>(p) - lo < span; }
  };
  Bounds bounds() const noexcept {
    const std::uintptr_t lo = lo_.load(std::memory_order_acquire);
    return {lo, hi_.load(std::memory_order_acquire) - lo};
  }

  /// True when [p, p + n) may overlap a live arena: false is certain, true needs owner().
  bool may_touch(const void* p, std::size_t n) const noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t lo = lo_.load(std::memory_order_acquire);
    return a < hi_.load(std::memory_order_acquire) && (a >= lo || n > lo - a);  // no a + n: it may wrap
  }

  /// The runtime whose arena holds `p`, or nullptr (host memory).
  Runtime* owner(const void* p) const noexcept { return owner_at(reinterpret_cast<std::uintptr_t>(p)); }
  /// owner() of an address. (By value: GCC takes a `const void*` argument for a read of the buffer
  /// it points to, and warns where that buffer is an interposed read()'s output.)
  Runtime* owner_at(std::uintptr_t a) const noexcept;

  /// Registers the user view [begin, begin + bytes) of `owner`'s arena; ConfigError when kSlots
  /// arenas are live.
  void add(std::uintptr_t begin, std::uintptr_t bytes, Runtime* owner);
  /// Forgets every arena of `owner`.
  void remove(const Runtime* owner) noexcept;

 private:
  // pthread_atfork, installed by the first add(): the table's mutex is held across fork(), and a
  // child starts with no arena (the parent's views are not inherited, and its own buffers may
  // land where they were: they must not be taken for a parent runtime's).
  static void before_fork() noexcept;
  static void after_fork_in_parent() noexcept;
  static void after_fork_in_child() noexcept;
  struct ArenaSlot {
    std::atomic<std::uintptr_t> begin{0}, bytes{0};
    std::atomic<Runtime*> owner{nullptr};
  };
  void recompute_bounds() noexcept;

  alignas(64) std::atomic<std::uintptr_t> lo_{0};  // both 0 while no arena is live
  std::atomic<std::uintptr_t> hi_{0};
  std::atomic<unsigned> used_{0};  // slots [0, used_) may be occupied
  alignas(64) std::mutex mutex_;   // writers only
  std::array<ArenaSlot, kSlots> slots_{};
};

/// The process's table: constant-initialised, never destroyed, usable from any constructor,
/// destructor or signal handler.
extern constinit SharedRanges shared_ranges;

}  // namespace hdsm::detail

HDSM_VISIBLE_END
