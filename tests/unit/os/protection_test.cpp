// ProtectionMap: per-block protections checked against the kernel's own view in /proc/self/maps.
#include "os/protection.hpp"
#include "os/mapping.hpp"

#include <hdsm/error.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

using hdsm::os::Mapping;
using hdsm::os::Protection;
using hdsm::os::ProtectionMap;

struct Vma {
  std::uintptr_t start, end;
  Protection protection;
};

// The VMAs of /proc/self/maps that overlap [base, base + bytes), clipped to it.
std::vector<Vma> region_vmas(const std::byte* base, std::size_t bytes) {
  const auto lo = reinterpret_cast<std::uintptr_t>(base), hi = lo + bytes;
  std::vector<Vma> vmas;
  std::ifstream in("/proc/self/maps");
  std::string line;
  while (std::getline(in, line)) {
    std::uintptr_t start = 0, end = 0;
    const char* const last = line.data() + line.size();
    const auto dash = std::from_chars(line.data(), last, start, 16);
    const auto space = std::from_chars(dash.ptr + 1, last, end, 16);
    if (end <= lo || start >= hi) continue;
    const char* perms = space.ptr + 1;
    const Protection p = perms[1] == 'w'   ? Protection::read_write
                         : perms[0] == 'r' ? Protection::read
                                           : Protection::none;
    vmas.push_back({std::max(start, lo), std::min(end, hi), p});
  }
  return vmas;
}

std::size_t count_runs(const ProtectionMap& map) {
  std::size_t runs = 1;
  for (std::size_t b = 1; b < map.blocks(); ++b) runs += map.effective(b) != map.effective(b - 1);
  return runs;
}

// The kernel's VMAs over the region are exactly the map's runs with its effective protections, and
// no block is less restrictive than desired.
testing::AssertionResult matches_kernel(const ProtectionMap& map) {
  const std::size_t bytes = map.blocks() * map.block_bytes();
  const auto vmas = region_vmas(map.base(), bytes);
  const auto lo = reinterpret_cast<std::uintptr_t>(map.base());
  std::size_t covered = 0;
  for (const auto& v : vmas) {
    covered += v.end - v.start;
    for (std::size_t b = (v.start - lo) / map.block_bytes(); b <= (v.end - 1 - lo) / map.block_bytes(); ++b)
      if (map.effective(b) != v.protection)
        return testing::AssertionFailure()
               << "block " << b << " is " << to_string(v.protection) << " in the kernel, "
               << to_string(map.effective(b)) << " in the map";
  }
  if (covered != bytes)
    return testing::AssertionFailure() << "VMAs cover " << covered << " of " << bytes << " bytes";
  if (vmas.size() != map.runs())
    return testing::AssertionFailure() << vmas.size() << " VMAs, map counts " << map.runs() << " runs";
  if (map.runs() > map.run_budget())
    return testing::AssertionFailure() << map.runs() << " runs exceed the budget of " << map.run_budget();
  for (std::size_t b = 0; b < map.blocks(); ++b)
    if (map.effective(b) > map.desired(b))
      return testing::AssertionFailure() << "block " << b << " is " << to_string(map.effective(b))
                                         << ", desired " << to_string(map.desired(b));
  return testing::AssertionSuccess();
}

// Asks the kernel whether it may read or write a byte, through a pipe: EFAULT instead of a signal.
class Probe {
 public:
  Probe() { EXPECT_EQ(::pipe2(fds_, O_NONBLOCK), 0); }
  ~Probe() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  bool readable(const std::byte* p) {
    if (::write(fds_[1], p, 1) != 1) return false;
    drain();
    return true;
  }
  bool writable(std::byte* p) {
    const char c = 0;
    EXPECT_EQ(::write(fds_[1], &c, 1), 1);
    if (::read(fds_[0], p, 1) == 1) return true;
    drain();
    return false;
  }

 private:
  void drain() {
    char c;
    EXPECT_EQ(::read(fds_[0], &c, 1), 1);
  }
  int fds_[2] = {-1, -1};
};

std::size_t page() { return hdsm::os::page_size(); }

