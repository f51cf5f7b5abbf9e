// The cluster runtime on MPI ranks (run under mpirun with 1, 2 and 3 ranks): global memory at one
// address on every rank, kernels whose ranks write disjoint parts of shared pages, lazy boundaries
// and the page server, several kernels with host copies between them, bad input, and the randomized
// model test. The applications run in cluster_apps_mpi_test.cpp.
#include "apps/cluster_target.hpp"
#include "cluster/model_program.hpp"
#include "cluster/node.hpp"
#include "os/arena.hpp"

#include <hdsm/cluster.hpp>
#include <hdsm/error.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <sys/mman.h>
#include <sys/resource.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace cl = hdsm::cluster;
using hdsm::Dim3;
using hdsm::Launch;
using hdsm::Thread;

cl::Options options(std::uint64_t lazy_pages = 1u << 30) {
  cl::Options o;
  o.space_bytes = std::size_t{1} << 30;
  o.threads = 1;  // ranks outnumber the cores under CI
  o.lazy_pages = lazy_pages;
  o.check_races = true;
  o.timeout = std::chrono::milliseconds(60000);
  return o;
}

const auto& interleave_kernel() {
  static const auto k = hdsm::per_thread("interleave", [](const Thread& t, int* a, std::uint32_t n, int v) {
    if (t.idx.x != 0) return;
    for (std::uint32_t i = t.block.x; i < n; i += t.grid_dim.x) a[i] = v + static_cast<int>(i);
  });
  return k;
}

const auto& add_kernel() {
  static const auto k =
      hdsm::per_thread("add_shifted", [](const Thread& t, const int* from, int* to, std::uint32_t n, int v) {
        const std::uint64_t i = t.global_x();
        if (i < n) to[i] = from[(i + n / 2) % n] + v;
      });
  return k;
}

TEST(ClusterMpi, GlobalMemoryIsAtOneAddressOnEveryRank) {
  cl::Session session(options());
  EXPECT_EQ(session.ranks(), [] {
    int n = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
  }());
  int* a = cl::alloc<int>(1000);
  double* b = cl::alloc<double>(5);
  const auto mine = reinterpret_cast<std::uint64_t>(a), mine_b = reinterpret_cast<std::uint64_t>(b);
  std::uint64_t lowest[2] = {mine, mine_b}, highest[2] = {mine, mine_b};
  MPI_Allreduce(MPI_IN_PLACE, lowest, 2, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, highest, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lowest[0], highest[0]);
  EXPECT_EQ(lowest[1], highest[1]);
  EXPECT_EQ(mine % 4096, 0u);
  cl::free(b);
  cl::free(a);
}

