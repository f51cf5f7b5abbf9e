// The cluster DSM's protocol with the ranks as threads of one process (no MPI): write faults and
// twins, writeVector, single- and several-writer merges, diffs as runs, lazy invalidation and the
// page server, host copies, bad input, and the randomized model test. tests/mpi/cluster_mpi_test.cpp
// runs the same runtime on MPI ranks.
#include "cluster/model_program.hpp"
#include "cluster/node.hpp"
#include "cluster/records.hpp"
#include "cluster/threads_transport.hpp"
#include "os/fault.hpp"
#include "os/spin_wait.hpp"
#include "support/death_style.hpp"
#include "support/model_run.hpp"

#include <hdsm/cluster.hpp>
#include <hdsm/error.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

namespace cl = hdsm::cluster;
using cl::detail::Node;
using cl::detail::PageState;
using hdsm::Dim3;
using hdsm::Launch;
using hdsm::Thread;

constexpr std::size_t kPage = 4096;

cl::Options options(std::uint64_t lazy_pages = 1u << 30, unsigned threads = 2, bool private_pages = true) {
  cl::Options o;
  o.space_bytes = std::size_t{64} << 20;
  o.page_size = kPage;
  o.threads = threads;
  o.lazy_pages = lazy_pages;
  o.check_races = true;
  o.private_pages = private_pages;
  return o;
}

/// A rank's transport in place of its hub endpoint (a test's wrapper of it), or null for the endpoint.
using WrapTransport =
    std::function<std::unique_ptr<cl::detail::Transport>(int rank, cl::detail::Transport& endpoint)>;

/// Runs f(node) on `ranks` threads, each the rank of one node of an in-process hub with the options
/// `options_of(rank)`; returns each rank's failure (null where it had none).
template <class O, class F>
std::vector<std::exception_ptr> rank_errors(int ranks, O options_of, F f, const WrapTransport& wrap = {}) {
  cl::detail::ThreadsHub hub(ranks);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        const std::unique_ptr<cl::detail::Transport> wrapped = wrap ? wrap(r, hub.endpoint(r)) : nullptr;
        Node node(wrapped ? *wrapped : hub.endpoint(r), options_of(r));
        cl::detail::bind_thread(&node);
        f(node);
        cl::detail::bind_thread(nullptr);
      } catch (...) {
        cl::detail::bind_thread(nullptr);
        errors[static_cast<std::size_t>(r)] = std::current_exception();
        hub.leave(r, "its thread failed");  // the others' collectives fail rather than wait for it
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

/// rank_errors(), rethrowing the first failure.
template <class O, class F>
void run_ranks_with(int ranks, O options_of, F f) {
  for (auto& e : rank_errors(ranks, options_of, f))
    if (e) std::rethrow_exception(e);
}

/// run_ranks_with, every rank with the options `o`.
template <class F>
void run_ranks(int ranks, const cl::Options& o, F f) {
  run_ranks_with(
      ranks, [&](int) { return o; }, f);
}

// Block b writes value v to elements [b * per_block, (b + 1) * per_block).
const auto& fill_kernel() {
  static const auto k =
      hdsm::per_thread("fill_blocks", [](const Thread& t, int* a, std::uint32_t per_block, int v) {
        for (std::uint32_t i = t.idx.x; i < per_block; i += t.block_dim.x)
          a[std::size_t{t.block.x} * per_block + i] = v + static_cast<int>(t.block.x);
      });
  return k;
}

// Element i of a is written by the block i % blocks: every page has a writer from every rank.
const auto& interleave_kernel() {
  static const auto k = hdsm::per_thread("interleave", [](const Thread& t, int* a, std::uint32_t n, int v) {
    if (t.idx.x != 0) return;
    for (std::uint32_t i = t.block.x; i < n; i += t.grid_dim.x) a[i] = v + static_cast<int>(i);
  });
  return k;
}

std::vector<int> read_all(const int* global, std::size_t n) {
  std::vector<int> host(n, -7);
  cl::memcpy(host.data(), global, n * sizeof(int));
  return host;
}

TEST(ClusterSplit, EqualAndWeightedIntervalsCoverTheGrid) {
  EXPECT_EQ(cl::detail::equal_split(10, 3), (std::vector<std::uint64_t>{0, 3, 6, 10}));
  EXPECT_EQ(cl::detail::equal_split(2, 3), (std::vector<std::uint64_t>{0, 0, 1, 2}));
  const double speeds[] = {1.0, 3.0};
  EXPECT_EQ(cl::detail::weighted_split(100, speeds), (std::vector<std::uint64_t>{0, 25, 100}));
  const std::uint64_t huge = std::uint64_t{1} << 62;
  EXPECT_EQ(cl::detail::equal_split(huge, 4).back(), huge);
}

// The in-process hub fails every rank's collective, as MPI's error handler ends a job, where MPI
// would hang or mix up data: ranks in different collectives, or with different sizes, a rank that
// left, and ranks that never come.
TEST(ClusterHub, DivergedRanksLeftRanksAndMissingRanksFailTheCollective) {
  namespace d = cl::detail;
  const auto both = [](d::ThreadsHub& hub, const std::function<void(d::Transport&)>& zero,
                       const std::function<void(d::Transport&)>& one) {
    std::vector<std::string> what(2);
    std::thread other([&] {
      try {
        one(hub.endpoint(1));
      } catch (const hdsm::Error& e) {
        what[1] = e.what();
      }
    });
    try {
      zero(hub.endpoint(0));
    } catch (const hdsm::Error& e) {
      what[0] = e.what();
    }
    other.join();
    return what;
  };
  std::vector<std::uint32_t> four(4, 1), five(5, 1);
  {
    d::ThreadsHub hub(2);
    const auto what = both(
        hub, [&](d::Transport& t) { t.allreduce(four, d::ReduceOp::sum); },
        [](d::Transport& t) { t.barrier(); });
    for (const std::string& w : what)
      EXPECT_NE(w.find("diverged: rank 0 called allreduce(4, 32), rank 1 called barrier(0, 0)"),
                std::string::npos)
          << w;
    // The hub stays failed: no later collective mixes what is left of the two.
    EXPECT_NE(both(
                  hub, [](d::Transport& t) { t.barrier(); }, [](d::Transport& t) { t.barrier(); })[0]
                  .find("diverged"),
              std::string::npos);
  }
  {
    d::ThreadsHub hub(2);
    const auto what = both(
        hub, [&](d::Transport& t) { t.allreduce(four, d::ReduceOp::sum); },
        [&](d::Transport& t) { t.allreduce(five, d::ReduceOp::sum); });
    EXPECT_NE(what[1].find("allreduce(4, 32), rank 1 called allreduce(5, 32)"), std::string::npos) << what[1];
    EXPECT_EQ(four, std::vector<std::uint32_t>(4, 1));  // nothing was summed
  }
  {
    d::ThreadsHub hub(2);
    std::vector<std::byte> small(8), large(16);
    const auto what = both(
        hub, [&](d::Transport& t) { t.broadcast(0, small); },
        [&](d::Transport& t) { t.broadcast(0, large); });
    EXPECT_NE(what[0].find("broadcast(0, 8), rank 1 called broadcast(0, 16)"), std::string::npos) << what[0];
  }
  {
    d::ThreadsHub hub(2);
    const auto what = both(
        hub, [](d::Transport& t) { t.barrier(); },
        [&](d::Transport&) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          hub.leave(1, "its thread failed");
        });
    EXPECT_NE(what[0].find("rank 1 left: its thread failed"), std::string::npos) << what[0];
  }
  {
    d::ThreadsHub hub(2, std::chrono::milliseconds(50));
    const auto start = std::chrono::steady_clock::now();
    const auto what = both(
        hub, [](d::Transport& t) { t.allgather(7); }, [](d::Transport&) {});
    EXPECT_NE(what[0].find("rank 0 waited 50 ms in allgather(0, 0) for rank(s) 1, which never came"),
              std::string::npos)
        << what[0];
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  }
  {  // and a hub whose ranks agree works as before
    d::ThreadsHub hub(2);
    std::vector<std::uint32_t> a(4, 1), b(4, 2);
    const auto what = both(
        hub, [&](d::Transport& t) { t.allreduce(a, d::ReduceOp::sum); },
        [&](d::Transport& t) { t.allreduce(b, d::ReduceOp::sum); });
    EXPECT_EQ(what, (std::vector<std::string>{"", ""}));
    EXPECT_EQ(a, std::vector<std::uint32_t>(4, 3));
    EXPECT_EQ(b, std::vector<std::uint32_t>(4, 3));
  }
}

// Page records: whatever the pattern of changes, a record applied to the page as it was gives the
// page as it is, in the cheaper encoding (runs, or a lane plan), at the bytes each encoding should
// cost, and says how many bytes differ; copied into another buffer (rank 0's merged pages), it still
// applies. A page of several writers (exact) never carries an equal byte.
TEST(ClusterRecords, EveryPatternOfChangesRoundTripsInTheCheaperEncoding) {
  namespace d = cl::detail;
  std::mt19937 rng(2026);
  constexpr std::size_t kBytes = 4096, kHeader = sizeof(d::RecordHeader), kPlan = 6, kBitmap = kBytes / 64;
  // Both ways of moving a word's bytes: a byte shuffle (where the CPU has one) and a byte at a time.
  const bool shuffles = d::lane_shuffles(true);
  for (int pattern = 0; pattern < 16; ++pattern)
    for (const bool exact : {false, true}) {
      d::lane_shuffles(pattern < 8);
      SCOPED_TRACE(::testing::Message() << "pattern " << pattern % 8 << (exact ? ", exact" : "")
                                        << (pattern < 8 ? "" : ", a byte at a time"));
      std::vector<std::byte> before(kBytes), now;
      for (auto& b : before) b = static_cast<std::byte>(rng());
      now = before;
      std::size_t differ = 0;
      for (std::size_t i = 0; i < kBytes; ++i) {
        const bool change = pattern % 8 == 0   ? true                   // every byte
                            : pattern % 8 == 1 ? i % 8 == 0             // a counter's low byte
                            : pattern % 8 == 2 ? i % 4 != 3             // floats, their top byte equal
                            : pattern % 8 == 3 ? i >= 1000 && i < 1010  // one short stretch
                            : pattern % 8 == 4 ? rng() % 3 == 0         // scattered
                            : pattern % 8 == 5 ? i % 4 != 3 || (i / 4) % 5 == 0  // ... top bytes of some
                            : pattern % 8 == 6 ? i % 4 != 3 && i % 200 != 1      // ... and a few equal
                                               : false;                          // nothing
        if (change) {
          now[i] = before[i] ^ std::byte{0x5a};
          ++differ;
        }
      }
      d::RecordWriter w;
      EXPECT_EQ(w.add(7, 1, now, before, exact), differ);
      std::vector<std::byte> page = before;
      int records = 0;
      bool lanes = false;
      d::for_each_record(w.bytes(), d::RecordPages::any(kBytes), [&](const d::RecordView& r) {
        ++records;
        lanes = r.lanes;
        EXPECT_EQ(r.page, 7u);
        EXPECT_EQ(r.writer, 1u);
        EXPECT_EQ(r.data_bytes, w.payload());
        d::apply_record(r, page.data());
      });
      EXPECT_EQ(records, differ == 0 ? 0 : 1);
      EXPECT_EQ(page, now);
      if (exact) {
        EXPECT_EQ(w.payload(), differ) << "equal bytes carried on a page of several writers";
      }
      // The encoding, and what it costs: a lane sent in every word where it changed in every one
      // (or, inexactly, where its equal bytes cost less than its bitmap), a bitmap otherwise.
      switch (pattern % 8) {
        case 0:  // every lane in every word: one copy at both ends, two bytes fewer than a run
          EXPECT_TRUE(lanes);
          EXPECT_EQ(w.bytes().size(), kHeader + kPlan + differ);
          break;
        case 3:
          EXPECT_FALSE(lanes) << "runs cost less here";
          EXPECT_EQ(w.payload(), differ);
          break;
        case 1:  // lane 0 in every word
          EXPECT_TRUE(lanes);
          EXPECT_EQ(w.bytes().size(), kHeader + kPlan + differ);
          break;
        case 2:  // six lanes in every word, two never
          EXPECT_TRUE(lanes);
          EXPECT_EQ(w.bytes().size(), kHeader + kPlan + differ);
          break;
        case 4:  // every lane as a bitmap
          EXPECT_TRUE(lanes);
          EXPECT_EQ(w.bytes().size(), kHeader + kPlan + 8 * kBitmap + differ);
          break;
        case 5:  // the two top-byte lanes as bitmaps
          EXPECT_TRUE(lanes);
          EXPECT_EQ(w.bytes().size(), kHeader + kPlan + 2 * kBitmap + differ);
          break;
        case 6:  // inexactly, lane 1 in every word with its 20 equal bytes; exactly, as a bitmap
          EXPECT_TRUE(lanes);
          EXPECT_EQ(w.bytes().size(), kHeader + kPlan + (exact ? kBitmap + differ : 3072));
          break;
        default:
          EXPECT_TRUE(w.bytes().empty());
      }
      // Rank 0 passes records on to the other ranks.
      d::PerRankRecords per_rank(3);
      d::for_each_record(w.bytes(), d::RecordPages::any(kBytes),
                         [&](const d::RecordView& r) { per_rank.add_record(r); });
      std::vector<std::byte> copy = before;
      d::for_each_record(per_rank.views()[2], d::RecordPages::any(kBytes),
                         [&](const d::RecordView& r) { d::apply_record(r, copy.data()); });
      EXPECT_EQ(copy, now);
    }
  d::lane_shuffles(shuffles);
}

