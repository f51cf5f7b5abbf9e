// The page machinery: merging a writer's page against its twin, XOR diffs.
#include "coherence/page_diff.hpp"

#include <hdsm/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace {

using Bytes = std::vector<std::byte>;

Bytes random_page(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng());
  return b;
}

// Two writers change disjoint bytes of one page; merging both against the twin they started from
// gives a page with both writers' bytes and nothing else changed.
TEST(PageDiff, TwoWritersMergeToBothWritersBytes) {
  for (const std::size_t n :
       {std::size_t{1}, std::size_t{7}, std::size_t{128}, std::size_t{4096}, std::size_t{4099}}) {
    const Bytes twin = random_page(n, 1);
    Bytes home = twin, a = twin, b = twin, expected = twin;
    std::mt19937 rng(static_cast<unsigned>(n));
    for (std::size_t i = 0; i < n; ++i) {
      const auto v = static_cast<std::byte>(rng() | 1u);
      if (rng() % 3 == 0) {
        a[i] = twin[i] ^ v;
        expected[i] = a[i];
      } else if (rng() % 2 == 0) {
        b[i] = twin[i] ^ v;
        expected[i] = b[i];
      }
    }
    hdsm::coherence::merge_against_twin(home, a, twin);
    hdsm::coherence::merge_against_twin(home, b, twin);
    EXPECT_EQ(home, expected) << n << " bytes";
  }
}

TEST(PageDiff, MergeCountsChangedBytesAndLeavesOthers) {
  Bytes twin(64, std::byte{5});
  Bytes local = twin;
  local[0] = std::byte{6};
  local[9] = std::byte{0};
  local[63] = std::byte{7};
  Bytes home(64, std::byte{9});  // another writer changed everything meanwhile
  EXPECT_EQ(hdsm::coherence::merge_against_twin(home, local, twin), 3u);
  for (std::size_t i = 0; i < 64; ++i)
    EXPECT_EQ(home[i], (i == 0 || i == 9 || i == 63) ? local[i] : std::byte{9}) << i;
}

TEST(PageDiff, XorDiffAppliesTheChanges) {
  const Bytes twin = random_page(1000, 3);
  Bytes local = twin;
  local[10] ^= std::byte{0x40};
  local[999] = std::byte{0};
  Bytes diff(1000);
  hdsm::coherence::xor_diff(diff, local, twin);
  EXPECT_TRUE(hdsm::coherence::any_change(diff));
  Bytes home = twin;
  hdsm::coherence::apply_xor_diff(home, diff);
  EXPECT_EQ(home, local);
  hdsm::coherence::xor_diff(diff, twin, twin);
  EXPECT_FALSE(hdsm::coherence::any_change(diff));
}

// One changed byte anywhere in pages of whole and partial 64-byte blocks, words and bytes: each
// function finds it, whichever block, word or tail it falls in, and touches nothing else.
TEST(PageDiff, ASingleChangeIsFoundAtEveryOffset) {
  for (const std::size_t n : {std::size_t{64}, std::size_t{200}, std::size_t{203}}) {
    const Bytes twin = random_page(n, 9);
    for (std::size_t at = 0; at < n; ++at) {
      Bytes local = twin;
      local[at] ^= std::byte{0x10};
      Bytes home = twin;
      Bytes other(n, std::byte{3});  // another writer's page: only `at` may change in it
      EXPECT_EQ(hdsm::coherence::copy_changes(home, local), 1u) << n << " " << at;
      EXPECT_EQ(home, local) << n << " " << at;
      EXPECT_EQ(hdsm::coherence::merge_against_twin(other, local, twin), 1u) << n << " " << at;
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(other[i], i == at ? local[at] : std::byte{3}) << at;
      std::vector<hdsm::coherence::DiffRun> runs;
      EXPECT_EQ(hdsm::coherence::diff_runs(local, twin, runs, 1), 1u);
      ASSERT_EQ(runs.size(), 1u);
      EXPECT_EQ(runs[0].offset, at);
      EXPECT_EQ(runs[0].length, 1u);
    }
  }
}

TEST(PageDiff, SizesMustAgree) {
  Bytes a(8), b(9);
  EXPECT_THROW(hdsm::coherence::merge_against_twin(a, b, a), hdsm::InvalidArgument);
  EXPECT_THROW(hdsm::coherence::xor_diff(a, a, b), hdsm::InvalidArgument);
}

}  // namespace

namespace {

TEST(PageDiff, CopyChangesIsAMergeAgainstTheHomeItself) {
  const Bytes home0 = random_page(300, 5);
  Bytes local = home0;
  local[3] ^= std::byte{1};
  local[299] ^= std::byte{2};
  Bytes home = home0, merged = home0;
  EXPECT_EQ(hdsm::coherence::copy_changes(home, local), 2u);
  EXPECT_EQ(hdsm::coherence::merge_against_twin(merged, local, home0), 2u);
  EXPECT_EQ(home, local);
  EXPECT_EQ(merged, local);
}

}  // namespace