// Each rank reserves a different range where its own first choice would be (the top of its highest
// free range that is large enough): global memory goes where nothing is mapped on any rank.
TEST(ClusterMpi, GlobalMemoryAvoidsWhatAnyRankHasMapped) {
  int ranks = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  constexpr std::size_t kBlock = std::size_t{16} << 30;
  const std::vector<hdsm::os::AddressRange> free = hdsm::os::unmapped_ranges();
  const auto room = std::find_if(free.rbegin(), free.rend(), [&](const hdsm::os::AddressRange& r) {
    return r.end - r.begin >= kBlock * static_cast<std::uintptr_t>(ranks + 1);
  });
  ASSERT_NE(room, free.rend()) << "no free range is large enough for this test";
  const std::uintptr_t top = room->end & ~(std::uintptr_t{kBlock} - 1);
  const std::uintptr_t at = top - kBlock * static_cast<std::uintptr_t>(rank + 1);
  void* blocker = mmap(reinterpret_cast<void*>(at), kBlock, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(blocker, reinterpret_cast<void*>(at)) << std::strerror(errno);
  std::vector<std::uint64_t> blockers(static_cast<std::size_t>(ranks));
  const std::uint64_t mine = at;
  MPI_Allgather(&mine, 1, MPI_UINT64_T, blockers.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  {
    cl::Session session(options());
    int* a = cl::alloc<int>(16);
    const auto p = reinterpret_cast<std::uint64_t>(a);
    std::uint64_t lowest = p, highest = p;
    MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &highest, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(lowest, highest);
    for (const std::uint64_t b : blockers)
      EXPECT_FALSE(p >= b && p < b + kBlock) << "global memory in a blocked range";
    cl::free(a);
  }
  munmap(blocker, kBlock);
}

TEST(ClusterMpi, RanksWriteDisjointPartsOfSharedPages) {
  cl::Session session(options());
  constexpr std::uint32_t n = 10000;
  int* a = cl::alloc<int>(n);
  cl::reset_stats();
  cl::launch(interleave_kernel(), Launch{Dim3{7}, Dim3{16}, 0}, a, n, 3);
  std::vector<int> host(n);
  cl::memcpy(host.data(), a, n * sizeof(int));
  for (std::uint32_t i = 0; i < n; ++i)
    ASSERT_EQ(host[i], 3 + static_cast<int>(i)) << "rank " << session.rank();
  if (session.ranks() > 1) {
    EXPECT_GT(cl::stats().pages_multi_writer, 0u);
  }
  EXPECT_EQ(cl::stats().race_warnings, 0u);
  cl::free(a);
}

TEST(ClusterMpi, KernelsReadPagesInvalidatedByLazyBoundaries) {
  cl::Session session(options(/*lazy_pages=*/0));
  constexpr std::uint32_t n = 64 * 1024;
  int* a = cl::alloc<int>(n);
  int* b = cl::alloc<int>(n);
  const std::vector<int> zeros(n, 0);
  cl::memcpy(b, zeros.data(), n * sizeof(int));  // shared pages: written by one rank, read by others
  cl::launch(interleave_kernel(), Launch{Dim3{64}, Dim3{1}, 0}, a, n, 0);  // several writers a page
  cl::launch(add_kernel(), hdsm::cover(n), a, b, n, 1);                    // reads pages others wrote
  cl::launch(add_kernel(), hdsm::cover(n), b, a, n, 1);
  const cl::Stats s = cl::stats();
  if (session.ranks() > 1) {
    EXPECT_EQ(s.lazy_kernels, 3u);
    if (session.rank() != 0) {
      EXPECT_GT(s.pages_invalidated, 0u);
      EXPECT_GT(s.fetches, 0u);
    }
  }
  // Direct host reads fetch what is still invalid.
  for (std::uint32_t i = 0; i < n; i += 97)
    ASSERT_EQ(a[i], static_cast<int>(i) + 2) << "rank " << session.rank();
  cl::free(b);
  cl::free(a);
}

// The session talks on duplicates of MPI_COMM_WORLD: a wildcard receive the program keeps posted on
// MPI_COMM_WORLD through lazy boundaries and page fetches (point-to-point, to rank 0's server) takes
// only the program's own message, and the session's messages all reach the session.
TEST(ClusterMpi, AWildcardReceiveOnWorldTakesNoneOfTheSessionsMessages) {
  cl::Session session(options(/*lazy_pages=*/0));
  const int rank = session.rank(), ranks = session.ranks();
  int got = -1;
  MPI_Request request = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Irecv(&got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &request), MPI_SUCCESS);
  constexpr std::uint32_t n = 32 * 1024;
  int* a = cl::alloc<int>(n);
  int* b = cl::alloc<int>(n);
  const std::vector<int> zeros(n, 0);
  cl::memcpy(b, zeros.data(), n * sizeof(int));
  cl::launch(interleave_kernel(), Launch{Dim3{64}, Dim3{1}, 0}, a, n, 0);
  cl::launch(add_kernel(), hdsm::cover(n), a, b, n, 1);  // reads pages other ranks wrote: fetches
  std::vector<int> out(n);
  cl::memcpy(out.data(), b, n * sizeof(int));
  if (ranks > 1 && rank != 0) {
    EXPECT_GT(cl::stats().fetches, 0u);
  }
  int flag = 0;
  MPI_Status status;
  ASSERT_EQ(MPI_Test(&request, &flag, &status), MPI_SUCCESS);
  EXPECT_EQ(flag, 0) << "a message of the session's reached the program's receive";
  ASSERT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);  // no rank sends before every rank tested
  const int mine = 1000 + rank;  // each rank to the next: the receive takes the previous one's
  ASSERT_EQ(MPI_Send(&mine, 1, MPI_INT, (rank + 1) % ranks, 7, MPI_COMM_WORLD), MPI_SUCCESS);
  if (flag == 0) {
    ASSERT_EQ(MPI_Wait(&request, &status), MPI_SUCCESS);
  }
  EXPECT_EQ(got, 1000 + (rank + ranks - 1) % ranks);
  EXPECT_EQ(status.MPI_TAG, 7);
  for (std::uint32_t i = 0; i < n; ++i)
    ASSERT_EQ(out[i], static_cast<int>((i + n / 2) % n) + 1) << "rank " << rank << ", element " << i;
  cl::free(b);
  cl::free(a);
}

