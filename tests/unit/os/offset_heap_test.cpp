// The best-fit offset allocator shared by sim device memories and arena segments.
#include <hdsm/error.hpp>

#include "os/offset_heap.hpp"

#include <gtest/gtest.h>

namespace {

TEST(OffsetHeap, BestFitSplitAndCoalesce) {
  hdsm::os::OffsetHeap heap(4096);
  EXPECT_EQ(heap.alignment(), hdsm::os::OffsetHeap::kDefaultAlignment);
  const auto a = heap.allocate(1000), b = heap.allocate(1000), c = heap.allocate(1000);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a % heap.alignment(), 0u);
  EXPECT_EQ(heap.used(), 3 * 1024u);
  EXPECT_FALSE(heap.allocate(2048));  // only 1 KiB left
  heap.release(*b, 1000);
  heap.release(*a, 1000);
  const auto big = heap.allocate(2048);  // a and b coalesced
  ASSERT_TRUE(big);
  EXPECT_EQ(*big, *a);
  heap.release(*big, 2048);
  heap.release(*c, 1000);
  EXPECT_EQ(heap.used(), 0u);
  EXPECT_TRUE(heap.allocate(4096));  // everything coalesced back into one range
  EXPECT_FALSE(heap.allocate(0));
}

// The largest free range, which an out-of-memory message gives when the free bytes are scattered.
TEST(OffsetHeap, TheLargestFreeRange) {
  hdsm::os::OffsetHeap heap(4096);
  EXPECT_EQ(heap.largest_free(), 4096u);
  const auto a = heap.allocate(1024), b = heap.allocate(1024), c = heap.allocate(1024),
             d = heap.allocate(1024);
  ASSERT_TRUE(a && b && c && d);
  EXPECT_EQ(heap.largest_free(), 0u);
  heap.release(*a, 1024);
  heap.release(*c, 1024);
  EXPECT_EQ(heap.largest_free(), 1024u) << "2 KiB free, in two pieces";
  EXPECT_FALSE(heap.allocate(2048));
  heap.release(*b, 1024);
  EXPECT_EQ(heap.largest_free(), 3072u);
}

TEST(OffsetHeap, AlignmentIsAParameter) {
  constexpr std::size_t kBlock = std::size_t{64} << 10;
  hdsm::os::OffsetHeap heap(10 * kBlock + 123, kBlock);
  EXPECT_EQ(heap.capacity(), 10 * kBlock);  // rounded down to the alignment
  const auto a = heap.allocate(1), b = heap.allocate(kBlock + 1);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, kBlock);
  EXPECT_EQ(heap.used(), 3 * kBlock);
  EXPECT_FALSE(heap.allocate(8 * kBlock));       // beyond what is left
  EXPECT_FALSE(heap.allocate(11 * kBlock));      // beyond the capacity
  EXPECT_FALSE(heap.allocate(~std::size_t{0}));  // rounding would overflow
  EXPECT_TRUE(heap.allocate(7 * kBlock));
  EXPECT_THROW(hdsm::os::OffsetHeap(4096, 3000), hdsm::InvalidArgument);
}

}  // namespace
