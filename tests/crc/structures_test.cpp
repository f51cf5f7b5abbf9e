// The CRC page buffer (sets, tags, frames, replacement) and the home's directory (readers,
// writers, lazy twins, invalidation lists), without workers or messages.
#include "crc/directory.hpp"
#include "crc/page_buffer.hpp"

#include <hdsm/error.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace {

using hdsm::crc::detail::Directory;
using hdsm::crc::detail::Geometry;
using hdsm::crc::detail::kNoPage;
using hdsm::crc::detail::PageBuffer;

TEST(CrcGeometry, SetsAreTheLargestPowerOfTwoUpToTheFrames) {
  // As many sets as frames (a power of two): four ways per frame, so a set rarely fills while
  // frames are free, and 4 S > N as the seed asks.
  const Geometry g = hdsm::crc::detail::geometry(256 << 10, 4096, 0);
  EXPECT_EQ(g.frames, 64u);
  EXPECT_EQ(g.sets, 64u);
  EXPECT_EQ(g.page_shift, 12u);
  for (std::size_t page = 128; page <= 65536; page *= 2) {
    const Geometry h = hdsm::crc::detail::geometry(192 << 10, page, 0);  // 1.5 x a power of two frames
    EXPECT_GT(4 * h.sets, h.frames) << page;
    EXPECT_LE(h.sets, h.frames) << page;
    EXPECT_GT(2 * h.sets, h.frames) << page;
  }
}