TEST(ClusterMpi, SeveralKernelsWithHostCopiesBetweenThem) {
  cl::Session session(options());
  constexpr std::uint32_t n = 20000;
  int* a = cl::alloc<int>(n);
  int* b = cl::alloc<int>(n);
  std::vector<int> host(n), model(n);
  std::iota(model.begin(), model.end(), 5);
  host = model;
  if (session.rank() != 0) std::fill(host.begin(), host.end(), 0);  // only rank 0's data counts
  cl::memcpy(a, host.data(), n * sizeof(int));
  for (int round = 0; round < 4; ++round) {
    cl::launch(add_kernel(), hdsm::cover(n, 128), a, b, n, round);
    std::vector<int> next(n);
    for (std::uint32_t i = 0; i < n; ++i) next[i] = model[(i + n / 2) % n] + round;
    cl::memcpy(host.data(), b, n * sizeof(int));
    ASSERT_EQ(host, next) << "round " << round << " rank " << session.rank();
    // The host changes a few elements and writes them back through rank 0.
    for (std::uint32_t i = 0; i < n; i += 1000) next[i] = -static_cast<int>(i);
    cl::memcpy(a, next.data(), n * sizeof(int));
    model = next;
  }
  cl::free(b);
  cl::free(a);
}

TEST(ClusterMpi, RandomizedModelMatchesPlainMemory) {
  const hdsm::test::ModelRun run(0xC2u, 30);
  for (const std::uint64_t lazy : {std::uint64_t{6}, std::uint64_t{1} << 30})
    for (const bool steps : {false, true}) {
      if (steps && lazy != 6) continue;
      cl::Session session(options(lazy));
      // The writeVector in two steps, in blocks of 4 of the 17 pages.
      if (steps) cl::detail::current().set_write_vector_steps(0, 4);
      EXPECT_EQ(hdsm::test::cluster_model::run(run.seed() + lazy, run.iterations(), 17 * 1024 - 100, 1024),
                "")
          << "lazy threshold " << lazy << (steps ? ", the writeVector in two steps" : "");
    }
}

TEST(ClusterMpi, BadInputFailsOnEveryRankWithoutHanging) {
  cl::Session session(options());
  if (session.ranks() > 1) {
    EXPECT_THROW(cl::alloc<int>(session.rank() == 0 ? 10 : 20), hdsm::InvalidArgument);
  }
  EXPECT_THROW(cl::alloc<char>(0), hdsm::InvalidArgument);
  int* a = cl::alloc<int>(64);
  EXPECT_THROW(cl::launch(interleave_kernel(), Launch{Dim3{1, 0}, Dim3{1}, 0}, a, 64u, 0),
               hdsm::InvalidArgument);
  // The rank through a host pointer: scalar arguments must be the same on every rank.
  const auto failing =
      hdsm::per_thread("fails_on_the_last_rank", [](const Thread&, const int* rank, int last) {
        if (*rank == last) throw std::runtime_error("bad block");
      });
  const int me = session.rank();
  try {
    cl::launch(failing, Launch{Dim3{4}, Dim3{1}, 0}, &me, session.ranks() - 1);
    ADD_FAILURE() << "no KernelFailure";
  } catch (const hdsm::KernelFailure& e) {
    EXPECT_NE(std::string(e.what()).find("failed on rank " + std::to_string(session.ranks() - 1)),
              std::string::npos)
        << e.what();
  }
  std::vector<int> host(4, session.rank());
  if (session.ranks() > 1) {
    EXPECT_THROW(cl::memcpy(a, host.data(), (session.rank() + 1) * sizeof(int)), hdsm::InvalidArgument);
    // Ranks in different calls: before, their reductions differed in size (MPI's truncation error on
    // some ranks) or a sync's barrier met an allreduce (a hang).
    for (const bool to_sync : {true, false}) {
      try {
        if (session.rank() == 0)
          to_sync ? cl::sync() : cl::memcpy(a, host.data(), sizeof(int));
        else
          (void)cl::alloc<int>(16);
        ADD_FAILURE() << "rank " << session.rank() << " went on";
      } catch (const hdsm::InvalidArgument& e) {
        EXPECT_NE(
            std::string(e.what()).find(to_sync ? "called different collectives (some alloc, some sync"
                                               : "called different collectives (some alloc, some memcpy"),
            std::string::npos)
            << e.what();
      }
    }
    cl::sync();  // in step again
  }
  cl::free(a);
}