// A lane record's bitmaps are the words' masks transposed, eight words at a time.
TEST(ClusterRecords, TransposingBitsSwapsRowsAndColumns) {
  std::mt19937_64 rng(7);
  for (int n = 0; n < 1000; ++n) {
    const std::uint64_t x = rng();
    std::uint64_t want = 0;
    for (unsigned i = 0; i < 8; ++i)
      for (unsigned k = 0; k < 8; ++k)
        if (((x >> (8 * i + k)) & 1u) != 0) want |= std::uint64_t{1} << (8 * k + i);
    ASSERT_EQ(cl::detail::transpose_bits(x), want) << std::hex << x;
  }
}

// A record that would write outside its page, or whose sizes disagree, is refused by name.
TEST(ClusterRecords, MalformedRecordsAreRefused) {
  namespace d = cl::detail;
  std::vector<std::byte> before(kPage, std::byte{0}), now = before;
  for (std::size_t i = 0; i < kPage; i += 8) now[i] = std::byte{1};  // a lane record
  d::RecordWriter lanes, runs;
  lanes.add(0, 1, now, before);
  now = before;
  for (std::size_t i = 4001; i < 4090; ++i) now[i] = std::byte{1};  // one run (a lone byte would be lanes)
  runs.add(0, 1, now, before);
  const auto refused = [](std::vector<std::byte> buffer, std::size_t page_bytes, const std::string& what,
                          std::uint64_t pages = 1, std::uint64_t first = 0) {
    try {
      d::for_each_record(buffer, d::RecordPages{page_bytes, first, pages}, [](const d::RecordView&) {});
    } catch (const hdsm::Error& e) {
      return std::string(e.what()).find(what) != std::string::npos ? testing::AssertionSuccess()
                                                                   : testing::AssertionFailure() << e.what();
    }
    return testing::AssertionFailure() << "accepted";
  };
  const auto bytes = [](const d::RecordWriter& w) {
    return std::vector<std::byte>(w.bytes().begin(), w.bytes().end());
  };
  EXPECT_TRUE(refused(bytes(runs), 2048, "a run outside the page"));
  EXPECT_TRUE(refused(bytes(runs), kPage, "page 0 outside the records' pages [0, 0)", 0));
  EXPECT_TRUE(
      refused(bytes(runs), kPage, "page 0 outside the records' pages [1, 2)", 2, 1));  // below the first
  EXPECT_TRUE(refused(bytes(lanes), 2048, "words outside the page"));
  auto b = bytes(runs);
  b.pop_back();
  EXPECT_TRUE(refused(b, kPage, "truncated data"));
  b = bytes(lanes);
  b[sizeof(d::RecordHeader) + 4] = std::byte{0xff};  // lane 0 in mode 3
  EXPECT_TRUE(refused(b, kPage, "an unknown lane mode"));
  b = bytes(lanes);
  b.resize(sizeof(d::RecordHeader) + 3);
  EXPECT_TRUE(refused(b, kPage, "truncated lane plan"));
  // A bitmap lane over 509 words: bits past the last word must be clear.
  now = before;
  for (std::size_t i = 0; i < 509 * 8; i += 24) now[i] = std::byte{1};
  d::RecordWriter bitmap;
  bitmap.add(0, 1, now, before);
  b = bytes(bitmap);
  ASSERT_EQ(b.size(), sizeof(d::RecordHeader) + 6 + 64 + 170);
  b[sizeof(d::RecordHeader) + 6 + 63] |= std::byte{0x80};
  EXPECT_TRUE(refused(b, kPage, "a bitmap bit past the last word"));
}

// The race check sees the changed bytes of lane records as runs.
TEST(ClusterRecords, OverlappingChangesAreFoundInLaneRecords) {
  namespace d = cl::detail;
  std::vector<std::byte> before(4096, std::byte{0}), one = before, two = before;
  for (std::size_t i = 0; i < 4096; i += 8) one[i] = std::byte{1};  // counters: lanes
  for (std::size_t i = 16; i < 4096; i += 64) two[i] = std::byte{2};
  for (const bool overlap : {true, false}) {
    if (!overlap) {
      for (std::size_t i = 16; i < 4096; i += 64) two[i + 1] = std::exchange(two[i], std::byte{0});
    }
    d::RecordWriter a, b;
    a.add(3, 1, one, before, true);
    b.add(3, 2, two, before, true);
    d::RaceCheck races(true, d::RecordPages::any(4096));
    races.add(a.bytes());
    races.add(b.bytes());
    testing::internal::CaptureStderr();
    std::vector<std::byte> space(4 * 4096);
    EXPECT_EQ(races.report("counters", space.data()), overlap ? 1u : 0u);
    const std::string err = testing::internal::GetCapturedStderr();
    if (overlap) {
      EXPECT_NE(err.find("ranks 1 and 2 wrote bytes [16, 17) of page"), std::string::npos) << err;
    }
  }
}

// Knobs a program sets in code reach the cluster runtime through a Config (over the environment's).
TEST(Cluster, OptionsFromAConfigTakeTheProgramsSettings) {
  ::setenv("HDSM_CLUSTER_THREADS", "2", 1);
  const cl::Options o = cl::Options::from_config(hdsm::Config::from_environment()
                                                     .set("HDSM_CLUSTER_THREADS", "3")
                                                     .set("HDSM_CLUSTER_LAZY_PAGES", "7")
                                                     .set("HDSM_FIBER_STACK", "256KiB"));
  ::unsetenv("HDSM_CLUSTER_THREADS");
  EXPECT_EQ(o.threads, 3u);
  EXPECT_EQ(o.lazy_pages, 7u);
  EXPECT_EQ(o.fiber_stack, std::size_t{256} << 10);  // cooperative kernels' stacks, as the executor's
  EXPECT_EQ(cl::Options::from_config(hdsm::Config::defaults()).threads,
            cl::Options::from_environment().threads);
}

