// The containers' coherence rules as plans, without devices: the fill of a device copy from the
// closest current copies (precedence: same device, main copy, peer, modified copies through the
// host), the invalidation of overlapping copies by a device write with write-back of only what the
// write does not cover, host accesses, and the initial mechanism's stale reads.
#include "coherence/copy_set.hpp"

#include <gtest/gtest.h>

namespace {

using hdsm::Access;
using hdsm::Mechanism;
using hdsm::coherence::CopyId;
using hdsm::coherence::CopySet;
using hdsm::coherence::ElementRange;
using hdsm::coherence::Extent;
using hdsm::coherence::kMainCopy;
using hdsm::coherence::RangeCopy;
using hdsm::coherence::RangePlan;

RangeCopy step(CopyId from, CopyId to, std::size_t first, std::size_t last) {
  return {from, to, {first, last}};
}

/// A vector of `n` elements on `devices` devices, all peers when `peers`.
CopySet vector_set(std::size_t n, unsigned devices = 2, bool peers = false,
                   Mechanism m = Mechanism::improved) {
  CopySet s(m, n, n);
  std::vector<std::uint8_t> peer(std::size_t{devices} * devices, 0);
  if (peers)
    for (unsigned a = 0; a < devices; ++a)
      for (unsigned b = 0; b < devices; ++b) peer[a * devices + b] = a != b;
  s.set_peers(devices, peer);
  return s;
}

/// A copy of [first, first + n) on `device` that a read made current.
CopyId read_copy(CopySet& s, unsigned device, std::size_t first, std::size_t n, std::uint64_t now = 1) {
  const CopyId id = s.add(device, Extent::range(first, n));
  s.device_access(id, Access::read, now);
  return id;
}

TEST(CopySetFill, AReadOfANewCopyCopiesFromTheValidMainCopy) {
  CopySet s = vector_set(10);
  const CopyId a = s.add(0, Extent::range(2, 5));
  EXPECT_EQ(s.device_access(a, Access::read, 1).copies, (std::vector{step(kMainCopy, a, 2, 7)}));
  EXPECT_TRUE(s.copy(a).valid);
  EXPECT_FALSE(s.copy(a).modified);
  EXPECT_TRUE(s.device_access(a, Access::read, 2).empty()) << "a valid copy is read as it is";
  EXPECT_EQ(s.copy(a).last_used, 2u);
}

TEST(CopySetFill, ARangeIsFilledFromTwoOverlappingCopiesOnTheSameDevice) {
  // The seed's example: [0,10) from valid copies [0,7) and [5,10): two copies, [0,7) and [7,10).
  CopySet s = vector_set(10);
  const CopyId a = read_copy(s, 0, 0, 7);
  const CopyId b = read_copy(s, 0, 5, 5);
  const CopyId dst = s.add(0, Extent::range(0, 10));
  EXPECT_EQ(s.device_access(dst, Access::read, 3).copies,
            (std::vector{step(a, dst, 0, 7), step(b, dst, 7, 10)}));
}

TEST(CopySetFill, TheRemainderOfAPartialSourceComesFromTheMainCopy) {
  // [0,10) from a copy of [3,17): [3,10) from it, [0,3) from the main copy.
  CopySet s = vector_set(20);
  const CopyId src = read_copy(s, 0, 3, 14);
  const CopyId dst = s.add(0, Extent::range(0, 10));
  EXPECT_EQ(s.device_access(dst, Access::read, 2).copies,
            (std::vector{step(src, dst, 3, 10), step(kMainCopy, dst, 0, 3)}));
}

TEST(CopySetFill, TheMainCopyComesBeforeAPeerCopy) {
  CopySet s = vector_set(10, 2, true);
  read_copy(s, 1, 0, 10);
  const CopyId dst = s.add(0, Extent::range(0, 10));
  EXPECT_EQ(s.device_access(dst, Access::read, 2).copies, (std::vector{step(kMainCopy, dst, 0, 10)}));
}

TEST(CopySetFill, APeerCopyServesWhenTheMainCopyIsStale) {
  CopySet s = vector_set(10, 2, true);
  const CopyId w = s.add(1, Extent::range(0, 10));
  s.device_access(w, Access::write, 1);
  EXPECT_FALSE(s.main_valid());
  const CopyId dst = s.add(0, Extent::range(4, 4));
  const RangePlan plan = s.device_access(dst, Access::read, 2);
  EXPECT_EQ(plan.copies, (std::vector{step(w, dst, 4, 8)})) << s.describe(plan);
  EXPECT_TRUE(s.copy(w).modified) << "a peer read leaves the source modified";
}

TEST(CopySetFill, AModifiedCopyOnANonPeerDeviceGoesThroughTheMainCopy) {
  CopySet s = vector_set(10, 2, false);
  const CopyId w = s.add(1, Extent::range(0, 6));
  s.device_access(w, Access::write, 1);
  const CopyId dst = s.add(0, Extent::range(0, 10));
  const RangePlan plan = s.device_access(dst, Access::read, 2);
  EXPECT_EQ(plan.copies,
            (std::vector{step(w, kMainCopy, 0, 6), step(kMainCopy, dst, 0, 6), step(kMainCopy, dst, 6, 10)}))
      << s.describe(plan);
  EXPECT_FALSE(s.copy(w).modified);
  EXPECT_TRUE(s.copy(w).valid);
  EXPECT_TRUE(s.main_valid()) << "no modified copy is left";
}

TEST(CopySetWrite, OverlappingCopiesAreInvalidatedAndOnlyTheUncoveredPartIsWrittenBack) {
  // The seed's example: writing [0,10) while a modified copy holds [5,15) writes [10,15) back.
  CopySet s = vector_set(20);
  const CopyId old = s.add(1, Extent::range(5, 10));
  s.device_access(old, Access::write, 1);
  const CopyId other = read_copy(s, 1, 15, 5, 2);
  const CopyId w = s.add(0, Extent::range(0, 10));
  const RangePlan plan = s.device_access(w, Access::write, 3);
  EXPECT_EQ(plan.copies, (std::vector{step(old, kMainCopy, 10, 15)}));
  EXPECT_FALSE(s.copy(old).valid);
  EXPECT_FALSE(s.copy(old).modified);
  EXPECT_TRUE(s.copy(other).valid) << "a copy that does not overlap the write stays valid";
  EXPECT_TRUE(s.copy(w).modified);
  EXPECT_FALSE(s.main_valid());
}

TEST(CopySetWrite, AReadWriteFillsFirstThenInvalidates) {
  CopySet s = vector_set(10);
  const CopyId a = read_copy(s, 1, 0, 10);
  const CopyId b = s.add(0, Extent::range(0, 5));
  EXPECT_EQ(s.device_access(b, Access::read_write, 2).copies, (std::vector{step(kMainCopy, b, 0, 5)}));
  EXPECT_FALSE(s.copy(a).valid);
  EXPECT_EQ(s.modified_copies(), 1u);
}

TEST(CopySetHost, AReadWritesBackOnlyOverlappingModifiedCopies) {
  CopySet s = vector_set(20);
  const CopyId a = s.add(0, Extent::range(0, 10));
  const CopyId b = s.add(1, Extent::range(10, 10));
  s.device_access(a, Access::write, 1);
  s.device_access(b, Access::write, 2);
  EXPECT_EQ(s.host_access({3, 4}, Access::read).copies, (std::vector{step(a, kMainCopy, 0, 10)}));
  EXPECT_FALSE(s.main_valid()) << "b still holds [10,20)";
  EXPECT_TRUE(s.copy(a).valid) << "a host read leaves device copies valid";
  EXPECT_EQ(s.host_access({12, 13}, Access::read).copies, (std::vector{step(b, kMainCopy, 10, 20)}));
  EXPECT_TRUE(s.main_valid());
  EXPECT_TRUE(s.host_access_is_free(Access::read));
  EXPECT_FALSE(s.host_access_is_free(Access::write)) << "valid device copies must be invalidated";
}

TEST(CopySetHost, AWriteInvalidatesOverlappingCopiesAndWritesBackOnlyTheRest) {
  CopySet s = vector_set(20);
  const CopyId a = s.add(0, Extent::range(0, 10));
  s.device_access(a, Access::write, 1);
  const CopyId inside = s.add(1, Extent::range(12, 3));
  s.device_access(inside, Access::write, 2);
  EXPECT_EQ(s.host_access({5, 15}, Access::write).copies, (std::vector{step(a, kMainCopy, 0, 5)}));
  EXPECT_FALSE(s.copy(a).valid);
  EXPECT_FALSE(s.copy(inside).valid) << "a modified copy inside the write is dropped, not written back";
  EXPECT_TRUE(s.main_valid());
  EXPECT_TRUE(s.host_access_is_free(Access::write));
  EXPECT_EQ(s.device_copies().size(), 2u) << "copies stay allocated";
}

TEST(CopySetHost, OutOfRangeIsRejected) {
  CopySet s = vector_set(10);
  EXPECT_THROW(s.host_access({5, 11}, Access::read), std::invalid_argument);
  EXPECT_THROW(s.add(0, Extent::range(8, 3)), std::invalid_argument);
}

TEST(CopySetEvict, AModifiedCopyIsWrittenBackBeforeItIsReleased) {
  CopySet s = vector_set(10);
  const CopyId a = s.add(0, Extent::range(2, 4));
  s.device_access(a, Access::write, 1);
  const RangePlan plan = s.evict(a);
  EXPECT_EQ(plan.copies, (std::vector{step(a, kMainCopy, 2, 6)}));
  EXPECT_EQ(plan.released, (std::vector{a}));
  s.remove(a);
  EXPECT_TRUE(s.main_valid());
  EXPECT_TRUE(s.device_copies().empty());
}

TEST(CopySetLookup, ExactMatchOnlyAndIdsAreReused) {
  CopySet s = vector_set(10);
  const CopyId a = s.add(0, Extent::range(0, 5));
  EXPECT_EQ(s.find(0, Extent::range(0, 5)), a);
  EXPECT_EQ(s.find(0, Extent::range(0, 4)), kMainCopy);
  EXPECT_EQ(s.find(1, Extent::range(0, 5)), kMainCopy);
  s.remove(a);
  EXPECT_EQ(s.find(0, Extent::range(0, 5)), kMainCopy);
  EXPECT_EQ(s.add(1, Extent::range(1, 1)), a);
}

TEST(CopySetMatrix, ASubmatrixCopyIsFilledRowByRow) {
  // A 4x6 matrix; a 2x3 submatrix at row 1, column 2.
  CopySet s(Mechanism::improved, 24, 6);
  s.set_peers(1, {0});
  const Extent sub{1 * 6 + 2, 2, 3, 6};
  const CopyId c = s.add(0, sub);
  EXPECT_EQ(s.device_access(c, Access::read, 1).copies,
            (std::vector{step(kMainCopy, c, 8, 11), step(kMainCopy, c, 14, 17)}));
  EXPECT_EQ(sub.local(14), 3u);
  EXPECT_EQ(sub.local(16), 5u);
  // Writing it back after a device write touches exactly its runs; a host write of an element
  // between its runs leaves it valid.
  s.device_access(c, Access::write, 2);
  EXPECT_TRUE(s.host_access({12, 13}, Access::write).empty());
  EXPECT_TRUE(s.copy(c).valid);
  EXPECT_EQ(s.host_access({15, 16}, Access::read).copies,
            (std::vector{step(c, kMainCopy, 8, 11), step(c, kMainCopy, 14, 17)}));
}

TEST(CopySetMatrix, WholeRowsFormOneRun) {
  const Extent e = Extent{6, 3, 6, 6}.normalized();
  EXPECT_EQ(e.rows, 1u);
  EXPECT_EQ(e.cols, 18u);
  EXPECT_EQ(hdsm::coherence::bounds(e), (ElementRange{6, 24}));
}

TEST(CopySetMatrix, AWriteOfAColumnBlockWritesBackTheRestOfAModifiedRowBlock) {
  // 2x4 matrix: a modified copy of both rows; a device write of column block [1,3) of both rows.
  CopySet s(Mechanism::improved, 8, 4);
  s.set_peers(2, {0, 0, 0, 0});
  const CopyId rows = s.add(1, Extent{0, 2, 4, 4});
  s.device_access(rows, Access::write, 1);
  const CopyId cols = s.add(0, Extent{1, 2, 2, 4});
  EXPECT_EQ(
      s.device_access(cols, Access::write, 2).copies,
      (std::vector{step(rows, kMainCopy, 0, 1), step(rows, kMainCopy, 3, 5), step(rows, kMainCopy, 7, 8)}));
}

// The seed's first scenario on one device: read all, write the last half, read all.
TEST(CopySetScenario, OneDeviceImprovedReadsTheWrittenHalfFromItsCopy) {
  CopySet s = vector_set(10, 1);
  const CopyId all = read_copy(s, 0, 0, 10);
  const CopyId half = s.add(0, Extent::range(5, 5));
  EXPECT_TRUE(s.device_access(half, Access::write, 2).empty());
  EXPECT_FALSE(s.copy(all).valid);
  EXPECT_EQ(s.device_access(all, Access::read, 3).copies,
            (std::vector{step(half, all, 5, 10), step(kMainCopy, all, 0, 5)}));
}

TEST(CopySetScenario, OneDeviceInitialUsesTheStaleCopy) {
  CopySet s = vector_set(10, 1, false, Mechanism::initial);
  const CopyId all = read_copy(s, 0, 0, 10);
  const CopyId half = s.add(0, Extent::range(5, 5));
  EXPECT_TRUE(s.device_access(half, Access::write, 2).empty());
  EXPECT_TRUE(s.device_access(all, Access::read, 3).empty()) << "the initial mechanism reads [5,10) stale";
}

TEST(CopySetInitial, AHostWriteReleasesEveryDeviceCopy) {
  CopySet s = vector_set(10, 2, false, Mechanism::initial);
  const CopyId b = read_copy(s, 1, 0, 10, 1);
  const CopyId a = s.add(0, Extent::range(0, 5));
  s.device_access(a, Access::write, 2);
  const RangePlan plan = s.host_access({9, 10}, Access::write);
  EXPECT_EQ(plan.copies, (std::vector{step(a, kMainCopy, 0, 5)}));
  EXPECT_EQ(plan.released, (std::vector{b, a}));
}

}  // namespace