TEST(ProtectionMap, AppliesProtectionsTheKernelEnforces) {
  const std::vector<Protection> pattern = {Protection::read_write, Protection::none, Protection::read,
                                           Protection::read,       Protection::none, Protection::read_write,
                                           Protection::read_write, Protection::read};
  Mapping region(pattern.size() * page(), "probe region");
  ProtectionMap map(region.data(), pattern.size(), page(), "probe region", Protection::read_write, 100);
  for (std::size_t b = 0; b < pattern.size(); ++b) map.set(b, 1, pattern[b]);
  EXPECT_EQ(map.runs(), 6u);
  EXPECT_EQ(map.granularity_blocks(), 1u);
  EXPECT_TRUE(matches_kernel(map));
  Probe probe;
  for (std::size_t b = 0; b < pattern.size(); ++b) {
    std::byte* p = region.data() + b * page();
    EXPECT_EQ(map.effective(b), pattern[b]) << b;
    EXPECT_EQ(probe.readable(p), pattern[b] != Protection::none) << b;
    EXPECT_EQ(probe.writable(p), pattern[b] == Protection::read_write) << b;
    EXPECT_EQ(map.allows(b, false), pattern[b] != Protection::none) << b;
    EXPECT_EQ(map.allows(b, true), pattern[b] == Protection::read_write) << b;
  }
}

TEST(ProtectionDeathTest, TouchingAnInvalidBlockFaults) {
  Mapping region(4 * page(), "fault region");
  ProtectionMap map(region.data(), 4, page(), "fault region", Protection::read_write, 100);
  map.set(1, 2, Protection::none);
  const auto read_byte = [&](std::size_t block) {
    (void)*reinterpret_cast<volatile unsigned char*>(region.data() + block * page());
    std::_Exit(0);
  };
  const auto failed = [](int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); };
  EXPECT_EXIT(read_byte(2), failed, "");
  EXPECT_EXIT(read_byte(3), testing::ExitedWithCode(0), "");
}

TEST(ProtectionMap, CoalescesEqualNeighbours) {
  const std::size_t n = 64;
  Mapping region(n * page(), "coalescing region");
  ProtectionMap map(region.data(), n, page(), "coalescing region", Protection::read_write, 1000);
  for (std::size_t b = 0; b < n; ++b) {
    map.set(b, 1, Protection::read);
    ASSERT_EQ(map.runs(), b + 1 < n ? 2u : 1u) << b;
  }
  EXPECT_TRUE(matches_kernel(map));

  for (std::size_t b = 0; b < n; b += 2) map.set(b, 1, Protection::none);
  EXPECT_EQ(map.runs(), n);
  EXPECT_TRUE(matches_kernel(map));

  for (std::size_t b = 1; b < n; b += 2) {
    map.set(b, 1, Protection::none);
    ASSERT_EQ(map.runs(), std::max<std::size_t>(n - b - 1, 1)) << b;
  }
  EXPECT_TRUE(matches_kernel(map));

  // Mixed states brought to one protection take one mprotect; unchanged blocks take none.
  for (std::size_t b = 0; b < n; b += 3) map.set(b, 1, Protection::read_write);
  auto calls = map.stats().mprotect_calls;
  map.set(0, n, Protection::read);
  EXPECT_EQ(map.stats().mprotect_calls, calls + 1);
  EXPECT_EQ(map.runs(), 1u);
  calls = map.stats().mprotect_calls;
  map.set(5, 20, Protection::read);
  EXPECT_EQ(map.stats().mprotect_calls, calls);
  EXPECT_TRUE(matches_kernel(map));
  EXPECT_EQ(map.stats().degradations, 0u);
}