// A session waits by its options' HDSM_WAIT_POLICY (before, nothing in the cluster set it: the
// environment's was not applied either).
TEST(Cluster, ASessionWaitsByItsWaitPolicy) {
  cl::Options o = options();
  o.wait = hdsm::WaitPolicy::from_config(hdsm::Config::defaults().set("HDSM_WAIT_POLICY", "spin"));
  run_ranks(2, o,
            [&](Node&) { EXPECT_EQ(hdsm::os::spin_budget(), ~std::uint64_t{0}) << "spin: never sleeps"; });
  o.wait = hdsm::WaitPolicy{};
  run_ranks(1, o, [&](Node&) { EXPECT_EQ(hdsm::os::spin_budget(), 50'000u); });
}

TEST(Cluster, EachRankRunsItsIntervalAndAllSeeAllWrites) {
  for (const int ranks : {1, 2, 3}) {
    run_ranks(ranks, options(), [&](Node& node) {
      constexpr std::uint32_t blocks = 12, per_block = 2048;  // two pages a block: one writer a page
      int* a = cl::alloc<int>(std::size_t{blocks} * per_block);
      // Copied in, the pages are shared (every rank holds them), so their writes are broadcast.
      const std::vector<int> zeros(std::size_t{blocks} * per_block, 0);
      cl::memcpy(a, zeros.data(), zeros.size() * sizeof(int));
      cl::reset_stats();
      cl::launch(fill_kernel(), Launch{Dim3{blocks}, Dim3{64}, 0}, a, per_block, 100);
      const std::vector<int> got = read_all(a, std::size_t{blocks} * per_block);
      for (std::uint32_t i = 0; i < blocks * per_block; ++i)
        ASSERT_EQ(got[i], 100 + static_cast<int>(i / per_block))
            << "rank " << node.rank() << " element " << i;
      // Direct reads on every rank: all pages are current after an eager boundary.
      for (std::uint32_t i = 0; i < blocks * per_block; i += 1000)
        ASSERT_EQ(a[i], 100 + static_cast<int>(i / per_block));
      const cl::Stats s = cl::stats();
      const std::uint64_t my_blocks = blocks / static_cast<unsigned>(ranks);
      // Every written page opened once (by its fault, or ahead of a sequential writer's fault: how
      // many depends on how the rank's threads interleave), whatever the threads; none on one rank,
      // where every page is private.
      EXPECT_EQ(s.write_faults + s.opened_ahead - s.opened_unwritten, ranks == 1 ? 0 : my_blocks * 2);
      EXPECT_EQ(s.pages_modified, ranks == 1 ? 0 : blocks * 2);
      EXPECT_EQ(s.pages_multi_writer, 0u);
      // Single-writer pages cost their modified bytes once per other rank, plus headers. Each int
      // changes in its low byte only (zero to 100 + b): a lane plan with lane 0 in every word and
      // the others never sends those bytes alone, where runs would carry the three equal bytes of
      // each int.
      EXPECT_EQ(s.modified_bytes, ranks == 1 ? 0 : my_blocks * per_block);
      EXPECT_EQ(s.payload_bytes, s.modified_bytes * static_cast<unsigned>(ranks - 1));
      EXPECT_EQ(s.header_bytes,
                my_blocks * 2 * (sizeof(cl::detail::RecordHeader) + 6) * static_cast<unsigned>(ranks - 1))
          << "headers: a record and a lane plan a page";
      // The writeVector, apart: a word for each of the 24 pages in use, and two (none on one rank).
      EXPECT_EQ(s.vector_bytes, ranks == 1 ? 0 : (blocks * per_block * sizeof(int) / kPage + 2) * 4);
      EXPECT_EQ(node.state(a), PageState::valid);
      cl::free(a);
    });
  }
}

// Block 0 writes a[first] = 1 and the grid's last block a[last] = 2; no other block writes.
const auto& poke_kernel() {
  static const auto k =
      hdsm::per_thread("poke", [](const Thread& t, int* a, std::uint32_t first, std::uint32_t last) {
        if (t.idx.x != 0) return;
        if (t.block.x == 0) a[first] = 1;
        if (t.block.x + 1 == t.grid_dim.x) a[last] = 2;
      });
  return k;
}

// A kernel that writes the pages the last one wrote faults on a few of them and opens the rest
// ahead; pages opened ahead but not written have no writer (another rank's write to one stays a
// single-writer page) and are read-only and valid after the boundary, like every other page.
TEST(Cluster, RewrittenPagesAreOpenedAheadAndUnwrittenOnesCountForNothing) {
  for (const unsigned ahead : {0u, 16u})
    for (const int ranks : {2, 3}) {
      cl::Options o = options();
      o.open_ahead = ahead;
      run_ranks(ranks, o, [&](Node& node) {
        constexpr std::uint32_t blocks = 12, per_block = 2048, n = blocks * per_block;  // 24 pages
        const std::uint64_t my_pages = std::uint64_t{blocks} / static_cast<unsigned>(ranks) * 2;
        int* a = cl::alloc<int>(n);
        const std::vector<int> zeros(n, 0);
        cl::memcpy(a, zeros.data(), n * sizeof(int));
        cl::launch(fill_kernel(), Launch{Dim3{blocks}, Dim3{64}, 0}, a, per_block, 100);
        cl::reset_stats();
        cl::launch(fill_kernel(), Launch{Dim3{blocks}, Dim3{64}, 0}, a, per_block, 200);
        cl::Stats s = cl::stats();
        // Every page opened once; pages opened ahead past the rank's own (a sequential writer's
        // next ones, another rank's) are left unwritten.
        EXPECT_EQ(s.write_faults + s.opened_ahead - s.opened_unwritten, my_pages);
        if (ahead == 0)
          EXPECT_EQ(s.opened_ahead, 0u);
        else
          EXPECT_LE(s.write_faults, my_pages / 2) << "rank " << node.rank();
        EXPECT_EQ(s.pages_multi_writer, 0u);
        std::vector<int> got = read_all(a, n);
        for (std::uint32_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 200 + static_cast<int>(i / per_block));

        // Rank 0 wrote pages 0..my_pages-1; now it writes page 0 only (and opens the others ahead),
        // while the last rank writes a byte of page 5, one of those.
        cl::reset_stats();
        const std::uint32_t first = 0, last = 5 * 1024 + 7;
        cl::launch(poke_kernel(), Launch{Dim3{static_cast<unsigned>(ranks)}, Dim3{32}, 0}, a, first, last);
        s = cl::stats();
        EXPECT_EQ(s.pages_multi_writer, 0u) << "a page opened ahead but not written has no writer here";
        if (node.rank() == 0 && ahead > 0) {
          EXPECT_EQ(s.write_faults, 1u);
          EXPECT_GE(s.opened_unwritten, my_pages - 1);
          EXPECT_EQ(s.opened_ahead, s.opened_unwritten);
        }
        got = read_all(a, n);
        for (std::uint32_t i = 0; i < n; ++i)
          ASSERT_EQ(got[i], i == first  ? 1
                            : i == last ? 2
                                        : 200 + static_cast<int>(i / per_block))
              << "rank " << node.rank() << " element " << i;
        for (std::uint32_t p = 0; p < n / 1024; ++p)
          EXPECT_EQ(node.state(a + std::size_t{p} * 1024), PageState::valid) << "page " << p;
        cl::free(a);
      });
    }
}

TEST(Cluster, PagesWithSeveralWritersAreMergedByteExactly) {
  run_ranks(3, options(), [&](Node& node) {
    constexpr std::uint32_t n = 5000;
    int* a = cl::alloc<int>(n);
    cl::reset_stats();
    cl::launch(interleave_kernel(), Launch{Dim3{9}, Dim3{32}, 0}, a, n, 7);
    const std::vector<int> got = read_all(a, n);
    for (std::uint32_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], 7 + static_cast<int>(i)) << "rank " << node.rank();
    const cl::Stats s = cl::stats();
    EXPECT_EQ(s.pages_multi_writer, 5u);  // 5000 ints: 5 pages, each with writers on all three ranks
    EXPECT_EQ(s.race_warnings, 0u);
    // Diffs as runs: each rank's 4-byte elements sit 12 bytes apart (4 bytes of each of the other
    // two ranks between them), so runs join across the 8-byte gaps: what moves to rank 0 is at most
    // the page, never three pages.
    if (node.rank() != 0) {
      EXPECT_LE(s.payload_bytes, 2 * n * sizeof(int));
    }
    cl::free(a);
  });
}

// A racy kernel: each rank's block writes the same 64 bytes. The warning names every writer of the
// bytes, and every rank ends with the same value there, the highest rank's, as rank 0's merge gives
// it (before, each rank kept its own bytes and took the lower ranks' over them: with three ranks,
// rank 0 read rank 2's value and ranks 1 and 2 rank 0's, in this kernel and every later one).
TEST(Cluster, OverlappingWritesAreReportedAsARaceAndEveryRankKeepsTheSameWinner) {
  for (const int ranks : {2, 3}) {
    testing::internal::CaptureStderr();
    std::vector<int> seen(static_cast<std::size_t>(ranks), 0);
    run_ranks(ranks, options(), [&](Node& node) {
      int* a = cl::alloc<int>(1024);
      const auto racy = hdsm::per_thread("racy", [](const Thread& t, int* p) {
        p[t.idx.x] = static_cast<int>(0x01010101u * (t.block.x + 1));
        p[100 + t.block.x] = 1;  // and bytes of its own: the page has several writers either way
        if (t.idx.x == 0) p[300] = static_cast<int>(0x01010101u * (t.block.x + 1));  // a second range
      });
      cl::reset_stats();
      cl::launch(racy, Launch{Dim3{static_cast<std::uint32_t>(ranks)}, Dim3{16}, 0}, a);
      if (cl::rank() == 0) {
        EXPECT_EQ(cl::stats().race_warnings, 1u);
      }
      const std::vector<int> got = read_all(a, 1024);
      for (int b = 0; b < ranks; ++b) EXPECT_EQ(got[static_cast<std::size_t>(100 + b)], 1);
      seen[static_cast<std::size_t>(node.rank())] = got[3];
      // What each rank's kernels read is what its copies gave: the same value on every rank.
      const auto copy = hdsm::per_thread("copy_racy", [](const Thread& t, int* p) {
        if (t.idx.x == 0) p[200 + t.block.x] = p[3];  // block b runs on rank b
      });
      cl::launch(copy, Launch{Dim3{static_cast<std::uint32_t>(ranks)}, Dim3{1}, 0}, a);
      const std::vector<int> copies = read_all(a, 1024);
      for (int b = 0; b < ranks; ++b)
        EXPECT_EQ(copies[static_cast<std::size_t>(200 + b)],
                  static_cast<int>(0x01010101u * static_cast<unsigned>(ranks)))
            << "block " << b;
      cl::free(a);
    });
    const std::string err = testing::internal::GetCapturedStderr();
    const std::string who = ranks == 2 ? "ranks 0 and 1" : "ranks 0, 1 and 2";
    EXPECT_NE(err.find("kernel 'racy' is racy: " + who + " wrote bytes [0, 64) of page"), std::string::npos)
        << err;
    EXPECT_NE(err.find("(68 B in 2 ranges of the page in all)"), std::string::npos) << err;
    EXPECT_EQ(seen, std::vector<int>(static_cast<std::size_t>(ranks), static_cast<int>(0x01010101u * ranks)));
  }
}

TEST(Cluster, LazyBoundariesInvalidateOthersPagesAndFetchThemOnTouch) {
  run_ranks(3, options(/*lazy_pages=*/0), [&](Node& node) {
    constexpr std::uint32_t blocks = 6, per_block = 1024;  // a page a block
    int* a = cl::alloc<int>(blocks * per_block);
    const std::vector<int> zeros(blocks * per_block, 0);
    cl::memcpy(a, zeros.data(), zeros.size() * sizeof(int));  // shared pages
    cl::reset_stats();
    cl::launch(fill_kernel(), Launch{Dim3{blocks}, Dim3{32}, 0}, a, per_block, 5);
    const cl::Stats s = cl::stats();
    EXPECT_EQ(s.lazy_kernels, 1u);
    // Rank r wrote pages 2r and 2r+1: it keeps them; rank 0 holds every page; others are invalid.
    for (std::uint32_t b = 0; b < blocks; ++b) {
      const bool mine = b / 2 == static_cast<std::uint32_t>(node.rank());
      const PageState want = node.rank() == 0 || mine ? PageState::valid : PageState::invalid;
      EXPECT_EQ(node.state(a + b * per_block), want) << "rank " << node.rank() << " page " << b;
    }
    EXPECT_EQ(s.pages_invalidated, node.rank() == 0 ? 0u : 4u);
    // A host read of an invalidated page fetches it from rank 0.
    for (std::uint32_t b = 0; b < blocks; ++b) ASSERT_EQ(a[b * per_block + 3], 5 + static_cast<int>(b));
    EXPECT_EQ(cl::stats().fetches, node.rank() == 0 ? 0u : 4u);
    // A kernel that reads pages invalidated by another lazy boundary fetches them too.
    cl::launch(fill_kernel(), Launch{Dim3{blocks}, Dim3{32}, 0}, a, per_block, 50);
    int* b2 = cl::alloc<int>(blocks * per_block);
    const auto copy =
        hdsm::per_thread("copy_shifted", [](const Thread& t, const int* from, int* to, std::uint32_t n) {
          const std::uint64_t i = t.global_x();
          if (i < n) to[i] = from[(i + n / 2) % n] + 1;
        });
    cl::launch(copy, hdsm::cover(blocks * per_block, 256), a, b2, blocks * per_block);
    const std::vector<int> got = read_all(b2, blocks * per_block);
    for (std::uint32_t i = 0; i < blocks * per_block; ++i)
      ASSERT_EQ(got[i],
                51 + static_cast<int>(((i + blocks * per_block / 2) % (blocks * per_block)) / per_block));
    cl::free(b2);
    cl::free(a);
  });
}

// Rank 1 may use 6 runs of one protection (HDSM_CLUSTER_MAPPINGS); rank 0, which writes the even
// pages of 64 in a lazy kernel, as many as it needs. Rank 1 then loses the even pages (none) and
// keeps the odd ones (read): 65 runs, so its protection map merges pairs of pages, each with the
// protection of its more restricted page, and closes all 64.
// With `pairs`, rank 0 writes pages 0 and 1 of every 4 instead: rank 1's map merges groups of 4,
// each with two invalidated pages.
// `then`, where given, runs on every rank after that.
void run_degraded(const std::function<void(Node&, int*, std::uint32_t)>& after, bool pairs = false,
                  const std::function<void(Node&, int*)>& then = {}) {
  run_ranks_with(
      2,
      [](int rank) {
        cl::Options o = options(/*lazy_pages=*/0, 2, /*private_pages=*/false);
        o.open_ahead = 0;  // a fault for every page
        if (rank == 1) o.mappings = 6;
        return o;
      },
      [&](Node& node) {
        constexpr std::uint32_t pages = 64, per_page = kPage / sizeof(int);
        int* a = cl::alloc<int>(pages * per_page);
        const std::vector<int> zeros(pages * per_page, 0);
        cl::memcpy(a, zeros.data(), zeros.size() * sizeof(int));
        // Blocks [0, 32) are rank 0's: block b fills page 2b (or, in pairs, 4 (b / 2) + b % 2), each
        // element with 1000 times its page plus its index. Rank 1's blocks write nothing.
        const auto fill =
            hdsm::per_thread("even_pages", [](const Thread& t, int* to, std::uint32_t n, bool two) {
              if (t.block.x >= n / 2) return;
              const std::uint32_t page = two ? t.block.x / 2 * 4 + t.block.x % 2 : 2 * t.block.x;
              for (std::uint32_t i = t.idx.x; i < per_page; i += t.block_dim.x)
                to[std::size_t{page} * per_page + i] = static_cast<int>(page * 1000 + i);
            });
        cl::launch(fill, Launch{Dim3{pages}, Dim3{32}, 0}, a, pages, pairs);
        EXPECT_EQ(cl::stats().lazy_kernels, 1u);
        if (node.rank() == 1) {
          EXPECT_EQ(node.state(a), PageState::invalid);
          EXPECT_EQ(node.state(a + per_page), pairs ? PageState::invalid : PageState::valid);
          after(node, a, per_page);
        }
        cl::sync();
        if (then) then(node, a);
        cl::free(a);
      });
}

TEST(Cluster, PagesADegradedProtectionClosedReopenOnTheirFault) {
  run_degraded([](Node&, int* a, std::uint32_t per_page) {
    // Valid pages closed with their pair: each read faults once and reopens its page alone
    // (before, the fault found the page valid and let the read retry, which faulted again forever).
    EXPECT_EQ(a[1 * per_page + 5], 0);
    EXPECT_EQ(a[3 * per_page + 7], 0);
    // An invalidated page is fetched from rank 0 as always.
    EXPECT_EQ(a[2 * per_page + 9], 2 * 1000 + 9);
    EXPECT_EQ(cl::stats().fetches, 1u);
  });
}

// One rank: every page is writable and never faults, until frees leave more runs than its 5
// mappings and the map closes the allocations left with their freed neighbours. A host write then
// reopens its page (before, it was refused as a host write to global memory).
TEST(Cluster, OneRanksPagesReopenForWritesAfterTheMapMerged) {
  cl::Options o = options();
  o.mappings = 5;
  run_ranks(1, o, [&](Node& node) {
    std::vector<char*> pages;
    for (int i = 0; i < 5; ++i) pages.push_back(cl::alloc<char>(kPage));
    for (int i = 1; i < 5; ++i) ASSERT_EQ(pages[i], pages[0] + i * kPage) << "not consecutive pages";
    cl::free(pages[1]);
    cl::free(pages[3]);  // rw | none | rw | none | rw | none: 6 runs > 5
    pages[0][10] = 'a';
    pages[2][20] = 'c';
    EXPECT_EQ(pages[0][10], 'a');
    EXPECT_EQ(pages[2][20], 'c');
    EXPECT_EQ(node.state(pages[0]), PageState::valid);
    cl::free(pages[0]);
    cl::free(pages[2]);
    cl::free(pages[4]);
  });
  o.mappings = 4;
  EXPECT_THROW(run_ranks(1, o, [](Node&) {}), hdsm::InvalidArgument);
}

// The fewest mappings a rank may use (5), and two threads on each rank writing every other page:
// each write fault finds the budget full and first closes another run (before, the fault was
// refused and the program ended with SIGSEGV). The pages closed fault again and reopen.
TEST(Cluster, WriteFaultsBeyondAFullMappingsBudgetCloseOtherPagesFirst) {
  cl::Options o = options();
  o.mappings = 5;
  run_ranks(2, o, [&](Node& node) {
    constexpr std::uint32_t per_page = kPage / sizeof(int), pages = 64, n = pages * per_page;
    int* a = cl::alloc<int>(n);
    // Block b writes page 2b + k (k = 0, then 1): pages far apart on each rank's two threads.
    static const auto alternate =
        hdsm::per_thread("alternate_pages", [](const Thread& t, int* a, std::uint32_t k, int v) {
          const std::size_t page = 2 * std::size_t{t.block.x} + k;
          for (std::uint32_t i = t.idx.x; i < kPage / sizeof(int); i += t.block_dim.x)
            a[page * (kPage / sizeof(int)) + i] = v + static_cast<int>(page);
        });
    cl::reset_stats();
    cl::launch(alternate, Launch{Dim3{pages / 2}, Dim3{64}, 0}, a, 0u, 1000);
    cl::launch(alternate, Launch{Dim3{pages / 2}, Dim3{64}, 0}, a, 1u, 2000);
    const std::vector<int> got = read_all(a, n);
    for (std::uint32_t p = 0; p < pages; ++p)
      ASSERT_EQ(got[std::size_t{p} * per_page + 7], (p % 2 == 0 ? 1000 : 2000) + static_cast<int>(p))
          << "page " << p << ", rank " << node.rank();
    EXPECT_GT(cl::stats().mapping_closes, 0u);
    cl::free(a);
  });
}

TEST(Cluster, AFetchIntoAMergedGroupOpensThePageAlone) {
  run_degraded(
      [](Node&, int* a, std::uint32_t per_page) {
        // Page 0's group [0, 4) keeps page 1 invalid (none): the fetched page opens alone (before,
        // the fetch took the group's protection, stayed closed, and the program ended).
        EXPECT_EQ(a[0 * per_page + 5], 5);
        EXPECT_EQ(a[5 * per_page + 6], 5 * 1000 + 6);
        EXPECT_EQ(a[2 * per_page + 7], 0);  // valid, reopened
        EXPECT_EQ(cl::stats().fetches, 2u);
      },
      /*pairs=*/true);
}

// Without private pages, a page a rank only read is no write: a kernel after it modifies nothing
// (before, the fetch's touch counted as a writer, so the next lazy boundary sent the page as modified
// and invalidated it on rank 1, which fetched it again at its next read).
TEST(Cluster, APageARankFetchedIsNotModifiedAtTheNextBoundary) {
  run_ranks(2, options(/*lazy_pages=*/0, 2, /*private_pages=*/false), [&](Node& node) {
    constexpr std::uint32_t blocks = 4, per_block = 1024;  // a page a block
    int* a = cl::alloc<int>(blocks * per_block);
    const std::vector<int> zeros(blocks * per_block, 0);
    cl::memcpy(a, zeros.data(), zeros.size() * sizeof(int));
    cl::launch(fill_kernel(), Launch{Dim3{blocks}, Dim3{32}, 0}, a, per_block, 5);
    ASSERT_EQ(cl::stats().lazy_kernels, 1u);
    if (node.rank() == 1) {
      ASSERT_EQ(node.state(a), PageState::invalid);  // rank 0 wrote pages 0 and 1
      EXPECT_EQ(a[3], 5);
      EXPECT_EQ(cl::stats().fetches, 1u);
    }
    const cl::Stats before = cl::stats();
    const auto nothing = hdsm::per_thread("write_nothing", [](const Thread&, int*) {});
    cl::launch(nothing, Launch{Dim3{blocks}, Dim3{32}, 0}, a);
    const cl::Stats after = cl::stats();
    EXPECT_EQ(after.pages_modified, before.pages_modified) << "rank " << node.rank();
    EXPECT_EQ(after.lazy_kernels, before.lazy_kernels) << "rank " << node.rank();
    if (node.rank() == 1) {
      EXPECT_EQ(node.state(a), PageState::valid);
      EXPECT_EQ(a[4], 5);
      EXPECT_EQ(cl::stats().fetches, 1u);
    }
    cl::sync();
    cl::free(a);
  });
}

// A page host code touched (read, or fetched from its holder) and then freed stays freed at the
// next boundary (before, the touch made it private to the reader, or promoted and broadcast, and a
// cluster::memcpy into the freed pointer was accepted); allocated again and touched by no one
// since, it is untouched (before, the old touch made it private to the reader).
TEST(Cluster, APageTouchedAndFreedBetweenLaunchesStaysFreed) {
  for (const bool from_holder : {false, true}) {
    SCOPED_TRACE(from_holder ? "fetched from rank 1" : "first touch");
    run_ranks(2, options(), [&](Node& node) {
      int* a = cl::alloc<int>(1024);  // one page
      int* b = cl::alloc<int>(1024);  // keeps the pages in use above a's
      if (from_holder) {
        const auto rank1_writes = hdsm::per_thread("rank1_writes", [](const Thread& t, int* p) {
          if (t.block.x == 1) p[0] = 5;
        });
        cl::launch(rank1_writes, Launch{Dim3{2}, Dim3{1}, 0}, a);
        ASSERT_EQ(node.state(a), node.rank() == 1 ? PageState::private_page : PageState::invalid);
      }
      if (node.rank() == 0) {
        EXPECT_EQ(a[0], from_holder ? 5 : 0);
      }
      cl::free(a);
      cl::reset_stats();
      cl::launch(fill_kernel(), Launch{Dim3{2}, Dim3{1}, 0}, b, 0u, 0);  // writes nothing
      EXPECT_EQ(node.state(a), PageState::unused) << "rank " << node.rank();
      EXPECT_EQ(cl::stats().pages_promoted, 0u);
      const int v = 1;
      EXPECT_THROW(cl::memcpy(a, &v, sizeof v), hdsm::InvalidPointer);
      // Touched, freed and allocated again before a launch: the old touch does not count for the new
      // allocation, which no one touched; a touch after the allocation does (below).
      int* c = cl::alloc<int>(1024);
      ASSERT_EQ(c, a) << "the heap gave the freed page back";
      if (node.rank() == 0) (void)*static_cast<volatile int*>(c);
      cl::free(c);
      c = cl::alloc<int>(1024);
      ASSERT_EQ(c, a);
      cl::launch(fill_kernel(), Launch{Dim3{2}, Dim3{1}, 0}, b, 0u, 0);
      EXPECT_EQ(node.state(c), PageState::untouched) << "rank " << node.rank() << ": an old touch counted";
      if (node.rank() == 1) (void)*static_cast<volatile int*>(c);
      cl::launch(fill_kernel(), Launch{Dim3{2}, Dim3{1}, 0}, b, 0u, 0);
      EXPECT_EQ(node.state(c), node.rank() == 1 ? PageState::private_page : PageState::invalid)
          << "rank " << node.rank();
      cl::free(c);
      cl::free(b);
    });
  }
}

// Host code may allocate, touch and free pages many times between two launches: each page's touch is
// noted once (before, every cycle took a slot of an array with one per page, and ran past its end).
TEST(Cluster, AllocTouchFreeCyclesBetweenLaunchesNeverOutgrowTheTouchList) {
  cl::Options o = options();
  o.space_bytes = std::size_t{16} << 20;  // 4096 pages, the least
  run_ranks(2, o, [&](Node& node) {
    for (int i = 0; i < 4500; ++i) {
      int* a = cl::alloc<int>(1024);
      ASSERT_EQ(a[0], 0);
      cl::free(a);
    }
    int* a = cl::alloc<int>(1024);
    cl::launch(fill_kernel(), Launch{Dim3{2}, Dim3{32}, 0}, a, 512u, 3);
    EXPECT_EQ(read_all(a, 1024)[600], 4) << "rank " << node.rank();
    cl::free(a);
  });
}

// pages_invalidated counts the pages a rank had and dropped: not pages it never touched that became
// private to another rank at an eager boundary.
TEST(Cluster, PagesAnotherRankTookPrivateAreNotCountedAsDropped) {
  run_ranks(2, options(), [&](Node& node) {
    int* a = cl::alloc<int>(4 * 1024);  // four pages, two a rank
    cl::launch(fill_kernel(), Launch{Dim3{4}, Dim3{32}, 0}, a, 1024u, 1);
    EXPECT_EQ(cl::stats().lazy_kernels, 0u);
    EXPECT_EQ(node.state(a + (node.rank() == 0 ? 3 : 0) * 1024), PageState::invalid);
    EXPECT_EQ(cl::stats().pages_invalidated, 0u) << "rank " << node.rank();
    cl::free(a);
  });
}

// Two ranks write the same bytes of a page private to a third: the race check sees both, whichever
// rank holds the page (before, rank 0's own runs on such a page were left out).
TEST(Cluster, RacesOnAPageThatStopsBeingPrivateAreReportedWhoeverHoldsIt) {
  for (const int holder : {0, 2}) {
    SCOPED_TRACE(fmt::format("private to rank {}", holder));
    std::atomic<std::uint64_t> warnings{0};
    testing::internal::CaptureStderr();
    run_ranks(3, options(), [&](Node& node) {
      int* a = cl::alloc<int>(1024);
      const auto own = hdsm::per_thread("own", [](const Thread& t, int* p, std::uint32_t who) {
        if (t.block.x == who) p[5] = 1;
      });
      cl::launch(own, Launch{Dim3{3}, Dim3{1}, 0}, a, static_cast<std::uint32_t>(holder));
      ASSERT_EQ(node.state(a), node.rank() == holder ? PageState::private_page : PageState::invalid);
      const auto racy = hdsm::per_thread("racy_promoted", [](const Thread& t, int* p, std::uint32_t who) {
        if (t.block.x != who) p[0] = 10 + static_cast<int>(t.block.x);
      });
      cl::reset_stats();
      cl::launch(racy, Launch{Dim3{3}, Dim3{1}, 0}, a, static_cast<std::uint32_t>(holder));
      EXPECT_EQ(cl::stats().pages_promoted, 1u);
      warnings += cl::stats().race_warnings;
      cl::free(a);
    });
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(warnings.load(), 1u) << err;
  }
}

// The holder of a private page and another rank write the same bytes of it in one kernel: with the
// race check on, the holder's private pages are read-only at kernel start, so its changes are known
// and compared with the other rank's (before, the holder sent the page whole and the race went
// unreported). Different bytes of the page are no race, and both ranks' bytes survive.
TEST(Cluster, RacesBetweenAPrivatePagesHolderAndAnotherRankAreReported) {
  for (const int holder : {0, 1}) {
    for (const bool same_bytes : {true, false}) {
      SCOPED_TRACE(
          fmt::format("private to rank {}, {} bytes", holder, same_bytes ? "the same" : "different"));
      std::atomic<std::uint64_t> warnings{0};
      testing::internal::CaptureStderr();
      run_ranks(2, options(), [&](Node& node) {
        int* a = cl::alloc<int>(1024);
        const auto own = hdsm::per_thread("own", [](const Thread& t, int* p, std::uint32_t who) {
          if (t.block.x == who) p[5] = 1;
        });
        cl::launch(own, Launch{Dim3{2}, Dim3{1}, 0}, a, static_cast<std::uint32_t>(holder));
        ASSERT_EQ(node.state(a), node.rank() == holder ? PageState::private_page : PageState::invalid);
        // Block b runs on rank b: the holder writes a[0] or a[1], the other rank a[0].
        const auto both = hdsm::per_thread("both", [](const Thread& t, int* p, std::uint32_t who, int same) {
          p[t.block.x == who && same == 0 ? 1 : 0] = 10 + static_cast<int>(t.block.x);
        });
        cl::reset_stats();
        cl::launch(both, Launch{Dim3{2}, Dim3{1}, 0}, a, static_cast<std::uint32_t>(holder),
                   same_bytes ? 1 : 0);
        EXPECT_EQ(cl::stats().pages_promoted, 1u);
        // A twin on both ranks: the holder's of its watched private page, the other rank's after it
        // fetched the page.
        EXPECT_EQ(cl::stats().write_faults, 1u) << "rank " << node.rank();
        warnings += cl::stats().race_warnings;
        const std::vector<int> got = read_all(a, 8);
        EXPECT_EQ(got[5], 1);
        if (!same_bytes) {
          EXPECT_EQ(got[static_cast<std::size_t>(1)], 10 + holder);
          EXPECT_EQ(got[static_cast<std::size_t>(0)], 10 + (1 - holder));
        }
        // The page is shared now, and a third kernel's disjoint writes of both ranks raise nothing.
        const auto apart = hdsm::per_thread("apart", [](const Thread& t, int* p) { p[8 + t.block.x] = 1; });
        cl::reset_stats();
        cl::launch(apart, Launch{Dim3{2}, Dim3{1}, 0}, a);
        EXPECT_EQ(cl::stats().pages_multi_writer, 1u);
        warnings += cl::stats().race_warnings;
        cl::free(a);
      });
      const std::string err = testing::internal::GetCapturedStderr();
      EXPECT_EQ(warnings.load(), same_bytes ? 1u : 0u) << err;
      if (same_bytes) {
        EXPECT_NE(err.find("kernel 'both'"), std::string::npos) << err;
      }
    }
  }
}

// With the race check on, a rank's private pages are read-only between kernels too: a host write to
// one is caught as on a shared page (without it, it goes through unnoticed; see the guide).
TEST(ClusterDeathTest, HostWritesToAWatchedPrivatePageEndTheProgramWithAMessage) {
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_DEATH(run_ranks(2, options(),
                         [](Node& node) {
                           int* a = cl::alloc<int>(16);
                           const auto own = hdsm::per_thread("own", [](const Thread& t, int* p) {
                             if (t.block.x == 0) p[5] = 1;
                           });
                           cl::launch(own, Launch{Dim3{2}, Dim3{1}, 0}, a);
                           if (node.rank() == 0 && node.state(a) == PageState::private_page) a[0] = 1;
                           cl::sync();
                         }),
               "host code wrote global memory");
}

// Where the hardware does not tell reads from writes (every architecture but x86-64), a fault
// reaches the handler as of unknown kind: a page is made readable first, and a write faults again.
// Reads must not count as writes there either (before, a host read of a fresh page was refused as a
// host write, and a kernel's first read of a page made a twin and counted the page as written).
TEST(Cluster, FaultsOfUnknownKindReadFirstAndWriteOnTheSecondFault) {
  struct Unknown {
    Unknown() { hdsm::os::report_unknown_access(true); }
    ~Unknown() { hdsm::os::report_unknown_access(false); }
  } unknown;
  run_ranks(2, options(), [&](Node& node) {
    constexpr std::uint32_t per_page = kPage / sizeof(int);
    int* a = cl::alloc<int>(4 * per_page);
    EXPECT_EQ(a[node.rank() == 0 ? 3 : 7], 0);  // a host read of a fresh page
    cl::launch(fill_kernel(), Launch{Dim3{4}, Dim3{32}, 0}, a, per_page, 1);
    const auto sum = hdsm::per_thread("sum_pages", [](const Thread& t, const int* p, int* out) {
      if (t.idx.x == 0)
        out[t.block.x] = p[std::size_t{t.block.x} * per_page] + p[std::size_t{t.block.x} * per_page + 9];
    });
    int* out = cl::alloc<int>(4);
    const std::uint64_t modified = cl::stats().pages_modified;
    cl::launch(sum, Launch{Dim3{4}, Dim3{1}, 0}, a, out);
    EXPECT_LE(cl::stats().pages_modified - modified, 1u);  // `out`'s page, not `a`'s four
    const std::vector<int> got = read_all(out, 4);
    for (int b = 0; b < 4; ++b) EXPECT_EQ(got[static_cast<std::size_t>(b)], 2 * (1 + b));
    cl::free(out);
    cl::free(a);
  });
  // A write of unknown kind to a page its merged group left readable (here private to rank 0, beside
  // shared read-only pages, in 5 mappings) opens the page as its state allows (before, it asked
  // for read, found it, and retried forever).
  run_ranks_with(
      2,
      [](int) {
        cl::Options o = options(/*lazy_pages=*/1u << 30, 1);
        o.mappings = 5;
        return o;
      },
      [](Node& node) {
        constexpr std::uint32_t per_page = kPage / sizeof(int);
        int* a = cl::alloc<int>(16 * per_page);
        const int three = 3;
        for (std::uint32_t p = 1; p < 16; p += 2) cl::memcpy(a + p * per_page, &three, sizeof three);
        EXPECT_EQ(node.protection_granularity(), 2u);
        const auto write = hdsm::per_thread("block0_writes", [](const Thread& t, int* p, int at, int v) {
          if (t.block.x == 0) p[at] = v;
        });
        cl::launch(write, Launch{Dim3{2}, Dim3{1}, 0}, a, 0, 1);
        cl::launch(write, Launch{Dim3{2}, Dim3{1}, 0}, a, 7, 42);
        const std::vector<int> got = read_all(a, 8);
        EXPECT_EQ(got[0] + got[7], 43);
        cl::free(a);
      });
  // Data only: a read that faulted while another thread of the rank made the page readable reaches
  // the handler as a fault of unknown kind on a readable page, which must be taken for a write (were
  // it one, the write would fault again and again): the page then counts as written, which costs
  // its diff at the boundary, never a value.
  for (const bool private_pages : {true, false})
    run_ranks(3, options(6, 2, private_pages), [&](Node&) {
      EXPECT_EQ(hdsm::test::cluster_model::run(0x5eed, 12, 17 * 1024 - 100, 1024, /*exact_modified=*/false),
                "")
          << (private_pages ? "private pages" : "every page shared");
    });
}

// What each rank's node made of `options_of(rank)`: "" where it was made (and `body` ran), else the
// error's message. Every rank gets its own: one that fails alone must not leave the others waiting.
template <class O, class F>
std::vector<std::string> outcomes(int ranks, O options_of, F body, const WrapTransport& wrap = {}) {
  std::vector<std::string> what;
  for (const std::exception_ptr& e : rank_errors(ranks, options_of, body, wrap)) {
    what.emplace_back();
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what.back() = x.what();
    }
  }
  return what;
}

// A rank's transport that passes everything through, calling a test's hooks on the way: before an
// allreduce, and on the bytes the rank sends rank 0 in a gather.
class TapTransport final : public cl::detail::Transport {
 public:
  std::function<void()> before_allreduce;
  std::function<void(std::vector<std::byte>&)> on_gather;

  explicit TapTransport(Transport& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int ranks() const override { return inner_.ranks(); }
  bool shared_address_space() const override { return inner_.shared_address_space(); }
  bool concurrent_requests() const override { return inner_.concurrent_requests(); }
  void allreduce(std::span<std::uint32_t> v, cl::detail::ReduceOp op) override {
    if (before_allreduce) before_allreduce();
    inner_.allreduce(v, op);
  }
  void allreduce(std::span<std::uint64_t> v, cl::detail::ReduceOp op) override { inner_.allreduce(v, op); }
  std::vector<std::uint64_t> allgather(std::uint64_t value) override { return inner_.allgather(value); }
  void gather(std::span<const std::byte> mine, std::vector<std::byte>& all,
              std::vector<std::uint64_t>& sizes) override {
    std::vector<std::byte> sent(mine.begin(), mine.end());
    if (on_gather) on_gather(sent);
    inner_.gather(sent, all, sizes);
  }
  void scatter(const std::vector<std::span<const std::byte>>& each, std::vector<std::byte>& mine) override {
    inner_.scatter(each, mine);
  }
  void broadcast(int root, std::span<std::byte> data) override { inner_.broadcast(root, data); }
  void barrier() override { inner_.barrier(); }
  bool agree_within(std::span<std::uint64_t> values, std::chrono::milliseconds limit) override {
    return inner_.agree_within(values, limit);
  }
  void abandon(const char* why) noexcept override { inner_.abandon(why); }
  void serve_pages(cl::detail::PageServer* server) override { inner_.serve_pages(server); }
  void stop_serving() override { inner_.stop_serving(); }
  void fetch(int holder, std::uint64_t page, std::uint64_t epoch, std::span<std::byte> into) override {
    inner_.fetch(holder, page, epoch, into);
  }

 private:
  Transport& inner_;
};

// A rank that fails halfway through a boundary, alone (here rank 0 finds a malformed record among
// those it gathered), ends it for every rank: the others' next collective fails naming its error
// instead of waiting for a rank that left the boundary (over MPI: the job ends, MPI_Abort).
TEST(Cluster, ARankThatFailsHalfwayThroughABoundaryStopsEveryRank) {
  const std::vector<std::string> what = outcomes(
      3, [](int) { return options(); },
      [](Node&) {
        constexpr std::uint32_t n = 5000;
        int* a = cl::alloc<int>(n);
        cl::launch(interleave_kernel(), Launch{Dim3{9}, Dim3{32}, 0}, a, n, 7);  // pages of three writers
      },
      [](int rank, cl::detail::Transport& endpoint) {
        auto tap = std::make_unique<TapTransport>(endpoint);
        // The first record rank 1 sends rank 0 names a page past the end of global memory.
        if (rank == 1)
          tap->on_gather = [](std::vector<std::byte>& sent) {
            const std::uint64_t page = std::uint64_t{1} << 40;  // a record's header starts with its page
            if (sent.size() >= sizeof page) std::memcpy(sent.data(), &page, sizeof page);
          };
        return tap;
      });
  const std::string halfway = "rank 0 failed halfway through kernel interleave's boundary";
  EXPECT_NE(what[0].find("page 1099511627776"), std::string::npos) << what[0];
  for (const int r : {1, 2}) {
    EXPECT_NE(what[static_cast<std::size_t>(r)].find("rank 0 left: " + halfway), std::string::npos)
        << what[static_cast<std::size_t>(r)];
  }
}

// A call the ranks agreed on that then fails on one rank alone (here rank 1's mprotect is refused, as
// when the process is out of mappings) leaves that rank's global memory apart from the others': the
// job ends (in-process, every other rank's next collective fails naming the rank and the call),
// instead of the others going on to wait for it.
TEST(Cluster, ARankThatFailsAloneInAnAgreedCallStopsEveryRank) {
  const std::vector<std::string> what = outcomes(
      3, [](int) { return options(1u << 30, 2, /*private_pages=*/false); },
      [](Node& node) {
        if (node.rank() == 1) node.refuse_mprotects(1000);
        int* a = cl::alloc<int>(4 * 1024);  // read-only pages: an mprotect on every rank
        cl::launch(fill_kernel(), Launch{Dim3{4}, Dim3{32}, 0}, a, 1024, 0);
      });
  EXPECT_NE(what[1].find("mprotect"), std::string::npos) << what[1];
  for (const int r : {0, 2})
    EXPECT_NE(what[static_cast<std::size_t>(r)].find(
                  "rank 1 left: rank 1 failed in cluster::alloc after the ranks agreed on the call"),
              std::string::npos)
        << what[static_cast<std::size_t>(r)];
}

// A page request for a boundary further ahead than the one this rank may still be in would be waited
// for forever, and one of another size would allocate what the request says: both are refused.
TEST(Cluster, ThePageServerRefusesRequestsItCouldNeverAnswer) {
  run_ranks(2, options(), [](Node& node) {
    int* a = cl::alloc<int>(1024);
    const std::uint64_t page =
        static_cast<std::uint64_t>(reinterpret_cast<std::byte*>(a) - node.base()) / node.page_size();
    std::vector<std::byte> out(node.page_size());
    EXPECT_THROW(node.serve(page, node.epoch() + 2, out), hdsm::InvalidArgument);
    EXPECT_THROW(node.serve(page, node.epoch(), std::span(out).first(16)), hdsm::InvalidArgument);
    node.serve(page, node.epoch(), out);
    EXPECT_EQ(out[0], std::byte{0});
    cl::free(a);
  });
}

// Ranks in different calls are refused on every rank, naming the calls, and stay in step.
TEST(Cluster, RanksInDifferentCallsAreRefusedOnEveryRank) {
  run_ranks(3, options(), [&](Node& node) {
    int* a = cl::alloc<int>(64);
    int host[4] = {};
    try {
      if (node.rank() == 2)
        cl::sync();
      else if (node.rank() == 1)
        cl::launch(fill_kernel(), Launch{Dim3{1}, Dim3{32}, 0}, a, 32u, 1);
      else
        cl::memcpy(host, a, sizeof host);
      ADD_FAILURE() << "rank " << node.rank() << " went on";
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("the ranks called different collectives (some memcpy, some sync"),
                std::string::npos)
          << e.what();
    }
    cl::sync();
    // Different kernels of the same shape: each rank would run its own kernel's blocks.
    const auto other = hdsm::per_thread("other", [](const Thread&, int*, std::uint32_t, int) {});
    try {
      if (node.rank() == 1)
        cl::launch(other, Launch{Dim3{3}, Dim3{32}, 0}, a, 1u, 1);
      else
        cl::launch(fill_kernel(), Launch{Dim3{3}, Dim3{32}, 0}, a, 1u, 1);
      ADD_FAILURE() << "rank " << node.rank() << " ran";
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("the ranks passed different kernels"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(read_all(a, 64)[0], 0);  // no block ran
    cl::free(a);
  });
}

// Ranks that launch one kernel with different arguments would each run its blocks on other data:
// a scalar or a global-memory pointer that differs fails the launch on every rank, before any block
// runs (before, only the kernel and the shape were compared, and the result was silently mixed).
// Host pointers differ between ranks by nature (a Constant's data()) and are not compared.
// A long double has padding bytes (6 of its 16 on x86-64) of indeterminate content: compared by
// size only, or a correct program could fail by its ranks' stack histories.
static_assert(cl::detail::arg_kinds<long double, double, int*>().scalars == 0b010);
static_assert(cl::detail::arg_kinds<long double, double, int*>().pointers == 0b100);

TEST(Cluster, ALaunchWhoseArgumentsDifferBetweenRanksFailsOnEveryRank) {
  run_ranks(2, options(), [](Node& node) {
    int* a = cl::alloc<int>(256);
    int* b = cl::alloc<int>(256);
    // The message names the argument that differs, found by a second reduction on the mismatch.
    const auto expect_refused = [&](const auto& launch, const char* what, const std::string& which) {
      try {
        launch();
        ADD_FAILURE() << what << ": rank " << node.rank() << " ran";
      } catch (const hdsm::InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("the ranks passed different arguments"), std::string::npos)
            << what << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find(which), std::string::npos) << what << ": " << e.what();
      }
    };
    const int value = node.rank() == 0 ? 2 : 5;
    expect_refused(
        [&] {
          cl::launch(fill_kernel(), Launch{Dim3{2}, Dim3{32}, 0}, a, 128u, value);
        },
        "a scalar",
        fmt::format("; argument 2 (a scalar of 4 bytes, read as an unsigned integer) is 2 to 5 (rank {}: {})",
                    node.rank(), value));
    expect_refused(
        [&] {
          cl::launch(fill_kernel(), Launch{Dim3{2}, Dim3{32}, 0}, node.rank() == 0 ? a : b, 128u, 1);
        },
        "a global pointer", "; argument 0 (a pointer) points to global byte ");
    expect_refused(
        [&] {
          cl::launch(fill_kernel(), Launch{Dim3{2}, Dim3{32}, 0}, a + node.rank(), 64u, 1);
        },
        "an offset into one allocation",
        fmt::format(
            "; argument 0 (a pointer) points to global byte {} on one rank and global byte {} on another",
            reinterpret_cast<std::byte*>(a) - node.base(),
            reinterpret_cast<std::byte*>(a + 1) - node.base()));
    // The untyped launch compares 8-byte values that point into global memory.
    std::uint32_t per_block = 128;
    int v = 1;
    int* where = node.rank() == 0 ? a : b;
    void* values[] = {&where, &per_block, &v};
    const std::size_t sizes[] = {sizeof where, sizeof per_block, sizeof v};
    expect_refused(
        [&] {
          cl::launch(static_cast<const hdsm::Kernel&>(fill_kernel()), Launch{Dim3{2}, Dim3{32}, 0},
                     hdsm::ArgPack{values, sizes, 3});
        },
        "an untyped global pointer", "; argument 0 (a pointer) points to global byte ");
    EXPECT_EQ(read_all(a, 256), std::vector<int>(256, 0)) << "a block ran";
    EXPECT_EQ(read_all(b, 256), std::vector<int>(256, 0)) << "a block ran";
    // Host pointers: each rank's own buffer, read by its blocks.
    const std::vector<int> mine(64, 3);
    const auto add = hdsm::per_thread("add_host", [](const Thread& t, int* p, const int* host) {
      p[t.global_x()] = host[t.idx.x] + static_cast<int>(t.block.x);
    });
    cl::launch(add, Launch{Dim3{2}, Dim3{64}, 0}, a, mine.data());
    const std::vector<int> got = read_all(a, 128);
    EXPECT_EQ(got[0], 3);
    EXPECT_EQ(got[127], 4);
    cl::free(b);
    cl::free(a);
  });
}

// A program's distribution policy that throws on one rank only, or splits the blocks differently on
// each, fails the launch on every rank before any block runs, with an hdsm error naming the rank
// (the one whose policy threw nests its exception): the ranks stay together, and the next launch
// runs.
TEST(Cluster, APolicyThatFailsOrDiffersOnOneRankFailsTheLaunchOnEveryRank) {
  std::array<std::string, 2> failed3, failed5, failed7;
  std::array<int, 2> last{};
  const auto options_of = [](int rank) {
    cl::Options o = options();
    o.policy = [rank](std::uint64_t blocks, std::span<const double>) {
      if (blocks == 3 && rank == 1) throw std::runtime_error("rank 1's policy cannot split 3 blocks");
      if (blocks == 7 && rank == 1) cl::sync();  // a collective from the policy: refused, not a hang
      const std::uint64_t middle = blocks == 5 ? 2 + static_cast<std::uint64_t>(rank) : blocks / 2;
      return std::vector<std::uint64_t>{0, middle, blocks};
    };
    return o;
  };
  const std::vector<std::string> what = outcomes(2, options_of, [&](Node& node) {
    const auto r = static_cast<std::size_t>(node.rank());
    int* a = cl::alloc<int>(7 * 1024);
    for (auto [blocks, message] :
         {std::pair{3u, &failed3}, std::pair{5u, &failed5}, std::pair{7u, &failed7}}) {
      try {
        cl::launch(fill_kernel(), Launch{Dim3{blocks}, Dim3{32}, 0}, a, 1024, 1);
      } catch (const hdsm::InvalidArgument& e) {
        (*message)[r] = e.what();
        if (blocks == 3 && r == 1) {
          const auto* nested = dynamic_cast<const std::nested_exception*>(&e);
          EXPECT_NE(nested, nullptr) << "the policy's own exception is not nested";
        }
      }
    }
    EXPECT_EQ(read_all(a, 5 * 1024)[0], 0);  // no block ran
    cl::launch(fill_kernel(), Launch{Dim3{4}, Dim3{32}, 0}, a, 1024, 0);
    last[r] = read_all(a, 4 * 1024)[4095];
  });
  EXPECT_EQ(what, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(
      failed3[1],
      "cluster::launch of kernel 'fill_blocks': the distribution policy failed on rank 1: rank 1's policy "
      "cannot split 3 blocks; no block ran");
  EXPECT_NE(failed3[0].find("kernel 'fill_blocks': the distribution policy failed on rank 1 (it threw"),
            std::string::npos)
      << failed3[0];
  EXPECT_NE(failed7[1].find("cluster::sync from the distribution policy on rank 1"), std::string::npos)
      << failed7[1];
  EXPECT_NE(failed7[0].find("the distribution policy failed on rank 1"), std::string::npos) << failed7[0];
  for (const std::string& m : failed5)
    EXPECT_NE(m.find("kernel 'fill_blocks': the distribution policy returned different block intervals"),
              std::string::npos)
        << m;
  EXPECT_EQ(last, (std::array<int, 2>{3, 3}));
}

// A host thread that touches global memory while its rank is in a kernel's boundary (here during
// the writeVector's sum, on a page the rank never touched) is refused as during the kernel: its
// touch would be recorded into the lists the boundary is reading and then resets, and the rank's
// later touches of the page would go unrecorded.
TEST(ClusterDeathTest, AHostThreadTouchingGlobalMemoryDuringABoundaryEndsTheProgram) {
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_DEATH(
      {
        std::atomic<int*> page{nullptr};  // rank 1's (each in-process rank has its own addresses)
        rank_errors(
            2, [](int) { return options(); },
            [&](Node& node) {
              int* a = cl::alloc<int>(2 * kPage / sizeof(int));
              if (node.rank() == 1) page = a + kPage / sizeof(int);  // never touched by rank 1
              cl::launch(fill_kernel(), Launch{Dim3{2}, Dim3{32}, 0}, a, 1u, 0);
            },
            [&](int rank, cl::detail::Transport& endpoint) {
              auto tap = std::make_unique<TapTransport>(endpoint);
              if (rank == 1)
                tap->before_allreduce = [&] {
                  if (int* p = page.exchange(nullptr)) std::thread([p] { std::printf("%d\n", *p); }).join();
                };
              return tap;
            });
      },
      "a host thread touched global memory while a kernel runs");
}

// A rank whose own setup fails after the ranks placed global memory (here its mapping budget is
// refused) stops every rank (before, it threw alone and the others waited in their first
// collective for good).
TEST(Cluster, ARankThatCannotSetUpItsNodeStopsEveryRank) {
  const std::vector<std::string> what = outcomes(
      3,
      [](int rank) {
        cl::Options o = options();
        if (rank == 2) o.mappings = 3;
        return o;
      },
      [](Node&) {});
  EXPECT_NE(what[2].find("HDSM_CLUSTER_MAPPINGS"), std::string::npos) << what[2];
  for (const int r : {0, 1})
    EXPECT_NE(what[static_cast<std::size_t>(r)].find("rank 2 could not set up"), std::string::npos)
        << what[static_cast<std::size_t>(r)];
}

// Options every rank must share: a bad value on one rank, or different values, stop every rank.
TEST(Cluster, OptionsTheRanksMustShareAreCheckedOnEveryRank) {
  std::vector<std::string> what = outcomes(
      2,
      [](int rank) {
        cl::Options o = options();
        if (rank == 1) o.page_size = 3000;
        return o;
      },
      [](Node&) {});
  EXPECT_NE(what[1].find("page_size, HDSM_CLUSTER_PAGE_SIZE) must be a power of two"), std::string::npos)
      << what[1];
  EXPECT_NE(what[0].find("rank 1 refused its options"), std::string::npos) << what[0];
  // A fiber stack the executor would refuse, after the agreement, on that rank alone.
  what = outcomes(
      2,
      [](int rank) {
        cl::Options o = options();
        if (rank == 0) o.fiber_stack = 4096;
        return o;
      },
      [](Node&) {});
  EXPECT_NE(what[0].find("fiber_stack (HDSM_FIBER_STACK) of 4 KiB is outside 16 KiB .. 16 MiB"),
            std::string::npos)
      << what[0];
  EXPECT_NE(what[1].find("rank 0 refused its options"), std::string::npos) << what[1];
  // Options set in code have their knobs' ranges, checked before the agreement: the rank that set
  // one out of range names the field and the knob, and every rank stops (a timeout of 0 ms ended the
  // job at the first lazy fetch; the others went through unchecked).
  const std::vector<std::pair<std::string, std::function<void(cl::Options&)>>> out_of_range = {
      {"cluster::Options::timeout = 0 ms is out of range: HDSM_CLUSTER_TIMEOUT accepts 1..86400000",
       [](cl::Options& o) { o.timeout = std::chrono::milliseconds(0); }},
      {"cluster::Options::open_ahead = 1073741824 is out of range: HDSM_CLUSTER_OPEN_AHEAD accepts 0..4096",
       [](cl::Options& o) { o.open_ahead = 1U << 30; }},
      {"cluster::Options::mappings = 1099511627776 is out of range: HDSM_CLUSTER_MAPPINGS accepts 0, or "
       "5..2^31",
       [](cl::Options& o) { o.mappings = std::size_t{1} << 40; }},
      {"cluster::Options::lazy_pages = 2199023255552 is out of range",
       [](cl::Options& o) { o.lazy_pages = std::uint64_t{1} << 41; }},
      {"cluster::Options::threads = 100000 is out of range: HDSM_CLUSTER_THREADS accepts 0..4096",
       [](cl::Options& o) { o.threads = 100000; }},
      {"cluster::Options::wait.spin_us = 200000 is out of range: HDSM_WAIT_SPIN_US accepts 0..100000",
       [](cl::Options& o) { o.wait.spin_us = 200000; }}};
  for (const auto& [want, spoil] : out_of_range) {
    what = outcomes(
        2,
        [&](int rank) {
          cl::Options o = options();
          if (rank == 1) spoil(o);
          return o;
        },
        [](Node&) {});
    EXPECT_NE(what[1].find(want), std::string::npos) << what[1];
    EXPECT_NE(what[0].find("rank 1 refused its options"), std::string::npos) << what[0];
  }
  // The race check on one rank only would see no other rank's diffs (before, it said nothing).
  for (const std::string field : {"lazy_pages", "private_pages", "check_races"}) {
    what = outcomes(
        2,
        [&](int rank) {
          cl::Options o = options();
          if (rank == 1) {
            if (field == "lazy_pages")
              o.lazy_pages = 7;
            else if (field == "private_pages")
              o.private_pages = !o.private_pages;
            else
              o.check_races = !o.check_races;
          }
          return o;
        },
        [](Node&) {});
    for (const std::string& w : what) EXPECT_NE(w.find("Options::" + field), std::string::npos) << w;
  }
}

// A cluster::memcpy that one rank gets wrong (a host pointer where the others pass global memory)
// fails on every rank (before, that rank threw alone and went on to its next collective).
TEST(Cluster, AMemcpyOneRankGetsWrongFailsOnEveryRank) {
  std::atomic<int> refused{0};
  run_ranks(2, options(), [&](Node& node) {
    int* a = cl::alloc<int>(1024);
    std::vector<int> host(1024, 1);
    try {
      cl::memcpy(node.rank() == 1 ? host.data() + 1 : a, host.data(), 16 * sizeof(int));
      ADD_FAILURE() << "rank " << node.rank() << ": the copy was made";
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("directions"), std::string::npos) << e.what();
      ++refused;
    }
    cl::memcpy(a, host.data(), 16 * sizeof(int));  // the ranks are in step: the next copy works
    EXPECT_EQ(read_all(a, 16)[15], 1);
    cl::free(a);
  });
  EXPECT_EQ(refused.load(), 2);
}

// Once rank 1 has fetched the pages rank 0 wrote, its pages need few runs again: the next boundary
// gives every page its own protection back (before, the map stayed merged for good, and each valid
// page of a pair with an invalidated one faulted once more after every lazy kernel).
TEST(Cluster, AMergedMapRegainsSinglePagesAtTheNextBoundary) {
  std::vector<std::size_t> granularity;
  run_degraded(
      [&](Node& node, int* a, std::uint32_t per_page) {
        granularity.push_back(node.protection_granularity());
        for (std::uint32_t p = 0; p < 64; p += 2)
          ASSERT_EQ(a[p * per_page + 3], static_cast<int>(p * 1000 + 3));
        EXPECT_EQ(cl::stats().fetches, 32u);
        granularity.push_back(node.protection_granularity());  // fetches alone do not regain it
      },
      /*pairs=*/false,
      [&](Node& node, int* a) {
        const auto nothing = hdsm::per_thread("write_nothing", [](const Thread&, int*) {});
        cl::launch(nothing, Launch{Dim3{1}, Dim3{1}, 0}, a);
        if (node.rank() == 1) granularity.push_back(node.protection_granularity());
      });
  ASSERT_EQ(granularity, (std::vector<std::size_t>{2, 2, 1}));
}

// Every reopened page adds two runs: from the third odd page on, each read closes another page
// first (before, the third ended the program).
TEST(Cluster, PagesReopenBeyondAFullMappingsBudgetByClosingOthers) {
  run_degraded([](Node&, int* a, std::uint32_t per_page) {
    int sum = 0;
    for (std::uint32_t p = 1; p < 64; p += 2) sum += a[p * per_page + p];
    EXPECT_EQ(sum, 0);  // rank 0 wrote the even pages
    EXPECT_GT(cl::stats().mapping_closes, 0u);
  });
}

// A process that is itself out of mappings (mprotect's ENOMEM, here made up) cannot open the page:
// the program ends with a message naming the limits, rather than faulting forever.
TEST(ClusterDeathTest, APageTheProcessHasNoMappingForEndsTheProgramWithAMessage) {
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_DEATH(run_degraded([](Node& node, int* a, std::uint32_t per_page) {
                 node.refuse_mprotects(1000);
                 std::printf("read %d\n", a[per_page]);
               }),
               "the process is out of mappings .mprotect: ENOMEM.: raise vm.max_map_count, or lower "
               "HDSM_CLUSTER_MAPPINGS");
}

TEST(Cluster, LazyUpdateMovesFewerBytesThanEager) {
  std::uint64_t bytes[2] = {0, 0};
  for (const int lazy : {0, 1}) {
    std::atomic<std::uint64_t> sum{0};
    run_ranks(3, options(lazy == 1 ? 0 : 1u << 30), [&](Node&) {
      int* a = cl::alloc<int>(24 * 1024);
      const std::vector<int> zeros(24 * 1024, 0);
      cl::memcpy(a, zeros.data(), zeros.size() * sizeof(int));  // shared pages
      cl::reset_stats();
      cl::launch(fill_kernel(), Launch{Dim3{24}, Dim3{32}, 0}, a, 1024, 1);
      sum += cl::stats().wire_bytes;
      cl::free(a);
    });
    bytes[lazy] = sum;
  }
  EXPECT_LT(bytes[1], bytes[0]) << "lazy " << bytes[1] << " B, eager " << bytes[0] << " B";
}

// A page only one rank touches stays private to it: writable, no twin after the first kernel,
// nothing on the wire; another rank's touch fetches it from its holder, and the boundary makes it
// shared (its holder sends it whole to rank 0, which sends it to everyone).
TEST(Cluster, PrivatePagesStayHomeUntilAnotherRankTouchesThem) {
  run_ranks(3, options(), [&](Node& node) {
    constexpr std::uint32_t blocks = 6, per_block = 1024;  // a page a block, two blocks a rank
    constexpr std::uint32_t n = blocks * per_block;
    int* a = cl::alloc<int>(n);
    int* b = cl::alloc<int>(n);
    cl::reset_stats();
    cl::launch(fill_kernel(), Launch{Dim3{blocks}, Dim3{32}, 0}, a, per_block, 1);
    cl::launch(fill_kernel(), Launch{Dim3{blocks}, Dim3{32}, 0}, a, per_block, 2);
    cl::Stats s = cl::stats();
    // Once when still untouched, and, as the race check watches private pages, once in the second
    // kernel (its twin, which the check compares).
    EXPECT_EQ(s.write_faults, 4u) << "a private page faults once a kernel";
    EXPECT_EQ(s.payload_bytes, 0u) << "nothing sent for private pages";
    for (std::uint32_t blk = 0; blk < blocks; ++blk) {
      const bool mine = blk / 2 == static_cast<std::uint32_t>(node.rank());
      EXPECT_EQ(node.state(a + blk * per_block), mine ? PageState::private_page : PageState::invalid)
          << "rank " << node.rank() << " page " << blk;
    }
    // A copy out gathers the private pages.
    const std::vector<int> got = read_all(a, n);
    for (std::uint32_t i = 0; i < n; i += 311) ASSERT_EQ(got[i], 2 + static_cast<int>(i / per_block));
    // Each rank reads the others' pages: fetched from their holders, then shared.
    const auto copy =
        hdsm::per_thread("copy_shifted", [](const Thread& t, const int* from, int* to, std::uint32_t n) {
          const std::uint64_t i = t.global_x();
          if (i < n) to[i] = from[(i + n / 2) % n] + 1;
        });
    cl::reset_stats();
    cl::launch(copy, hdsm::cover(n, 256), a, b, n);
    s = cl::stats();
    EXPECT_GT(s.fetches, 0u);
    EXPECT_GT(s.pages_promoted, 0u);
    EXPECT_EQ(node.state(a), PageState::valid) << "shared after another rank touched it";
    for (std::uint32_t i = 0; i < n; i += 97) {
      ASSERT_EQ(a[i], 2 + static_cast<int>(i / per_block)) << "rank " << node.rank();
      ASSERT_EQ(b[i], 3 + static_cast<int>(((i + n / 2) % n) / per_block)) << "rank " << node.rank();
    }
    cl::free(b);
    cl::free(a);
  });
}

TEST(Cluster, HostCopiesInAndOut) {
  run_ranks(3, options(0), [&](Node& node) {
    constexpr std::size_t n = 3000;
    int* a = cl::alloc<int>(n);
    std::vector<int> host(n);
    std::iota(host.begin(), host.end(), node.rank() == 0 ? 10 : 99999);  // rank 0's data counts
    cl::memcpy(a + 1, host.data(), (n - 1) * sizeof(int));
    std::vector<int> out(n, -1);
    cl::memcpy(out.data(), a, n * sizeof(int), cl::Deliver::rank0);
    if (node.rank() == 0) {
      EXPECT_EQ(out[0], 0);
      EXPECT_EQ(out[1], 10);
      EXPECT_EQ(out[n - 1], 10 + static_cast<int>(n) - 2);
    } else {
      EXPECT_EQ(out[1], -1) << "Deliver::rank0 leaves the other ranks' buffers alone";
    }
    EXPECT_EQ(read_all(a, n)[n - 1], 10 + static_cast<int>(n) - 2);
    cl::free(a);
  });
}

// A copy stays inside one allocation, as the bytes asked for: one that runs on into the next
// allocation, or into the slack of the last page, is refused on every rank (before, it wrote there).
TEST(Cluster, CopiesThatLeaveTheirAllocationAreRefused) {
  run_ranks(2, options(), [&](Node&) {
    int* a = cl::alloc<int>(1000);  // 4000 bytes in one page
    int* b = cl::alloc<int>(1000);
    std::vector<int> host(2000, 5);
    const auto refused = [](const std::function<void()>& copy, const std::string& what) {
      try {
        copy();
      } catch (const hdsm::InvalidPointer& e) {
        return std::string(e.what()).find(what) != std::string::npos
                   ? testing::AssertionSuccess()
                   : testing::AssertionFailure() << e.what();
      }
      return testing::AssertionFailure() << "copied";
    };
    EXPECT_TRUE(refused([&] { cl::memcpy(a, host.data(), 2000 * sizeof(int)); },
                        "runs past the end of its allocation"));
    EXPECT_TRUE(refused([&] { cl::memcpy(a + 999, host.data(), 8); }, "runs past the end of its allocation"));
    EXPECT_TRUE(refused([&] { cl::memcpy(host.data(), b + 1, 1000 * sizeof(int)); }, "runs past the end"));
    EXPECT_TRUE(refused([&] { cl::memcpy(a + 1000, host.data(), 4); },
                        "reaches global memory that is not allocated"));
    cl::memcpy(a + 999, host.data(), 4);  // the last element is fine
    EXPECT_EQ(read_all(a, 1000)[999], 5);
    EXPECT_EQ(read_all(b, 1000)[0], 0);  // untouched by the refused copy
    cl::free(a);
    cl::free(b);
  });
}

TEST(Cluster, BadInputFailsOnEveryRank) {
  std::atomic<int> size_errors{0}, grid_errors{0}, kernel_errors{0}, free_errors{0};
  run_ranks(3, options(), [&](Node& node) {
    try {
      cl::alloc<int>(node.rank() == 1 ? 100 : 200);
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("different allocation sizes"), std::string::npos) << e.what();
      ++size_errors;
    }
    int* a = cl::alloc<int>(4096);
    try {
      cl::launch(fill_kernel(), Launch{Dim3{0}, Dim3{32}, 0}, a, 1u, 0);
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("no block to run"), std::string::npos) << e.what();
      ++grid_errors;
    }
    // A block shape the executor refuses, and a null host buffer: bad arguments on every rank, not a
    // kernel failure or a crash.
    for (const Launch& bad : {Launch{Dim3{4}, Dim3{0}, 0}, Launch{Dim3{1}, Dim3{2048}, 0}}) {
      try {
        cl::launch(fill_kernel(), bad, a, 1u, 0);
        ADD_FAILURE() << "launched";
      } catch (const hdsm::InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("cluster::launch of kernel 'fill_blocks': invalid launch"),
                  std::string::npos)
            << e.what();
      }
    }
    for (const bool in : {true, false}) {
      try {
        if (in)
          cl::memcpy(a, nullptr, 16);
        else
          cl::memcpy(nullptr, a, 16);
        ADD_FAILURE() << "copied";
      } catch (const hdsm::InvalidArgument& e) {
        // A copy in: rank 0's null source disagrees with the others' unused one, named in the legend.
        EXPECT_NE(std::string(e.what()).find(in ? "4: a null host buffer" : "the host buffer is null"),
                  std::string::npos)
            << e.what();
      }
    }
    // Ranks that never touch the host buffer may pass null: the other ranks' sources of a copy in,
    // and their destinations of a copy out to rank 0 alone.
    std::vector<int> host(16, 9);
    cl::memcpy(a, node.rank() == 0 ? host.data() : nullptr, 16 * sizeof(int));
    cl::memcpy(node.rank() == 0 ? host.data() : nullptr, a + 8, 8 * sizeof(int), cl::Deliver::rank0);
    EXPECT_EQ(read_all(a, 16)[15], 9);
    // Grids of as many blocks but another shape are refused on every rank.
    try {
      cl::launch(fill_kernel(),
                 node.rank() == 0 ? Launch{Dim3{4, 2}, Dim3{32}, 0} : Launch{Dim3{2, 4}, Dim3{32}, 0}, a, 1u,
                 0);
      ADD_FAILURE() << "launched";
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(
          std::string(e.what()).find(
              "cluster::launch of kernel 'fill_blocks': cluster: the ranks passed different grids (their x "
              "dimension) (from 2 to 4;"),
          std::string::npos)
          << e.what();
      EXPECT_NE(
          std::string(e.what()).find(fmt::format("rank {} launched a grid of ({}, 1) blocks of (32, 1, 1) "
                                                 "threads",
                                                 node.rank(), node.rank() == 0 ? "4, 2" : "2, 4")),
          std::string::npos)
          << e.what();
    }
    // The rank through a host pointer: the ranks compare scalar arguments, not what host pointers
    // point to.
    const auto failing = hdsm::per_thread("fails_on_rank_1", [](const Thread& t, int* p, const int* rank) {
      p[t.global_x()] = 1;
      if (*rank == 1) throw std::runtime_error("bad block");
    });
    const int me = node.rank();
    try {
      cl::launch(failing, Launch{Dim3{3}, Dim3{4}, 0}, a, &me);
    } catch (const hdsm::KernelFailure& e) {
      // Every rank has the failing rank's message, sent by it at the boundary.
      EXPECT_NE(std::string(e.what()).find("kernel 'fails_on_rank_1' failed on rank 1: bad block"),
                std::string::npos)
          << e.what();
      ++kernel_errors;
    }
    // Blocks failing on two ranks: a rank that failed gives its own message; rank 0 the lowest's.
    const auto failing_more = hdsm::per_thread("fails_above_0", [](const Thread& t, int* p, const int* rank) {
      p[t.global_x()] = 1;
      if (*rank >= 1) throw std::runtime_error("bad block on rank " + std::to_string(*rank));
    });
    try {
      cl::launch(failing_more, Launch{Dim3{3}, Dim3{4}, 0}, a, &me);
      ADD_FAILURE() << "launched";
    } catch (const hdsm::KernelFailure& e) {
      const std::string want =
          me == 0 ? "kernel 'fails_above_0' failed on 2 ranks; on rank 1: bad block on rank 1"
                  : fmt::format("failed on 2 ranks; on rank {} (this one): bad block on rank {}", me, me);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    EXPECT_EQ(read_all(a, 12)[0], 1) << "the memory is coherent after a failed kernel";
    try {
      cl::free(a + 1);
    } catch (const hdsm::InvalidPointer&) {
      ++free_errors;
    }
    cl::free(nullptr);  // nothing to free, as with cudaFree and std::free
    // A host pointer on one rank and null on another are different pointers, refused on both.
    int on_host = 0;
    EXPECT_THROW(cl::free(node.rank() == 1 ? nullptr : &on_host), hdsm::InvalidArgument);
    cl::free(a);
  });
  EXPECT_EQ(size_errors, 3);
  EXPECT_EQ(grid_errors, 3);
  EXPECT_EQ(kernel_errors, 3);
  EXPECT_EQ(free_errors, 3);
}