// A rank that ends its session while another is in a call (rank 0 prints a result that only it
// copies out): before, the end's barrier met the call's allreduce and both waited for good.
TEST(ClusterMpi, ARankThatEndsItsSessionWhileAnotherIsInACallFailsThatCall) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  std::string what;
  {
    cl::Session session(options());
    int* a = cl::alloc<int>(64);
    std::vector<int> host(64);
    if (rank == 0) {
      try {
        cl::memcpy(host.data(), a, host.size() * sizeof(int), cl::Deliver::rank0);
      } catch (const hdsm::InvalidArgument& e) {
        what = e.what();
      }
    }
  }
  if (rank == 0) {
    EXPECT_NE(what.find("called different collectives (some memcpy, some the session's end"),
              std::string::npos)
        << what;
  }
}

// Every application of the seed's Table 2 against its reference, eager and lazy.
class ClusterApps : public ::testing::TestWithParam<std::string_view> {};

TEST_P(ClusterApps, MatchTheirReferences) {
  const hdsm::apps::GridApp& app = *hdsm::apps::find_grid_app(GetParam());
  const hdsm::apps::Output want = app.run_reference(hdsm::apps::Scale::test);
  for (const std::uint64_t lazy : {std::uint64_t{1} << 30, std::uint64_t{0}}) {
    cl::Session session(options(lazy));
    hdsm::apps::ClusterTarget target;
    const hdsm::apps::Output got = app.run(target, hdsm::apps::Scale::test);
    EXPECT_EQ(hdsm::apps::compare(got, want, app.tolerance), "")
        << app.name << " on rank " << session.rank() << " of " << session.ranks()
        << (lazy == 0 ? ", lazy" : ", eager");
  }
}

INSTANTIATE_TEST_SUITE_P(All, ClusterApps,
                         ::testing::Values("cp", "mri-fhd", "tpacf", "blackscholes", "scan", "mri-q"),
                         [](const auto& info) {
                           std::string name(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// A rank whose own setup fails after the ranks placed global memory, or whose options differ, stops
// every rank with an error (before, it threw alone and the others waited for it), and a session made
// after that works.
TEST(ClusterMpi, ARankThatCannotStartStopsEveryRank) {
  int ranks = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (ranks < 2) GTEST_SKIP() << "needs two ranks";
  for (const bool differ : {false, true}) {
    cl::Options o = options();
    if (rank == ranks - 1) {
      if (differ)
        o.lazy_pages = 7;
      else
        o.mappings = 3;  // refused after placement
    }
    try {
      cl::Session session(o);
      ADD_FAILURE() << "a session was made on rank " << rank;
    } catch (const hdsm::Error& e) {
      const std::string what = e.what();
      const std::string want = differ              ? "Options::lazy_pages"
                               : rank == ranks - 1 ? "HDSM_CLUSTER_MAPPINGS"
                                                   : "could not set up";
      EXPECT_NE(what.find(want), std::string::npos) << what;
    }
  }
  cl::Session session(options());
  int* a = cl::alloc<int>(16);
  std::vector<int> host(16, 3);
  // One rank passing a host pointer as the destination fails the copy on every rank.
  EXPECT_THROW(cl::memcpy(rank == ranks - 1 ? host.data() + 1 : a, host.data(), 4 * sizeof(int)),
               hdsm::InvalidArgument);
  cl::memcpy(a, host.data(), 16 * sizeof(int));
  cl::free(a);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST(ClusterMpi, TooLittleCommonAddressSpaceIsAnErrorOnEveryRank) {
  int ranks = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (ranks < 2) GTEST_SKIP() << "needs a rank with room and one without";
  // The last rank may map no more than 32 GiB of address space: a 64 GiB space cannot sit there.
  rlimit saved{};
  getrlimit(RLIMIT_AS, &saved);
  if (rank == ranks - 1) {
    rlimit low = saved;
    low.rlim_cur = static_cast<rlim_t>(32) << 30;
    setrlimit(RLIMIT_AS, &low);
  }
  cl::Options o = options();
  o.space_bytes = std::size_t{64} << 30;
  try {
    cl::Session session(o);
    ADD_FAILURE() << "a session was made";
  } catch (const hdsm::SystemError& e) {
    EXPECT_NE(std::string(e.what()).find("no range of 64 GiB is free at one address on all"),
              std::string::npos)
        << e.what();
    // Every rank names the rank that could not map it, and fails at once (no retries: only a
    // mapping in the way is worth choosing again for).
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(ranks - 1) + " could not map it"),
              std::string::npos)
        << e.what();
  }
  if (rank == ranks - 1) setrlimit(RLIMIT_AS, &saved);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  int worst = result;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