// try_set is set() for fault handlers: it applies what fits the budget exactly like set() and
// refuses, changing nothing, what would need a degradation.
TEST(ProtectionMap, TrySetAppliesWithinBudgetAndRefusesBeyond) {
  const std::size_t n = 16;
  Mapping region(n * page(), "try_set region");
  ProtectionMap map(region.data(), n, page(), "try_set region", Protection::read, 3);
  ASSERT_TRUE(map.try_set(4, 1, Protection::read_write));  // read | rw | read: 3 runs
  EXPECT_EQ(map.runs(), 3u);
  EXPECT_EQ(map.desired(4), Protection::read_write);
  EXPECT_TRUE(map.allows(4, true));
  EXPECT_TRUE(matches_kernel(map));
  ASSERT_TRUE(map.try_set(5, 1, Protection::read_write));  // grows the run: still 3
  EXPECT_EQ(map.runs(), 3u);
  const auto calls = map.stats().mprotect_calls;
  EXPECT_FALSE(map.try_set(9, 1, Protection::read_write));  // 5 runs > budget 3
  EXPECT_EQ(map.stats().mprotect_calls, calls);
  EXPECT_EQ(map.desired(9), Protection::read);
  EXPECT_EQ(map.effective(9), Protection::read);
  EXPECT_FALSE(map.try_set(n - 1, 2, Protection::read_write));  // past the end
  EXPECT_FALSE(map.try_set(0, 0, Protection::read_write));
  EXPECT_TRUE(matches_kernel(map));
  // Once degraded (set() coarsened the granularity), one block still gets its own protection where
  // the budget allows (a fault handler opens pages one at a time), several only through set().
  map.set(9, 1, Protection::none);
  ASSERT_GT(map.granularity_blocks(), 1u);
  EXPECT_TRUE(matches_kernel(map));
  EXPECT_FALSE(map.try_set(0, 2, Protection::read_write));
  const std::size_t group = map.granularity_blocks();
  // The group holding block 9 is none now; block 8 (desired read) lies in it.
  ASSERT_EQ(map.effective(8 / group * group), Protection::none);
  ASSERT_EQ(map.desired(8), Protection::read);
  // Groups of 4 ([4, 8) read, [8, 12) none): block 8 alone keeps 3 runs.
  ASSERT_EQ(group, 4u);
  EXPECT_TRUE(map.try_set(8, 1, Protection::read));
  EXPECT_TRUE(matches_kernel(map));
  EXPECT_EQ(map.effective(8), Protection::read);
  EXPECT_EQ(map.effective(9), Protection::none);
  EXPECT_EQ(map.desired(8), Protection::read);
}

// A fault handler with the budget full makes room: other runs merge with a neighbour of lower
// protection (their blocks fault again when next touched), nearest after the clock hand first, and
// the block gets its protection exactly.
TEST(ProtectionMap, TrySetMakingRoomLowersOtherRunsWhenTheBudgetIsFull) {
  const std::size_t n = 16;
  Mapping region(n * page(), "room region");
  ProtectionMap map(region.data(), n, page(), "room region", Protection::read, 5);
  ASSERT_TRUE(map.try_set(2, 1, Protection::read_write));  // read | rw | read: 3 runs
  ASSERT_TRUE(map.try_set(6, 1, Protection::read_write));  // 5 runs: the budget
  EXPECT_FALSE(map.try_set(10, 1, Protection::read_write));
  ASSERT_TRUE(map.try_set_making_room(10, Protection::read_write));
  EXPECT_EQ(map.effective(10), Protection::read_write);
  EXPECT_EQ(map.effective(2), Protection::read);  // the first run after the hand, lowered to read
  EXPECT_EQ(map.effective(6), Protection::read_write);
  EXPECT_EQ(map.desired(2), Protection::read_write);  // still wanted: it reopens on its next fault
  EXPECT_EQ(map.runs(), 5u);
  EXPECT_EQ(map.stats().closed_for_room, 1u);
  EXPECT_TRUE(matches_kernel(map));
  // The hand moved on: block 6's run goes next, not block 2's reopened one.
  ASSERT_TRUE(map.try_set_making_room(2, Protection::read_write));
  EXPECT_EQ(map.effective(2), Protection::read_write);
  EXPECT_EQ(map.effective(6), Protection::read);
  EXPECT_EQ(map.effective(10), Protection::read_write);
  EXPECT_TRUE(matches_kernel(map));
  // A block that is none among read ones: the read runs go down to none, the block alone keeps read.
  map.set(0, n, Protection::read);
  map.set(8, 1, Protection::none);
  map.set(12, 1, Protection::none);  // read | none | read | none | read: 5 runs
  ASSERT_TRUE(map.try_set_making_room(4, Protection::read_write));
  EXPECT_EQ(map.effective(4), Protection::read_write);
  EXPECT_LE(map.runs(), 5u);
  EXPECT_EQ(map.effective(10), Protection::none);  // [9, 12) went down to its neighbours' none
  EXPECT_TRUE(matches_kernel(map));
}