TEST(Cluster, WeightedAndCustomPolicies) {
  cl::Options o = options();
  o.policy = [](std::uint64_t blocks, std::span<const double> speeds) {
    std::vector<std::uint64_t> b(speeds.size() + 1, blocks);
    b[0] = 0;  // rank 0 takes every block
    return b;
  };
  run_ranks(2, o, [&](Node&) {
    int* a = cl::alloc<int>(4 * 1024);
    cl::reset_stats();
    cl::launch(fill_kernel(), Launch{Dim3{4}, Dim3{32}, 0}, a, 1024, 0);
    // Rank 0 wrote the 4 pages, through write faults or opened ahead by one (a sequential writer's
    // fault opens the next pages that are readable by then: how many depends on the threads' timing).
    const cl::Stats s = cl::stats();
    EXPECT_EQ(s.pages_written, cl::rank() == 0 ? 4u : 0u);
    EXPECT_EQ(s.write_faults + s.opened_ahead - s.opened_unwritten, cl::rank() == 0 ? 4u : 0u);
    EXPECT_EQ(read_all(a, 4096)[4095], 3);
    cl::free(a);
  });
  o.policy = [](std::uint64_t blocks, std::span<const double>) {
    return std::vector<std::uint64_t>{0, blocks};
  };
  std::atomic<int> refused{0};
  run_ranks(2, o, [&](Node&) {
    int* a = cl::alloc<int>(1024);
    try {
      cl::launch(fill_kernel(), Launch{Dim3{1}, Dim3{32}, 0}, a, 1024, 0);
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("ranks + 1"), std::string::npos) << e.what();
      ++refused;
    }
    cl::free(a);
  });
  EXPECT_EQ(refused, 2);
}