namespace {

// Runs of changed bytes: exactly the changed bytes, joined across short equal gaps, in order; the
// runs rebuild the page from its twin.
TEST(PageDiffRuns, RunsCoverExactlyTheChangesAndRebuildThePage) {
  for (unsigned seed = 0; seed < 50; ++seed) {
    const Bytes twin = random_page(4096, seed);
    Bytes local = twin;
    std::mt19937 rng(seed + 1000);
    std::size_t changed = 0;
    for (int k = 0; k < static_cast<int>(rng() % 20); ++k) {
      const std::size_t at = rng() % 4096, len = 1 + rng() % 300;
      for (std::size_t i = at; i < std::min<std::size_t>(4096, at + len); ++i) local[i] = ~twin[i];
    }
    for (std::size_t i = 0; i < 4096; ++i) changed += local[i] != twin[i] ? 1 : 0;
    std::vector<hdsm::coherence::DiffRun> runs;
    const std::size_t covered = hdsm::coherence::diff_runs(local, twin, runs, 1);  // no joining
    EXPECT_EQ(covered, changed) << "seed " << seed;
    Bytes rebuilt = twin;
    std::size_t end = 0;
    for (const auto& r : runs) {
      EXPECT_GT(r.length, 0u);
      EXPECT_GE(r.offset, end) << "runs are ordered and disjoint";
      end = r.offset + r.length;
      for (std::size_t i = r.offset; i < end; ++i) rebuilt[i] = local[i];
    }
    EXPECT_EQ(rebuilt, local) << "seed " << seed;
  }
}

// The word-at-a-time scan against the definition, byte by byte: maximal runs of changed bytes,
// joined where fewer than `gap` equal bytes lie between. Pages where a random fraction of the bytes
// changed (as in an updated array of floats), at every join gap a word can hold and beyond, at
// sizes that end inside a word, appended after another page's runs (which they must not join).
TEST(PageDiffRuns, WordScanMatchesTheByteDefinition) {
  using hdsm::coherence::DiffRun;
  const auto reference = [](const Bytes& local, const Bytes& twin, std::size_t gap) {
    std::vector<DiffRun> runs;
    for (std::size_t i = 0; i < local.size(); ++i) {
      if (local[i] == twin[i]) continue;
      if (!runs.empty() && i - (runs.back().offset + runs.back().length) < std::max<std::size_t>(gap, 1))
        runs.back().length = static_cast<std::uint32_t>(i + 1 - runs.back().offset);
      else
        runs.push_back({static_cast<std::uint32_t>(i), 1});
    }
    return runs;
  };
  std::mt19937 rng(77);
  for (const std::size_t n :
       {std::size_t{4096}, std::size_t{203}, std::size_t{64}, std::size_t{7}, std::size_t{1}})
    for (const unsigned percent : {1u, 10u, 50u, 75u, 95u, 100u})
      for (const std::size_t gap : {0u, 1u, 2u, 5u, 6u, 7u, 8u, 9u, 16u, 100u}) {
        const Bytes twin = random_page(n, static_cast<unsigned>(n + percent));
        Bytes local = twin;
        for (std::size_t i = 0; i < n; ++i)  // whole bytes, or one bit of them
          if (rng() % 100 < percent) local[i] = rng() % 2 == 0 ? ~twin[i] : twin[i] ^ std::byte{0x40};
        std::vector<DiffRun> runs{{0, 3}};  // another page's run, ending where this page begins
        const std::size_t covered = hdsm::coherence::diff_runs(local, twin, runs, gap);
        const std::vector<DiffRun> want = reference(local, twin, gap);
        std::size_t want_differing = 0;
        for (std::size_t i = 0; i < n; ++i) want_differing += local[i] != twin[i] ? 1 : 0;
        EXPECT_EQ(hdsm::coherence::differing_bytes(local, twin), want_differing)
            << n << " " << percent << "%";
        ASSERT_EQ(runs.size(), want.size() + 1) << n << " " << percent << "% gap " << gap;
        std::size_t want_covered = 0;
        for (std::size_t k = 0; k < want.size(); ++k) {
          EXPECT_EQ(runs[k + 1].offset, want[k].offset)
              << n << " " << percent << "% gap " << gap << " run " << k;
          EXPECT_EQ(runs[k + 1].length, want[k].length)
              << n << " " << percent << "% gap " << gap << " run " << k;
          want_covered += want[k].length;
        }
        EXPECT_EQ(covered, want_covered) << n << " " << percent << "% gap " << gap;
        EXPECT_EQ(runs[0].length, 3u) << "a new page's runs never join an earlier page's";
      }
}

TEST(PageDiffRuns, ShortGapsJoinAndWholePagesAreOneRun) {
  const Bytes twin(256, std::byte{0});
  Bytes local = twin;
  local[10] = local[14] = local[40] = std::byte{1};  // gaps of 3 and 25 equal bytes
  std::vector<hdsm::coherence::DiffRun> runs;
  EXPECT_EQ(hdsm::coherence::diff_runs(local, twin, runs, 8), 6u);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].offset, 10u);
  EXPECT_EQ(runs[0].length, 5u);
  EXPECT_EQ(runs[1].offset, 40u);
  Bytes all(256, std::byte{7});
  runs.clear();
  EXPECT_EQ(hdsm::coherence::diff_runs(all, twin, runs), 256u);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].length, 256u);
  runs.clear();
  EXPECT_EQ(hdsm::coherence::diff_runs(twin, twin, runs), 0u);
  EXPECT_TRUE(runs.empty());
}

}  // namespace