// A degraded map's fault path: a block whose group is closed gets its own protection back from
// try_set when the budget has room, and the kernel enforces exactly that.
TEST(ProtectionMap, TrySetOfOneBlockOpensItInADegradedMap) {
  const std::size_t n = 16;
  Mapping region(n * page(), "degraded try_set region");
  ProtectionMap map(region.data(), n, page(), "degraded try_set region", Protection::read, 4);
  // read | none | read | none | read: 5 runs > 4, so groups of two: [0, 4) none, the rest read.
  map.set(1, 1, Protection::none);
  map.set(3, 1, Protection::none);
  ASSERT_EQ(map.granularity_blocks(), 2u);
  ASSERT_EQ(map.effective(0), Protection::none);
  ASSERT_EQ(map.effective(2), Protection::none);
  ASSERT_EQ(map.runs(), 2u);
  Probe probe;
  EXPECT_FALSE(probe.readable(region.data()));
  // Block 0 alone: read | none [1, 4) | read: 3 runs.
  ASSERT_TRUE(map.try_set(0, 1, Protection::read));
  EXPECT_EQ(map.effective(0), Protection::read);
  EXPECT_EQ(map.effective_unchecked(0), Protection::read);
  EXPECT_TRUE(probe.readable(region.data()));
  EXPECT_FALSE(probe.readable(region.data() + page()));
  EXPECT_TRUE(matches_kernel(map));
  // Block 2 as well would make read | none | read | none | read: 5 runs, beyond the budget.
  EXPECT_FALSE(map.try_set(2, 1, Protection::read));
  EXPECT_EQ(map.effective(2), Protection::none);
  EXPECT_FALSE(probe.readable(region.data() + 2 * page()));
  EXPECT_TRUE(matches_kernel(map));
}

// try_set records a block's protection before its mprotect (whose TLB flush makes every later
// touch cost a page walk) and must take the record back when the kernel refuses: here the block's
// page is not mapped, so mprotect fails with ENOMEM.
TEST(ProtectionMap, TrySetOfOneBlockWhoseMprotectFailsChangesNothing) {
  const std::size_t n = 8;
  Mapping region(n * page(), "failing try_set region");
  ProtectionMap map(region.data(), n, page(), "failing try_set region", Protection::read, 16);
  ASSERT_TRUE(map.try_set(2, 1, Protection::read_write));
  ASSERT_EQ(map.runs(), 3u);
  std::byte* const hole = region.data() + 5 * page();
  ASSERT_EQ(::munmap(hole, page()), 0);
  EXPECT_FALSE(map.try_set(5, 1, Protection::read_write));
  EXPECT_EQ(map.desired(5), Protection::read);
  EXPECT_EQ(map.effective(5), Protection::read);
  EXPECT_FALSE(map.allows(5, true));
  EXPECT_EQ(map.runs(), 3u);
  // Mapped again (as a VMA of its own, so the kernel's count no longer matches the runs), the
  // block takes the protection.
  ASSERT_EQ(::mmap(hole, page(), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), hole);
  Probe probe;
  EXPECT_FALSE(probe.writable(hole));
  EXPECT_TRUE(map.try_set(5, 1, Protection::read_write));
  EXPECT_EQ(map.runs(), 5u);
  EXPECT_EQ(map.effective(5), Protection::read_write);
  EXPECT_TRUE(probe.writable(hole));
}