TEST(ClusterDeathTest, HostWritesToGlobalMemoryEndTheProgramWithAMessage) {
  const hdsm::test::DeathTestStyle style("threadsafe");
  // Two ranks (with one, every page is private to it and writable, so nothing would be caught).
  EXPECT_DEATH(run_ranks(2, options(),
                         [](Node& node) {
                           int* a = cl::alloc<int>(16);
                           if (node.rank() == 0) a[0] = 1;
                           cl::sync();
                         }),
               "host code wrote global memory");
}

// A kernel that reads past its allocation into memory no allocation holds: the message names the
// kernel as well as the address (before, the address alone).
TEST(ClusterDeathTest, AKernelsStrayAccessNamesTheKernel) {
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_DEATH(run_ranks(2, options(),
                         [](Node&) {
                           int* a = cl::alloc<int>(16);
                           const auto stray = hdsm::per_thread("stray", [](const Thread&, int* p) {
                             volatile int* far = p + (std::size_t{8} << 20);  // 32 MiB on: not allocated
                             (void)*far;
                           });
                           cl::launch(stray, Launch{Dim3{1}, Dim3{1}, 0}, a);
                         }),
               "access to global memory that is not allocated \\(address 0x[0-9a-f]+, in kernel 'stray'\\)");
}

// A child of fork() has the rank's memory map but neither its threads nor its place among the ranks:
// its calls are refused (before, a launch in the child waited for ranks that never came).
TEST(ClusterDeathTest, AChildOfForkIsNoRank) {
  const hdsm::test::DeathTestStyle style("fast");  // a plain fork() of the rank's thread
  run_ranks(2, options(), [](Node& node) {
    int* a = cl::alloc<int>(16);
    if (node.rank() == 0) {
      EXPECT_EXIT(
          {
            try {
              cl::launch(fill_kernel(), Launch{Dim3{1}, Dim3{16}, 0}, a, 16u, 0);
            } catch (const hdsm::Unsupported& e) {
              std::fputs(e.what(), stderr);
              std::_Exit(0);
            }
            std::_Exit(1);
          },
          ::testing::ExitedWithCode(0), "a child of fork\\(\\) is no rank");
    }
    cl::free(a);
  });
}