TEST(CrcGeometry, BadPageSizesAndSmallStoresAreErrors) {
  EXPECT_THROW(hdsm::crc::detail::geometry(256 << 10, 3000, 0), hdsm::InvalidArgument);
  EXPECT_THROW(hdsm::crc::detail::geometry(256 << 10, 64, 0), hdsm::InvalidArgument);
  EXPECT_THROW(hdsm::crc::detail::geometry(256 << 10, 128 << 10, 0), hdsm::InvalidArgument);
  EXPECT_THROW(hdsm::crc::detail::geometry(256 << 10, 4096, 3), hdsm::InvalidArgument);
  // Sets whose ways are not more than the frames (the seed's 4 S > N) leave frames unused or fill early.
  for (const std::size_t sets : {8u, 16u}) {  // 64 frames: 32 and 64 ways
    try {
      hdsm::crc::detail::geometry(64 * 128, 128, sets);
      ADD_FAILURE() << "a buffer of " << sets << " sets for 64 frames was accepted";
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("4 x sets > frames"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("at least 32 sets"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(hdsm::crc::detail::geometry(64 * 128, 128, 32).sets, 32u);
  try {
    hdsm::crc::detail::geometry(8192, 4096, 4);  // 2 frames, 4 sets
    FAIL() << "a store of 2 pages for 4 sets was accepted";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("one page per set"), std::string::npos) << e.what();
  }
  EXPECT_THROW(hdsm::crc::detail::geometry(1024, 4096, 0), hdsm::InvalidArgument);  // no page at all
}

class CrcPageBuffer : public ::testing::Test {
 protected:
  // 8 frames of 128 B; 4 sets (4 * 4 = 16 > 8), fewer than the default 8, so that sets fill.
  CrcPageBuffer() : buffer_(8 * 128, "test") {
    buffer_.configure(hdsm::crc::detail::geometry(8 * 128, 128, 4));
  }
  static std::uintptr_t page(std::size_t n) { return 0x10000000 + n * 128; }
  // The first `count` pages from page(0) on that fall into `set`.
  std::vector<std::uintptr_t> in_set(std::size_t set, std::size_t count) const {
    std::vector<std::uintptr_t> pages;
    for (std::size_t n = 0; pages.size() < count; ++n)
      if (hdsm::crc::detail::set_of(buffer_.lookup(), page(n)) == set) pages.push_back(page(n));
    return pages;
  }
  int fill(std::uintptr_t p, bool write = false) {
    const PageBuffer::Place place = buffer_.place(p);
    buffer_.install(place, p, write, true, false);
    return place.way;
  }
  PageBuffer buffer_;
};

TEST_F(CrcPageBuffer, ReadAndWriteTagsAreSeparate) {
  ASSERT_EQ(buffer_.geometry().sets, 4u);
  const int way = fill(page(0));
  EXPECT_EQ(buffer_.find_read(page(0)), way);
  EXPECT_EQ(buffer_.find_write(page(0)), -1);  // read permission only
  buffer_.grant_write(way, false);
  EXPECT_EQ(buffer_.find_write(page(0)), way);
  buffer_.clean(way);
  EXPECT_EQ(buffer_.find_write(page(0)), -1);
  EXPECT_EQ(buffer_.find_read(page(0)), way);  // still readable after the write-back
  // The inline lookup the API uses agrees.
  const auto& l = buffer_.lookup();
  EXPECT_EQ(hdsm::crc::detail::way_of(l, l.read_tags, page(0) + 17), way);
  EXPECT_EQ(hdsm::crc::detail::way_of(l, l.read_tags, in_set(0, 2)[1] + 17), -1);  // same set, other page
}

TEST_F(CrcPageBuffer, PagesASetPeriodApartFallIntoDifferentSets) {
  // Arrays aligned to sets x page size would otherwise share their sets page for page.
  const auto& l = buffer_.lookup();
  for (std::size_t n = 0; n < 4; ++n) {
    EXPECT_NE(hdsm::crc::detail::set_of(l, page(n)), hdsm::crc::detail::set_of(l, page(n + 4))) << n;
    EXPECT_NE(hdsm::crc::detail::set_of(l, page(n)), hdsm::crc::detail::set_of(l, page(n + 8))) << n;
  }
  // Consecutive pages still cover every set.
  std::vector<int> per_set(4, 0);
  for (std::size_t n = 0; n < 4; ++n) ++per_set[hdsm::crc::detail::set_of(l, page(n))];
  EXPECT_EQ(per_set, std::vector<int>(4, 1));
}

TEST_F(CrcPageBuffer, PagesOfOneSetBeyondFourWaysAreConflictMisses) {
  // Five pages of set 0: the fifth replaces a way of that set although three frames are free.
  const std::vector<std::uintptr_t> pages = in_set(0, 5);
  for (std::size_t i = 0; i < 4; ++i) fill(pages[i]);
  EXPECT_EQ(buffer_.conflict_misses, 0u);
  const PageBuffer::Place place = buffer_.place(pages[4]);
  EXPECT_EQ(buffer_.conflict_misses, 1u);
  EXPECT_EQ(place.victim.page, pages[0]);  // the oldest page of the set
  buffer_.install(place, pages[4], false, true, false);
  EXPECT_EQ(buffer_.find_read(pages[0]), -1);
  EXPECT_GE(buffer_.find_read(pages[4]), 0);
}

TEST_F(CrcPageBuffer, AFullBufferReplacesFramesRoundRobinAndReportsModifiedVictims) {
  // Pages 0..7 spread over the 4 sets (two per set) fill the 8 frames without conflicts.
  for (std::size_t i = 0; i < 8; ++i) fill(page(i), /*write=*/i == 0);
  EXPECT_EQ(buffer_.conflict_misses, 0u);
  PageBuffer::Place first = buffer_.place(page(8));  // its set has a free way: a capacity miss
  EXPECT_EQ(first.victim.page, page(0));             // frame 0 goes first
  EXPECT_TRUE(first.victim.dirty);                   // it had write permission: flush it first
  buffer_.install(first, page(8), false, true, false);
  PageBuffer::Place second = buffer_.place(page(9));
  EXPECT_EQ(second.victim.page, page(1));
  EXPECT_FALSE(second.victim.dirty);
  EXPECT_EQ(buffer_.evictions, 2u);
  EXPECT_EQ(buffer_.conflict_misses, 0u);
}

TEST_F(CrcPageBuffer, APhaseOfReadOnlyMissesListsEachFrameOnce) {
  // Thousands of read-only copies between two acquires: the list of frames to drop stays bounded.
  for (std::size_t i = 0; i < 5000; ++i) {
    const PageBuffer::Place p = buffer_.place(page(i));
    buffer_.install(p, page(i), false, /*registered=*/false, false);
  }
  EXPECT_LE(buffer_.unregistered_listed(), buffer_.geometry().frames);
  EXPECT_EQ(buffer_.drop_unregistered(), buffer_.geometry().frames);  // every frame held one
  EXPECT_EQ(buffer_.unregistered_listed(), 0u);
  const PageBuffer::Place p = buffer_.place(page(0));  // and frames are listed again afterwards
  buffer_.install(p, page(0), false, false, false);
  EXPECT_EQ(buffer_.unregistered_listed(), 1u);
}

TEST_F(CrcPageBuffer, AWritePhaseThroughThousandsOfPagesKeepsTheModifiedListBounded) {
  // Every write miss evicts a modified page (written back by the worker): the list of ways to
  // write back at the release must not keep an entry per page ever written.
  const std::size_t frames = buffer_.geometry().frames;
  for (std::size_t i = 0; i < 5000; ++i) {
    fill(page(i), /*write=*/true);
    ASSERT_LE(buffer_.modified_listed(), 2 * frames) << i;
  }
  // The release still sees exactly the pages that hold write permission, each once, oldest first.
  std::vector<std::uintptr_t> seen;
  buffer_.for_each_modified([&](int way, std::uintptr_t p, bool) {
    EXPECT_EQ(buffer_.find_write(p), way);
    seen.push_back(p);
  });
  std::vector<std::uintptr_t> want;
  for (std::size_t i = 5000 - buffer_.geometry().frames; i < 5000; ++i) want.push_back(page(i));
  EXPECT_EQ(seen, want);
}

TEST_F(CrcPageBuffer, UnregisteredCopiesAreDroppedTogether) {
  fill(page(0));
  const PageBuffer::Place p = buffer_.place(page(1));
  buffer_.install(p, page(1), false, /*registered=*/false, false);
  EXPECT_EQ(buffer_.drop_unregistered(), 1u);
  EXPECT_EQ(buffer_.find_read(page(1)), -1);
  EXPECT_GE(buffer_.find_read(page(0)), 0);
}

// The directory on a space of 4 pages of 16 bytes and 3 workers.
class CrcDirectory : public ::testing::Test {
 protected:
  CrcDirectory() : dir_(4, 16, 3), home_(64, std::byte{0}) {}
  std::span<std::byte> page(std::size_t n) { return {home_.data() + 16 * n, 16}; }
  std::vector<std::uint64_t> take(int w) {
    std::vector<std::uint64_t> out;
    dir_.take_invalidations(w, out);
    return out;
  }
  Directory dir_;
  std::vector<std::byte> home_;
};

TEST_F(CrcDirectory, FetchesAndWriteFaultsFillTheReadAndWriteSets) {
  dir_.read_fetch(1, 0);
  EXPECT_EQ(dir_.readers(1), 0b001u);
  EXPECT_EQ(dir_.writers(1), 0u);
  EXPECT_FALSE(dir_.write_fault(1, 0, /*has_copy=*/true));  // an upgrade of a current copy: no data
  EXPECT_TRUE(dir_.write_fault(1, 2, /*has_copy=*/false));  // a fetch for writing
  EXPECT_EQ(dir_.readers(1), 0b101u);                       // the write set is in the read set
  EXPECT_EQ(dir_.writers(1), 0b101u);
  EXPECT_FALSE(dir_.has_twin(1, 0));  // twins are lazy: none at the write fault
  EXPECT_EQ(dir_.twins_alive(), 0u);
}

TEST_F(CrcDirectory, AWriteBackThatChangesThePageMovesItsVersion) {
  // Workers that copy pages themselves compare versions: every change must move one, and only
  // the page it changed.
  dir_.write_fault(2, 0, false);
  std::vector<std::byte> same(page(2).begin(), page(2).end());
  dir_.write_back(2, 0, page(2), same);  // nothing changed: the copy a reader made still holds
  EXPECT_EQ(dir_.version(2), 0u);
  dir_.write_fault(2, 0, false);
  std::vector<std::byte> changed = same;
  changed[5] = std::byte{1};
  dir_.write_back(2, 0, page(2), changed);
  EXPECT_EQ(dir_.version(2), 1u);
  EXPECT_EQ(dir_.versions()[2].load(), 1u);
  EXPECT_EQ(dir_.version(1), 0u);
  EXPECT_EQ(dir_.version(3), 0u);
}

TEST_F(CrcDirectory, ASingleWritersNoteMovesThePagesVersion) {
  // A reader whose copy began before the single writer's bytes and whom the home counts only after
  // the note is not listed: the moved version makes it copy again.
  dir_.read_fetch(1, 1);
  dir_.single_writer_update(1, 0);
  EXPECT_EQ(dir_.version(1), 1u);
  EXPECT_TRUE(dir_.listed(1, 1));  // a reader counted before the note is listed instead
  dir_.single_writer_update(2, 0);
  EXPECT_EQ(dir_.version(2), 1u);
  EXPECT_EQ(dir_.version(3), 0u);
}

TEST_F(CrcDirectory, LazyTwinsMergeTwoWritersOfOnePageToBothWritersBytes) {
  std::memset(page(0).data(), 7, 16);
  dir_.write_fault(0, 0, false);
  dir_.write_fault(0, 1, false);
  std::vector<std::byte> a(page(0).begin(), page(0).end()), b = a;
  a[2] = std::byte{42};
  b[9] = std::byte{43};
  // Writer 0 goes first: the twin (the page before the update) is made now, for both writers.
  dir_.write_back(0, 0, page(0), a);
  EXPECT_EQ(dir_.twins_made(), 1u);
  EXPECT_TRUE(dir_.has_twin(0, 1));
  EXPECT_FALSE(dir_.has_twin(0, 0));  // writer 0 is done with it
  EXPECT_EQ(dir_.writers(0), 0b010u);
  // Writer 1 merges against the same twin: writer 0's byte survives.
  dir_.write_back(0, 1, page(0), b);
  EXPECT_EQ(page(0)[2], std::byte{42});
  EXPECT_EQ(page(0)[9], std::byte{43});
  EXPECT_EQ(page(0)[0], std::byte{7});
  EXPECT_EQ(dir_.twins_alive(), 0u);
  EXPECT_EQ(dir_.twins_made(), 1u);
}

TEST_F(CrcDirectory, AWriterThatComesAfterAnUpdateGetsATwinOfTheUpdatedPage) {
  dir_.write_fault(3, 0, false);
  std::vector<std::byte> a(16, std::byte{1});
  dir_.write_back(3, 0, page(3), a);  // no other writer: its own twin only
  dir_.write_fault(3, 1, false);      // gets the updated page
  std::vector<std::byte> b(page(3).begin(), page(3).end());
  b[5] = std::byte{9};
  dir_.write_back(3, 1, page(3), b);
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(page(3)[i], i == 5 ? std::byte{9} : std::byte{1}) << i;
}

TEST_F(CrcDirectory, UpdatesGoOnTheOtherReadersListsUntilTheirAcquire) {
  dir_.read_fetch(2, 0);
  dir_.read_fetch(2, 1);
  dir_.write_fault(2, 2, false);
  std::vector<std::byte> c(16, std::byte{3});
  dir_.write_back(2, 2, page(2), c);
  EXPECT_EQ(take(0), std::vector<std::uint64_t>{2});
  EXPECT_TRUE(take(0).empty());  // taken once
  EXPECT_EQ(take(1), std::vector<std::uint64_t>{2});
  EXPECT_TRUE(take(2).empty());  // not the updating worker's own
}

TEST_F(CrcDirectory, AWriteBackThatChangedNothingInvalidatesNothing) {
  dir_.read_fetch(1, 0);
  dir_.write_fault(1, 1, false);
  std::vector<std::byte> same(page(1).begin(), page(1).end());
  EXPECT_EQ(dir_.write_back(1, 1, page(1), same), 0u);
  EXPECT_TRUE(take(0).empty());
}

TEST_F(CrcDirectory, AWriteFaultTakesThePageOffTheListAndSendsItAgainWhenStale) {
  dir_.read_fetch(0, 0);
  dir_.write_fault(0, 1, false);
  std::vector<std::byte> c(16, std::byte{5});
  dir_.write_back(0, 1, page(0), c);
  EXPECT_TRUE(dir_.listed(0, 0));
  // Worker 0 upgrades its stale copy: it must get the page again, and the list entry goes.
  EXPECT_TRUE(dir_.write_fault(0, 0, /*has_copy=*/true));
  EXPECT_FALSE(dir_.listed(0, 0));
  EXPECT_TRUE(take(0).empty());
}

TEST_F(CrcDirectory, AWriteBackWithoutPermissionIsAnError) {
  std::vector<std::byte> c(16);
  EXPECT_THROW(dir_.write_back(0, 1, page(0), c), hdsm::InvalidArgument);
}

}  // namespace

namespace {

// Four localized runs stay valid together: replacement passes over the last pages to come in.
TEST(CrcDirectoryReset, EntriesOfAnotherPageCountAreForgottenAndATablesGrowthStartsEmpty) {
  Directory dir(8, 16, 2);
  dir.read_fetch(5, 0);
  dir.write_fault(7, 1, false);
  dir.single_writer_update(5, 1);
  EXPECT_TRUE(dir.listed(5, 0));
  dir.reset(4, 32);  // fewer, larger pages
  EXPECT_EQ(dir.pages(), 4u);
  for (std::size_t p = 0; p < 4; ++p) EXPECT_EQ(dir.readers(p) | dir.writers(p), 0u) << p;
  dir.reset(1u << 20, 16);  // more pages than ever: a fresh table
  EXPECT_EQ(dir.pages(), 1u << 20);
  EXPECT_EQ(dir.readers(5), 0u);
  EXPECT_EQ(dir.writers(7), 0u);
  EXPECT_FALSE(dir.listed(5, 0));
  dir.write_fault((1u << 20) - 1, 0, false);  // the last page is there
  EXPECT_EQ(dir.writers((1u << 20) - 1), 1u);
  std::vector<std::uint64_t> out;
  dir.take_invalidations(0, out);
  EXPECT_TRUE(out.empty());
}

TEST(CrcPageBufferRecency, TheLastPagesToComeInAreNotReplaced) {
  PageBuffer buffer(4 * 128, "test");
  buffer.configure(hdsm::crc::detail::geometry(4 * 128, 128, 0));  // 4 frames, 2 sets
  std::vector<std::size_t> frames;
  for (std::size_t i = 0; i < 12; ++i) {
    const std::uintptr_t p = 0x20000000 + 4 * i * 128;  // all in set 0 (page numbers 0 mod 4)
    const PageBuffer::Place place = buffer.place(p);
    for (std::size_t back = 1; back <= 3 && back <= frames.size(); ++back)
      EXPECT_NE(place.frame, frames[frames.size() - back])
          << "page " << i << " took the frame of page " << i - back;
    buffer.install(place, p, false, true, false);
    frames.push_back(place.frame);
  }
}

}  // namespace