TEST(ProtectionMap, DegradesToTheMostRestrictiveProtectionOfEachGroup) {
  const std::size_t n = 16;
  Mapping region(n * page(), "degrading region");
  ProtectionMap map(region.data(), n, page(), "degrading region", Protection::read_write, 6);
  map.set(1, 1, Protection::read);
  map.set(6, 1, Protection::none);
  EXPECT_EQ(map.runs(), 5u);
  EXPECT_EQ(map.granularity_blocks(), 1u);
  map.set(12, 1, Protection::read);  // seven runs of single blocks, six of pairs
  EXPECT_EQ(map.granularity_blocks(), 2u);
  EXPECT_EQ(map.stats().degradations, 1u);
  const std::vector<Protection> expected = {
      Protection::read,       Protection::read,       Protection::read_write, Protection::read_write,
      Protection::read_write, Protection::read_write, Protection::none,       Protection::none,
      Protection::read_write, Protection::read_write, Protection::read_write, Protection::read_write,
      Protection::read,       Protection::read,       Protection::read_write, Protection::read_write};
  for (std::size_t b = 0; b < n; ++b) EXPECT_EQ(map.effective(b), expected[b]) << b;
  EXPECT_EQ(map.runs(), 6u);
  EXPECT_TRUE(matches_kernel(map));

  // A write fault on block 0 is spurious, one on block 1 or any access to block 6 is not.
  EXPECT_TRUE(map.allows(0, true));
  EXPECT_FALSE(map.allows(1, true));
  EXPECT_TRUE(map.allows(1, false));
  EXPECT_FALSE(map.allows(6, false));
  EXPECT_FALSE(map.refine(0));  // would make seven runs
  EXPECT_EQ(map.effective(0), Protection::read);
  EXPECT_EQ(map.stats().refused_refinements, 1u);
  map.set(12, 2, Protection::read_write);  // frees two runs
  EXPECT_EQ(map.runs(), 4u);
  EXPECT_TRUE(map.refine(0));
  EXPECT_EQ(map.effective(0), Protection::read_write);
  EXPECT_EQ(map.effective(1), Protection::read);
  EXPECT_TRUE(map.refine(1));  // already exact
  EXPECT_EQ(map.stats().refinements, 1u);
  EXPECT_EQ(map.runs(), 5u);
  EXPECT_TRUE(matches_kernel(map));
  EXPECT_EQ(map.granularity_blocks(), 2u);
}

// One batch that needs more runs than the budget must not leave every later batch coarse.
TEST(ProtectionMap, RegainsSingleBlocksWhenTheDesiredRunsFitAgain) {
  const std::size_t n = 16;
  Mapping region(n * page(), "regaining region");
  ProtectionMap map(region.data(), n, page(), "regaining region", Protection::read_write, 8);
  EXPECT_TRUE(map.regain_granularity());                                     // nothing to regain
  for (const std::size_t b : {1, 3, 5, 7}) map.set(b, 1, Protection::read);  // nine runs
  ASSERT_EQ(map.granularity_blocks(), 2u);
  EXPECT_FALSE(map.regain_granularity());
  map.set(7, 1, Protection::read_write);  // seven runs: more than three quarters of the budget
  EXPECT_FALSE(map.regain_granularity());
  EXPECT_EQ(map.granularity_blocks(), 2u);
  map.set(5, 1, Protection::read_write);    // five runs
  EXPECT_EQ(map.granularity_blocks(), 2u);  // set() alone keeps the granularity
  EXPECT_TRUE(map.regain_granularity());
  EXPECT_EQ(map.granularity_blocks(), 1u);
  EXPECT_EQ(map.stats().regains, 1u);
  EXPECT_EQ(map.runs(), 5u);
  for (std::size_t b = 0; b < n; ++b)
    EXPECT_EQ(map.effective(b), b == 1 || b == 3 ? Protection::read : Protection::read_write) << b;
  EXPECT_TRUE(matches_kernel(map));
  Probe probe;
  EXPECT_TRUE(probe.writable(region.data() + 0 * page()));  // its pair's read no longer closes it
  EXPECT_FALSE(probe.writable(region.data() + 1 * page()));
}