TEST(ClusterDeathTest, HostThreadsTouchingGlobalMemoryDuringAKernelEndTheProgram) {
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_DEATH(run_ranks(2, options(),
                         [](Node& node) {
                           int* a = cl::alloc<int>(1024);
                           std::atomic<bool> running{false};
                           std::thread host;
                           if (node.rank() == 0)
                             host = std::thread([&] {
                               while (!running.load()) std::this_thread::yield();
                               a[0] = 1;  // while the kernel runs
                             });
                           const auto wait =
                               hdsm::per_thread("waits", [](const Thread&, std::atomic<bool>* flag) {
                                 flag->store(true);
                                 std::this_thread::sleep_for(std::chrono::seconds(5));
                               });
                           cl::launch(wait, Launch{Dim3{2}, Dim3{1}, 0}, &running);
                           if (host.joinable()) host.join();
                         }),
               "a host thread touched global memory while a kernel runs");
}

TEST(Cluster, CollectivesInsideAKernelFailTheLaunchByName) {
  std::atomic<int> named{0};
  run_ranks(2, options(), [&](Node&) {
    int* a = cl::alloc<int>(1024);
    const auto frees = hdsm::per_thread("frees", [](const Thread& t, int* p) {
      if (t.idx.x == 0) cl::free(p);
    });
    const auto allocates = hdsm::per_thread("allocates", [](const Thread& t, std::uint32_t) {
      if (t.idx.x == 0) (void)cl::alloc<int>(16);
    });
    try {
      cl::launch(frees, Launch{Dim3{2}, Dim3{1}, 0}, a);
      ADD_FAILURE() << "cluster::free inside a kernel did not fail";
    } catch (const hdsm::Error& e) {
      EXPECT_NE(std::string(e.what()).find("cluster::free while a kernel runs"), std::string::npos)
          << e.what();
    }
    try {
      cl::launch(allocates, Launch{Dim3{2}, Dim3{1}, 0}, std::uint32_t{0});
      ADD_FAILURE() << "cluster::alloc inside a kernel did not fail";
    } catch (const hdsm::Error& e) {
      EXPECT_NE(std::string(e.what()).find("cluster::alloc while a kernel runs"), std::string::npos)
          << e.what();
    }
    // The other calls are collective too: one made from a block, on one rank, left the others in
    // the kernel's boundary while it waited in its own collective (a hang, or MPI's truncation).
    const auto collective = hdsm::per_thread("collective", [](const Thread& t, int* p, int which) {
      if (t.idx.x != 0) return;
      int host[4] = {};
      switch (which) {
        case 0:
          cl::memcpy(host, p, sizeof host);
          break;
        case 1:
          cl::sync();
          break;
        case 2:
          (void)cl::constant(host, 4);
          break;
        default:
          cl::launch(fill_kernel(), Launch{Dim3{1}, Dim3{32}, 0}, p, 32u, 1);
      }
    });
    for (const auto& [which, call] : std::vector<std::pair<int, std::string>>{{0, "cluster::memcpy"},
                                                                              {1, "cluster::sync"},
                                                                              {2, "cluster::constant"},
                                                                              {3, "cluster::launch"}}) {
      try {
        cl::launch(collective, Launch{Dim3{1}, Dim3{1}, 0}, a, which);  // one block: one rank alone
        ADD_FAILURE() << call << " inside a kernel did not fail";
      } catch (const hdsm::Error& e) {
        // Both ranks name the call: the one that ran the block in its own error, the other in the
        // message that rank sent at the boundary, after the kernel and that rank.
        const std::string m = e.what();
        if (m.find(call + " while a kernel runs") != std::string::npos) ++named;
        EXPECT_NE(m.find("kernel 'collective' failed on rank "), std::string::npos) << m;
      }
    }
    // The allocation is whole: written and freed between launches as usual.
    cl::launch(fill_kernel(), Launch{Dim3{1}, Dim3{32}, 0}, a, 1024u, 3);
    EXPECT_EQ(read_all(a, 1024)[5], 3);
    cl::free(a);
  });
  EXPECT_EQ(named.load(), 8);  // each call, named on both ranks
}

