#include "device/buffer_cache.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace {

TEST(BufferCache, AReturnedBufferServesTheNextRequestThatFits) {
  hdsm::BufferCache cache(1 << 20);
  std::byte* first = nullptr;
  {
    hdsm::BufferCache::Buffer b = cache.take(4096);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(b.size(), 4096u);
    std::memset(b.data(), 7, b.size());
    first = b.data();
    EXPECT_EQ(cache.kept_bytes(), 0u);
  }
  EXPECT_EQ(cache.kept_bytes(), 4096u);
  {
    hdsm::BufferCache::Buffer b = cache.take(1000);
    EXPECT_EQ(b.data(), first) << "a kept buffer that fits is reused";
    EXPECT_EQ(b.size(), 4096u);
    EXPECT_EQ(cache.kept_bytes(), 0u);
    hdsm::BufferCache::Buffer c = cache.take(8192);
    EXPECT_NE(c.data(), first) << "a kept buffer is lent to one taker at a time";
    EXPECT_EQ(c.size(), 8192u);
  }
  EXPECT_EQ(cache.kept_bytes(), 4096u + 8192u);
}

TEST(BufferCache, TheSmallestFittingBufferIsTaken) {
  hdsm::BufferCache cache(1 << 20);
  std::byte* small = nullptr;
  {
    hdsm::BufferCache::Buffer a = cache.take(64 << 10), b = cache.take(16 << 10);
    small = b.data();
  }
  hdsm::BufferCache::Buffer c = cache.take(10 << 10);
  EXPECT_EQ(c.data(), small);
  EXPECT_EQ(cache.kept_bytes(), 64u << 10);
}

TEST(BufferCache, KeepsNoMoreThanItsLimitAndPrefersLargerBuffers) {
  hdsm::BufferCache cache(100 << 10);
  { hdsm::BufferCache::Buffer a = cache.take(40 << 10), b = cache.take(50 << 10); }
  EXPECT_EQ(cache.kept_bytes(), 90u << 10);
  // 80 KiB fits only if smaller buffers make room: the 40 and 50 KiB ones go.
  { hdsm::BufferCache::Buffer c = cache.take(80 << 10); }
  EXPECT_EQ(cache.kept_bytes(), 80u << 10);
  // Above the limit: never kept, and what is kept stays.
  { hdsm::BufferCache::Buffer d = cache.take(200 << 10); }
  EXPECT_EQ(cache.kept_bytes(), 80u << 10);
  // A smaller buffer does not push out a larger one.
  {
    hdsm::BufferCache::Buffer big = cache.take(80 << 10);
    hdsm::BufferCache::Buffer e = cache.take(60 << 10);
    big = hdsm::BufferCache::Buffer();  // returned first: kept
  }
  EXPECT_EQ(cache.kept_bytes(), 80u << 10);
}

TEST(BufferCache, ZeroKeepsNothing) {
  hdsm::BufferCache cache(0);
  { hdsm::BufferCache::Buffer a = cache.take(4096); }
  EXPECT_EQ(cache.kept_bytes(), 0u);
}

}  // namespace
