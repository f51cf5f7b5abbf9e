#include "os/lock_rank.hpp"

#include <cstdio>
#include <cstdlib>

namespace hdsm::os {

const char* to_string(LockRank rank) noexcept {
  switch (rank) {
    case LockRank::call:
      return "call lock";
    case LockRank::entry:
      return "shared object lock";
    case LockRank::window:
      return "rolling window lock";
    case LockRank::engine:
      return "copy engine device lock";
    case LockRank::objects:
      return "object table lock";
    case LockRank::directory:
      return "directory lock";
  }
  return "lock";
}

#ifndef NDEBUG
namespace detail {
namespace {

struct Held {
  const void* lock;
  LockRank rank;
  unsigned order;
};
constexpr int kMaxHeld = 32;
thread_local Held held[kMaxHeld];
thread_local int count = 0;

bool before(const Held& a, LockRank rank, unsigned order) {
  return a.rank < rank || (a.rank == rank && a.order < order);
}

void record(const void* lock, LockRank rank, unsigned order) noexcept {
  if (count == kMaxHeld) {
    std::fprintf(stderr, "hdsm: lock ranks: a thread holds more than %d ranked locks\n", kMaxHeld);
    std::abort();
  }
  held[count++] = {lock, rank, order};
}

}  // namespace

void rank_acquired(const void* lock, LockRank rank, unsigned order) noexcept {
  for (int i = 0; i < count; ++i)
    if (!before(held[i], rank, order)) {
      std::fprintf(
          stderr,
          "hdsm: lock ranks broken: taking the %s (order %u) while holding the %s (order %u); the order "
          "is in docs/architecture.md, \"Locks\"\n",
          to_string(rank), order, to_string(held[i].rank), held[i].order);
      std::abort();
    }
  record(lock, rank, order);
}

void rank_released(const void* lock) noexcept {
  for (int i = count; i-- > 0;)
    if (held[i].lock == lock) {
      held[i] = held[--count];
      return;
    }
}

}  // namespace detail
#endif

}  // namespace hdsm::os