// A rank makes its collective calls one at a time: a second host thread's call while the first is
// in one is refused, naming both (before, the two paired with the other ranks' calls in whatever order
// they reached MPI: a kernel's writes taken for the host's, arguments compared against another call).
// One after the other, from any thread, they are fine.
TEST(Cluster, TwoHostThreadsOfARankInCallsAtOnceAreRefused) {
  std::atomic<bool> refused{false};
  run_ranks(2, options(), [&](Node& node) {
    if (node.rank() == 1) {
      while (!refused.load()) std::this_thread::yield();  // rank 0's first thread waits in its sync
      cl::sync();
      return;
    }
    std::thread second([&] {
      cl::detail::bind_thread(&node);
      while (!node.in_host_call()) std::this_thread::yield();
      try {
        (void)cl::alloc<int>(16);
        ADD_FAILURE() << "a second thread's call went through";
      } catch (const hdsm::InvalidArgument& e) {
        EXPECT_STREQ(
            e.what(),
            "cluster::alloc on rank 0 while another host thread of the rank is in cluster::sync: the "
            "cluster's calls are collective, and a rank makes them one at a time, from one thread at a "
            "time");
      }
      refused = true;
      cl::detail::bind_thread(nullptr);
    });
    cl::sync();
    second.join();
  });
  // The same while the first thread's kernel runs: named as another thread's call, not as a call
  // from a block.
  std::atomic<bool> go{false};
  run_ranks(2, options(), [&](Node& node) {
    int* a = cl::alloc<int>(64);
    const auto waits = hdsm::per_thread("waits", [](const Thread&, int* p, std::atomic<bool>* gate) {
      while (!gate->load()) std::this_thread::yield();
      p[0] = 1;
    });
    std::thread second;
    if (node.rank() == 0)
      second = std::thread([&] {
        cl::detail::bind_thread(&node);
        while (!node.in_host_call()) std::this_thread::yield();
        try {
          cl::free(a);
          ADD_FAILURE() << "a second thread's free went through during a kernel";
        } catch (const hdsm::InvalidArgument& e) {
          EXPECT_NE(
              std::string(e.what()).find(
                  "cluster::free on rank 0 while another host thread of the rank is in cluster::launch"),
              std::string::npos)
              << e.what();
        }
        go = true;
        cl::detail::bind_thread(nullptr);
      });
    cl::launch(waits, Launch{Dim3{2}, Dim3{1}, 0}, a, &go);
    if (second.joinable()) second.join();
    cl::free(a);
  });
  // One after the other from two threads of each rank.
  run_ranks(2, options(), [&](Node& node) {
    int* a = nullptr;
    std::thread([&] {
      cl::detail::bind_thread(&node);
      a = cl::alloc<int>(256);
      cl::detail::bind_thread(nullptr);
    }).join();
    cl::launch(fill_kernel(), Launch{Dim3{1}, Dim3{32}, 0}, a, 256u, 4);
    EXPECT_EQ(read_all(a, 256)[255], 4);
    cl::free(a);
  });
}

