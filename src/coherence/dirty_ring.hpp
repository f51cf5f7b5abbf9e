// Blocks that fault handlers made dirty without waiting for the fault service: a bounded lock-free
// queue (D. Vyukov's bounded MPMC design) that handlers push to and the service drains into the
// rolling window. Pushing neither allocates nor blocks, so it is async-signal-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace hdsm::coherence {

class DirtyRing {
 public:
  static constexpr std::size_t kCapacity = 4096;  // a power of two

  DirtyRing() {
    for (std::size_t i = 0; i < kCapacity; ++i) cells_[i].sequence.store(i, std::memory_order_relaxed);
  }
  DirtyRing(const DirtyRing&) = delete;
  DirtyRing& operator=(const DirtyRing&) = delete;

  /// How many values were pushed so far, this one included (a ticket: pushers can act on every
  /// n-th push without reading the consumer's position); 0 when the ring is full.
  std::size_t push(std::uint64_t value) noexcept {
    std::size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & (kCapacity - 1)];
      const std::size_t seq = cell.sequence.load(std::memory_order_acquire);
      const auto diff = static_cast<std::ptrdiff_t>(seq) - static_cast<std::ptrdiff_t>(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          cell.value = value;
          cell.sequence.store(pos + 1, std::memory_order_release);
          return pos + 1;
        }
      } else if (diff < 0) {
        return 0;
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  std::optional<std::uint64_t> pop() noexcept {
    std::size_t pos = head_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & (kCapacity - 1)];
      const std::size_t seq = cell.sequence.load(std::memory_order_acquire);
      const auto diff = static_cast<std::ptrdiff_t>(seq) - static_cast<std::ptrdiff_t>(pos + 1);
      if (diff == 0) {
        if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          const std::uint64_t value = cell.value;
          cell.sequence.store(pos + kCapacity, std::memory_order_release);
          return value;
        }
      } else if (diff < 0) {
        return std::nullopt;
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
  }

  /// Entries pushed and not yet popped (exact when nobody is pushing or popping).
  std::size_t size() const noexcept {
    const std::size_t head = head_.load(std::memory_order_relaxed);  // first: head never passes tail
    return tail_.load(std::memory_order_relaxed) - head;
  }

 private:
  struct Cell {
    std::atomic<std::size_t> sequence;
    std::uint64_t value = 0;
  };
  std::array<Cell, kCapacity> cells_;
  alignas(64) std::atomic<std::size_t> head_{0};
  alignas(64) std::atomic<std::size_t> tail_{0};
};

}  // namespace hdsm::coherence
