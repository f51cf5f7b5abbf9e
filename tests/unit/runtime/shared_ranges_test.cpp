// SharedRanges: the lock-free "is this shared memory, and whose" table the interposed libc calls ask.
#include "runtime/shared_ranges.hpp"

#include <hdsm/error.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

namespace {

using hdsm::detail::SharedRanges;

hdsm::Runtime* fake(std::uintptr_t n) { return reinterpret_cast<hdsm::Runtime*>(n * 64); }
const void* at(std::uintptr_t a) { return reinterpret_cast<const void*>(a); }

TEST(SharedRanges, AnEmptyTableTouchesNothing) {
  SharedRanges r;
  EXPECT_FALSE(r.may_touch(at(0), SIZE_MAX));
  EXPECT_FALSE(r.may_touch(at(0x1000), 10));
  EXPECT_EQ(r.owner(at(0x1000)), nullptr);
}

TEST(SharedRanges, RangesOverlappingAnArenaMayTouchItAndOnlyThose) {
  SharedRanges r;
  r.add(0x10000, 0x1000, fake(1));
  EXPECT_TRUE(r.may_touch(at(0x10000), 1));
  EXPECT_TRUE(r.may_touch(at(0x10fff), 1));
  EXPECT_FALSE(r.may_touch(at(0x11000), 100)) << "just past the end";
  EXPECT_FALSE(r.may_touch(at(0xff00), 0x100)) << "ends where the arena begins";
  EXPECT_TRUE(r.may_touch(at(0xff00), 0x101)) << "ends one byte inside";
  EXPECT_TRUE(r.may_touch(at(0x100), SIZE_MAX)) << "a length that would wrap a + n still overlaps";
  EXPECT_EQ(r.owner(at(0x10800)), fake(1));
  EXPECT_EQ(r.owner(at(0x11000)), nullptr);
  EXPECT_EQ(r.owner(at(0xffff)), nullptr);
}

TEST(SharedRanges, OwnersAreToldApartAndGapsBetweenArenasAreHostMemory) {
  SharedRanges r;
  r.add(0x100000, 0x1000, fake(1));
  r.add(0x300000, 0x1000, fake(2));
  EXPECT_EQ(r.owner(at(0x100010)), fake(1));
  EXPECT_EQ(r.owner(at(0x300010)), fake(2));
  EXPECT_TRUE(r.may_touch(at(0x200000), 8)) << "inside the bounds: the fast test cannot tell";
  EXPECT_EQ(r.owner(at(0x200000)), nullptr) << "the exact lookup can";
  r.remove(fake(1));
  EXPECT_EQ(r.owner(at(0x100010)), nullptr);
  EXPECT_FALSE(r.may_touch(at(0x100010), 8)) << "the bounds shrink with the arenas";
  EXPECT_EQ(r.owner(at(0x300010)), fake(2));
  r.remove(fake(2));
  EXPECT_FALSE(r.may_touch(at(0x300010), 8));
}

TEST(SharedRanges, FreedSlotsAreReusedAndTheTableIsBounded) {
  auto r = std::make_unique<SharedRanges>();
  for (unsigned i = 0; i < SharedRanges::kSlots; ++i) r->add(0x1000000 + i * 0x10000, 0x1000, fake(i + 1));
  EXPECT_THROW(r->add(0x9000000, 0x1000, fake(9999)), hdsm::ConfigError);
  r->remove(fake(7));
  r->add(0x9000000, 0x1000, fake(9999));
  EXPECT_EQ(r->owner(at(0x9000000)), fake(9999));
  EXPECT_EQ(r->owner(at(0x1000000 + 6 * 0x10000)), nullptr);
  EXPECT_EQ(r->owner(at(0x1000000 + 255 * 0x10000)), fake(256));
}

}  // namespace