TEST(Cluster, ConstantMemoryIsRankZerosValuesOnEveryRank) {
  run_ranks(3, options(), [&](Node& node) {
    std::vector<double> mine(100, static_cast<double>(node.rank()) + 0.5);
    const cl::Constant<double> c = cl::constant(mine.data(), mine.size());
    ASSERT_EQ(c.size(), 100u);
    for (std::size_t i = 0; i < c.size(); ++i) ASSERT_EQ(c[i], 0.5) << "rank " << node.rank();
    // Kernels take it as a plain pointer.
    double* out = cl::alloc<double>(100);
    const auto copy = hdsm::per_thread("copy_constant", [](const Thread& t, const double* from, double* to) {
      to[t.global_x()] = from[t.global_x()] * 2;
    });
    cl::launch(copy, Launch{Dim3{4}, Dim3{25}, 0}, c.data(), out);
    std::vector<double> host(100);
    cl::memcpy(host.data(), out, 100 * sizeof(double));
    EXPECT_EQ(host[99], 1.0);
    cl::free(out);
  });
}

// A rank that could not allocate a constant's values (Constant passes no buffer then) fails the
// broadcast on every rank instead of leaving the others in it; the next collective works.
TEST(Cluster, AConstantOneRankCannotHoldFailsOnEveryRank) {
  run_ranks(3, options(), [&](Node& node) {
    std::vector<double> mine(100, 1.5);
    try {
      cl::replicate(node.rank() == 1 ? nullptr : mine.data(), mine.size() * sizeof(double));
      ADD_FAILURE() << "rank " << node.rank() << ": a broadcast with no buffer on rank 1 did not fail";
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("buffers for a constant"), std::string::npos) << e.what();
    }
    const cl::Constant<double> c = cl::constant(mine.data(), mine.size());
    EXPECT_EQ(c[99], 1.5);
    // Rank 0's values from a null pointer: InvalidArgument on every rank (it crashed in memcpy).
    const double* none = nullptr;
    try {
      (void)cl::constant(node.rank() == 0 ? none : mine.data(), mine.size());
      ADD_FAILURE() << "rank " << node.rank() << ": a constant from a null pointer was made";
    } catch (const hdsm::InvalidArgument& e) {
      if (node.rank() == 0) {
        EXPECT_NE(
            std::string(e.what()).find("cluster::constant of 100 elements from a null pointer on rank 0"),
            std::string::npos)
            << e.what();
      }
    }
    EXPECT_EQ(cl::constant(mine.data(), mine.size())[0], 1.5);
  });
}

TEST(Cluster, WeightedDistributionRunsEveryBlockOnce) {
  cl::Options o = options();
  o.distribution = cl::Distribution::weighted;
  run_ranks(3, o, [&](Node& node) {
    constexpr std::uint32_t blocks = 30, per_block = 1024;
    int* a = cl::alloc<int>(blocks * per_block);
    cl::launch(fill_kernel(), Launch{Dim3{blocks}, Dim3{32}, 0}, a, per_block, 9);
    const std::vector<int> got = read_all(a, blocks * per_block);
    for (std::uint32_t i = 0; i < blocks * per_block; i += 97)
      ASSERT_EQ(got[i], 9 + static_cast<int>(i / per_block));
    EXPECT_GT(node.stats().kernels, 0u);
    cl::free(a);
  });
}

// From many pages in use on, the writeVector goes in two steps: a flag for each block of pages,
// then the words of the flagged blocks alone. Two pages written among 1024 cost two blocks' words.
TEST(Cluster, AWriteVectorOfManyPagesSendsTheBlocksInUse) {
  for (const bool steps : {false, true})
    run_ranks(2, options(), [&](Node& node) {
      if (steps) node.set_write_vector_steps(0, 64);
      constexpr std::size_t kInts = 1024 * 1024;  // 1024 pages
      int* a = cl::alloc<int>(kInts);
      ASSERT_EQ(node.pages_in_use(), 1024u);
      cl::reset_stats();
      const std::uint32_t first = 5, last = 700 * 1024 + 3;  // pages 0 and 700
      cl::launch(poke_kernel(), Launch{Dim3{2}, Dim3{1}, 0}, a, first, last);
      const cl::Stats s = cl::stats();
      // Dense: a word a page and two. In steps: 16 flags and two, then two blocks of 64 words.
      EXPECT_EQ(s.vector_bytes, steps ? (16 + 2 + 2 * 64) * 4 : (1024 + 2) * 4) << "rank " << node.rank();
      const std::vector<int> got = read_all(a, kInts);
      EXPECT_EQ(got[first], 1);
      EXPECT_EQ(got[last], 2);
      EXPECT_EQ(std::count(got.begin(), got.end(), 0), static_cast<std::ptrdiff_t>(kInts - 2));
      // A kernel that writes nothing: the flags alone.
      cl::reset_stats();
      const auto nothing = hdsm::per_thread("write_nothing", [](const Thread&, int*) {});
      cl::launch(nothing, Launch{Dim3{2}, Dim3{1}, 0}, a);
      EXPECT_EQ(cl::stats().vector_bytes, steps ? (16 + 2) * 4 : (1024 + 2) * 4);
      cl::free(a);
    });
}

TEST(ClusterModel, MatchesPlainMemory) {
  const hdsm::test::ModelRun run(0xC1u, 40);
  // Lazy thresholds: every boundary lazy; 6 pages of 17 (sparse steps eager, dense ones lazy); never.
  // With private pages and with the seed's protocol (every page shared). One rank has no choices.
  for (const std::uint64_t lazy : {std::uint64_t{0}, std::uint64_t{6}, std::uint64_t{1} << 40})
    for (const bool private_pages : {true, false})
      for (const int ranks : {1, 2, 3}) {
        if (ranks == 1 && (lazy != 6 || !private_pages)) continue;
        // The writeVector in two steps too, in blocks of 4 of the 17 pages, where there are choices.
        for (const bool steps : {false, true}) {
          if (steps && (ranks == 1 || lazy != 6)) continue;
          run_ranks(ranks, options(lazy, 2, private_pages), [&](Node& node) {
            if (steps) node.set_write_vector_steps(0, 4);
            const std::string error = hdsm::test::cluster_model::run(
                run.seed() + static_cast<std::uint64_t>(ranks), run.iterations(), 17 * 1024 - 100, 1024);
            EXPECT_EQ(error, "") << ranks << " ranks, lazy above " << lazy << " pages, "
                                 << (private_pages ? "private pages" : "every page shared")
                                 << (steps ? ", the writeVector in two steps" : "");
          });
        }
      }
}

}  // namespace