// 100 000 blocks in alternating states would need 100 000 VMAs, past vm.max_map_count (65530).
TEST(ProtectionMap, HundredThousandAlternatingBlocksStayWithinTheMappingLimit) {
  const std::size_t n = 100'000, block = std::max<std::size_t>(4096, page());
  Mapping region(n * block, "alternating region");
  ProtectionMap map(region.data(), n, block, "alternating region");
  if (map.run_budget() >= n) GTEST_SKIP() << "vm.max_map_count allows " << map.run_budget() << " runs";
  for (std::size_t b = 0; b < n; ++b) {
    map.set(b, 1, b % 2 == 0 ? Protection::none : Protection::read_write);
    if (b % 25'000 == 0) {
      ASSERT_LE(region_vmas(region.data(), n * block).size(), map.run_budget()) << b;
    }
  }
  EXPECT_GE(map.stats().degradations, 1u);
  EXPECT_EQ(map.granularity_blocks(), 2u);  // pairs of (none, read_write) are all none: one run
  for (std::size_t b = 0; b < n; ++b)
    ASSERT_EQ(map.desired(b), b % 2 == 0 ? Protection::none : Protection::read_write);
  EXPECT_EQ(count_runs(map), map.runs());
  EXPECT_TRUE(matches_kernel(map));

  ASSERT_TRUE(map.allows(12'345, true));
  EXPECT_EQ(map.effective(12'345), Protection::none);
  EXPECT_TRUE(map.refine(12'345));
  EXPECT_EQ(map.effective(12'345), Protection::read_write);
  Probe probe;
  EXPECT_TRUE(probe.writable(region.data() + 12'345 * block));
  EXPECT_FALSE(probe.readable(region.data() + 12'347 * block));

  // Sparse invalid blocks fit at the coarse granularity; their group partners fault spuriously.
  map.set(0, n, Protection::read_write);
  for (std::size_t b = 0; b < n; b += 64) map.set(b, 1, Protection::none);
  EXPECT_EQ(map.runs(), 2 * ((n + 63) / 64));
  EXPECT_TRUE(matches_kernel(map));
}

// A return to granularity 1 that the kernel refuses is not tried again at once: the next call
// skips, after a second refusal the next two, and a success starts over.
TEST(ProtectionMap, ARefusedRegainWaitsLongerEachTime) {
  const std::size_t n = 16;
  Mapping region(n * page(), "backing-off region");
  ProtectionMap map(region.data(), n, page(), "backing-off region", Protection::read_write, 6);
  const auto degrade = [&] {
    map.set(1, 1, Protection::read);
    map.set(6, 1, Protection::none);
    map.set(12, 1, Protection::read);  // seven runs of single blocks: pairs
    ASSERT_EQ(map.granularity_blocks(), 2u);
    map.set(12, 1, Protection::read_write);  // five runs, which fit in three quarters of six
  };
  // Whether a call tried (made an mprotect call), and whether the map is at granularity 1 after it.
  const auto regain = [&](bool& tried) {
    const std::uint64_t calls = map.stats().mprotect_calls;
    const bool fine = map.regain_granularity();
    tried = map.stats().mprotect_calls != calls;
    return fine;
  };
  bool tried = false;
  degrade();
  map.refuse_mprotects(1);
  EXPECT_FALSE(regain(tried));
  EXPECT_TRUE(tried);
  EXPECT_EQ(map.stats().enomem_failures, 1u);
  EXPECT_TRUE(matches_kernel(map));
  EXPECT_FALSE(regain(tried));  // waits one call
  EXPECT_FALSE(tried);
  map.refuse_mprotects(1);
  EXPECT_FALSE(regain(tried));  // tries, refused again
  EXPECT_TRUE(tried);
  for (int i = 0; i < 2; ++i) {  // waits two calls
    EXPECT_FALSE(regain(tried));
    EXPECT_FALSE(tried);
  }
  EXPECT_TRUE(regain(tried));
  EXPECT_TRUE(tried);
  EXPECT_EQ(map.stats().regains, 1u);
  EXPECT_TRUE(matches_kernel(map));
  // A success starts over: the next refusal waits one call.
  map.set(0, n, Protection::read_write);
  degrade();
  map.refuse_mprotects(1);
  EXPECT_FALSE(regain(tried));
  EXPECT_FALSE(regain(tried));
  EXPECT_FALSE(tried);
  EXPECT_TRUE(regain(tried));
  EXPECT_TRUE(matches_kernel(map));
}

TEST(ProtectionMap, KernelMappingLimitDegradesInsteadOfFailing) {
  std::size_t limit = 0;
  std::ifstream("/proc/sys/vm/max_map_count") >> limit;
  const std::size_t n = 100'000, block = std::max<std::size_t>(4096, page());
  if (limit == 0 || limit >= n) GTEST_SKIP() << "vm.max_map_count is " << limit;
  Mapping region(n * block, "over-budget region");
  // A budget the kernel cannot honour: mprotect itself runs out of mappings.
  ProtectionMap map(region.data(), n, block, "over-budget region", Protection::read_write, 2 * n);
  for (std::size_t b = 0; b < n; b += 2) map.set(b, 1, Protection::read);
  EXPECT_GE(map.stats().enomem_failures, 1u);
  EXPECT_GE(map.stats().degradations, 1u);
  EXPECT_EQ(count_runs(map), map.runs());
  EXPECT_TRUE(matches_kernel(map));
}

// A region of one block cannot degrade: when the kernel has no mapping left for its change, the error
// names the limit and what to do (tens of thousands of one-block shared objects get here).
TEST(ProtectionMap, OneBlockOutOfMappingsNamesTheLimit) {
  Mapping region(page(), "one-block region");
  ProtectionMap map(region.data(), 1, page(), "one-block region");
  map.refuse_mprotects(100);
  try {
    map.set(0, 1, Protection::none);
    FAIL() << "set() succeeded without a mapping";
  } catch (const hdsm::SystemError& e) {
    EXPECT_EQ(e.error_number(), ENOMEM);
    const std::string what = e.what();
    EXPECT_NE(what.find("one-block region"), std::string::npos) << what;
    EXPECT_NE(what.find("out of kernel mappings"), std::string::npos) << what;
    EXPECT_NE(what.find("vm.max_map_count"), std::string::npos) << what;
  }
  const hdsm::os::MappingCount c =
      hdsm::os::count_mappings("/nonexistent/max_map_count", "/nonexistent/maps");
  EXPECT_EQ(c.limit, 65530u);
  EXPECT_FALSE(c.used_known);
}

TEST(ProtectionMap, RandomOperationsMatchAReferenceModel) {
  const std::size_t n = 300;
  Mapping region(n * page(), "random region");
  std::mt19937 rng(20'260'121);
  for (const std::size_t budget : {1, 8, 40, 150, 1000}) {
    ProtectionMap map(region.data(), n, page(), "random region", Protection::read, budget);
    std::vector<Protection> model(n, Protection::read);
    for (int step = 0; step < 800; ++step) {
      if (rng() % 6 == 1 && rng() % 2 == 0) {
        // A fault handler that makes room: from a budget of 5 (the cluster's least) the block always
        // gets its protection (what cannot be lowered, the block's own run around it and the two
        // runs beside, takes at most 5), others may lose theirs.
        const std::size_t b = rng() % n;
        const auto p = static_cast<Protection>(rng() % 3);
        const bool opened = map.try_set_making_room(b, p);
        if (budget >= 5) {
          ASSERT_TRUE(opened) << "budget " << budget << " step " << step;
        }
        if (opened) {
          model[b] = p;
          ASSERT_EQ(map.effective(b), p);
        }
      } else if (rng() % 6 == 1) {
        // A fault handler's one block: applied exactly, or nothing changes.
        const std::size_t b = rng() % n;
        const auto p = static_cast<Protection>(rng() % 3);
        const Protection before = map.effective(b);
        if (map.try_set(b, 1, p)) {
          model[b] = p;
          ASSERT_EQ(map.effective(b), p);
        } else {
          ASSERT_EQ(map.effective(b), before);
        }
      } else if (rng() % 10 == 0) {
        // The end of a batch: back to single blocks whenever the desired runs fit.
        std::size_t model_runs = 1;
        for (std::size_t b = 1; b < n; ++b) model_runs += model[b] != model[b - 1];
        const bool fine = map.regain_granularity();
        ASSERT_EQ(fine, map.granularity_blocks() == 1);
        if (model_runs <= budget - budget / 4) {
          ASSERT_TRUE(fine) << "budget " << budget << " step " << step << ": " << model_runs << " runs";
          for (std::size_t b = 0; b < n; ++b) ASSERT_EQ(map.effective(b), model[b]) << b;
        }
      } else if (rng() % 6 == 0) {
        const std::size_t b = rng() % n;
        const bool refined = map.refine(b);
        if (refined) {
          ASSERT_EQ(map.effective(b), model[b]);
        }
        if (budget >= n) {
          ASSERT_TRUE(refined);
        }
      } else {
        const std::size_t first = rng() % n;
        const std::size_t count = 1 + rng() % std::min<std::size_t>(n - first, rng() % 4 == 0 ? n : 8);
        const auto p = static_cast<Protection>(rng() % 3);
        map.set(first, count, p);
        std::fill_n(model.begin() + static_cast<std::ptrdiff_t>(first), count, p);
      }
      ASSERT_EQ(count_runs(map), map.runs()) << "budget " << budget << " step " << step;
      ASSERT_LE(map.runs(), budget);
      for (std::size_t b = 0; b < n; ++b) {
        ASSERT_EQ(map.desired(b), model[b]) << b;
        ASSERT_LE(map.effective(b), model[b]) << b;
        if (budget >= n) {
          ASSERT_EQ(map.effective(b), model[b]) << b;
        }
        ASSERT_EQ(map.allows(b, true), model[b] == Protection::read_write);
      }
      if (step % 50 == 0) {
        ASSERT_TRUE(matches_kernel(map)) << "budget " << budget << " step " << step;
      }
    }
    EXPECT_TRUE(matches_kernel(map));
    if (budget < 40) {
      EXPECT_GT(map.stats().degradations, 0u) << budget;
    }
    if (budget >= n) {
      EXPECT_EQ(map.stats().degradations, 0u);
    }
  }
}

TEST(ProtectionMap, DefaultBudgetLeavesRoomForOtherMappings) {
  // Unreadable files: the kernel's default limit with half of it assumed in use.
  EXPECT_EQ(hdsm::os::default_run_budget("/nonexistent/max_map_count", "/nonexistent/maps"), 13'823u);
  const std::string small = testing::TempDir() + "hdsm_max_map_count";
  std::ofstream(small) << "1000\n";
  EXPECT_EQ(hdsm::os::default_run_budget(small.c_str()), 1u);
  std::remove(small.c_str());

  std::size_t limit = 0;
  std::ifstream("/proc/sys/vm/max_map_count") >> limit;
  const std::size_t budget = hdsm::os::default_run_budget();
  EXPECT_GT(budget, 0u);
  if (limit > 0) {
    EXPECT_LT(budget, limit / 2);
  }
}

TEST(ProtectionMap, RejectsBadArgumentsAndReportsOtherFailures) {
  Mapping region(4 * page(), "argument region");
  EXPECT_THROW(ProtectionMap(region.data() + 1, 2, page(), "x"), hdsm::InvalidArgument);
  EXPECT_THROW(ProtectionMap(region.data(), 2, page() + 1, "x"), hdsm::InvalidArgument);
  EXPECT_THROW(ProtectionMap(region.data(), 0, page(), "x"), hdsm::InvalidArgument);
  EXPECT_THROW(ProtectionMap(region.data(), 2, page(), "x", Protection::read_write, 0),
               hdsm::InvalidArgument);
  ProtectionMap map(region.data(), 4, page(), "argument region", Protection::read_write, 10);
  EXPECT_THROW(map.set(3, 2, Protection::none), hdsm::InvalidArgument);
  EXPECT_THROW(map.refine(4), hdsm::InvalidArgument);
  EXPECT_THROW((void)map.desired(4), hdsm::InvalidArgument);
  map.set(4, 0, Protection::none);
  EXPECT_EQ(map.runs(), 1u);

  // A shared mapping of a file opened read-only can never become writable: EACCES, not ENOMEM.
  std::string path = testing::TempDir() + "hdsm_protection_XXXXXX";
  const int writer = ::mkstemp(path.data());
  ASSERT_GE(writer, 0);
  ASSERT_EQ(::ftruncate(writer, static_cast<off_t>(2 * page())), 0);
  ::close(writer);
  const int fd = ::open(path.c_str(), O_RDONLY);
  ::unlink(path.c_str());
  ASSERT_GE(fd, 0);
  void* file = ::mmap(nullptr, 2 * page(), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(file, MAP_FAILED);
  {
    ProtectionMap file_map(file, 2, page(), "read-only file", Protection::read, 10);
    try {
      file_map.set(1, 1, Protection::read_write);
      ADD_FAILURE() << "no SystemError";
    } catch (const hdsm::SystemError& e) {
      EXPECT_EQ(e.error_number(), EACCES);
      EXPECT_NE(std::string(e.what()).find("mprotect failed on blocks [1, 2) of read-only file"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(file_map.desired(1), Protection::read_write);
    EXPECT_EQ(file_map.effective(1), Protection::read);
  }
  ::munmap(file, 2 * page());
}

}  // namespace
