// The ring fault handlers push dirty blocks to: FIFO, bounded, and safe with concurrent producers.
#include "coherence/dirty_ring.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace {

using hdsm::coherence::DirtyRing;

TEST(DirtyRing, FifoAndBounded) {
  auto ring = std::make_unique<DirtyRing>();
  EXPECT_FALSE(ring->pop());
  for (std::uint64_t i = 0; i < DirtyRing::kCapacity; ++i) ASSERT_TRUE(ring->push(i)) << i;
  EXPECT_FALSE(ring->push(12345)) << "a full ring refuses";
  EXPECT_EQ(ring->size(), DirtyRing::kCapacity);
  for (std::uint64_t i = 0; i < DirtyRing::kCapacity; ++i) ASSERT_EQ(ring->pop(), i);
  EXPECT_FALSE(ring->pop());
  EXPECT_EQ(ring->size(), 0u);
  // Wrapping around keeps the order.
  for (std::uint64_t round = 0; round < 3; ++round)
    for (std::uint64_t i = 0; i < 1000; ++i) {
      ASSERT_TRUE(ring->push(round * 1000 + i));
      ASSERT_EQ(ring->pop(), round * 1000 + i);
    }
}

TEST(DirtyRing, ConcurrentProducersLoseNothing) {
  auto ring = std::make_unique<DirtyRing>();
  constexpr int kThreads = 4;
  constexpr std::uint64_t kEach = 20000;
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t)
    producers.emplace_back([&, t] {
      for (std::uint64_t i = 0; i < kEach; ++i)
        while (!ring->push(static_cast<std::uint64_t>(t) << 32 | i)) std::this_thread::yield();
    });
  std::vector<std::uint64_t> next(kThreads, 0);
  std::uint64_t received = 0;
  while (received < kThreads * kEach) {
    const auto v = ring->pop();
    if (!v) {
      std::this_thread::yield();
      continue;
    }
    const auto t = static_cast<std::size_t>(*v >> 32);
    ASSERT_LT(t, next.size());
    ASSERT_EQ(*v & 0xffffffffu, next[t]) << "producer " << t << " out of order";
    ++next[t];
    ++received;
  }
  for (auto& p : producers) p.join();
  EXPECT_TRUE(std::all_of(next.begin(), next.end(), [](std::uint64_t n) { return n == kEach; }));
}

}  // namespace
