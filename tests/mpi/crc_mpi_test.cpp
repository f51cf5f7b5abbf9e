// hdsm::crc on MPI ranks (rank 0 the home, the others workers), under mpirun with 1, 2 and 3 ranks:
// the same protocol as on threads, with the pages in messages and the read-only and single-writer
// pages moved by one-sided gets and puts. One rank: the runtime refuses (it needs a worker). The
// randomized model test runs here too, and the applications against their references.
#include "apps/crc_apps.hpp"
#include "crc/model_program.hpp"
#include "support/model_run.hpp"

#include <hdsm/crc.hpp>
#include <hdsm/error.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

namespace crc = hdsm::crc;

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

crc::Options mpi_options(std::size_t page = 1024, std::size_t local_store = 16 << 10) {
  crc::Options o;
  o.transport = crc::Transport::mpi;
  o.page_size = page;
  o.local_store = local_store;
  o.shared_bytes = 16 << 20;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

class CrcMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (world_size() < 2) GTEST_SKIP() << "crc over MPI needs a home and a worker: 2 or more ranks";
  }
};

TEST(CrcMpiOneRank, NeedsAWorker) {
  if (world_size() != 1) GTEST_SKIP() << "for a job of one rank";
  try {
    crc::Runtime rt(mpi_options());
    FAIL() << "a runtime of one rank was made";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 is the home"), std::string::npos) << e.what();
  }
}

TEST_F(CrcMpi, WorkersShareTheirWritesThroughTheHome) {
  crc::Runtime rt(mpi_options(256));
  EXPECT_EQ(rt.workers(), world_size() - 1);
  const std::size_t n = 5000;
  int* a = rt.alloc<int>(n);
  long* sums = rt.alloc<long>(64);
  if (rt.is_home())
    for (std::size_t i = 0; i < n; ++i) a[i] = -1;
  rt.run([&] {
    const auto [lo, hi] = crc::share(n);
    for (std::size_t i = lo; i < hi; ++i) crc::write(&a[i], static_cast<int>(i) * 2);
    crc::barrier();
    long sum = 0;
    for (std::size_t i = 0; i < n; ++i) sum += crc::read(&a[i]);
    crc::write(&sums[crc::worker_id()], sum);
  });
  if (rt.is_home()) {
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(a[i], static_cast<int>(i) * 2) << i;
    for (int w = 0; w < rt.workers(); ++w) EXPECT_EQ(sums[w], static_cast<long>(n * (n - 1))) << w;
    const crc::Stats s = rt.stats();
    EXPECT_EQ(s.regions, 1u);
    EXPECT_EQ(s.barriers, static_cast<std::uint64_t>(rt.workers()));
    EXPECT_GT(s.messages, 0u);
  }
}

// A runtime is made (its communicator is a collective's) while a receive the program posted before
// waits for a message whose sender cannot come until that receive matched it (a synchronous send).
TEST_F(CrcMpi, ARuntimeIsMadeWhileAReceiveWaitsForItsSender) {
  int rank = 0, got = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Request r = MPI_REQUEST_NULL;
  if (rank == 0) {
    ASSERT_EQ(MPI_Irecv(&got, 1, MPI_INT, 1, 77, MPI_COMM_WORLD, &r), MPI_SUCCESS);
  } else if (rank == 1) {
    ASSERT_EQ(MPI_Ssend(&rank, 1, MPI_INT, 0, 77, MPI_COMM_WORLD), MPI_SUCCESS);
  }
  crc::Runtime rt(mpi_options());
  EXPECT_EQ(rt.workers(), world_size() - 1);
  if (rank == 0) {
    ASSERT_EQ(MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
    EXPECT_EQ(got, 1);
  }
}

TEST_F(CrcMpi, LocksCountEveryIncrementAndVariantsUseOneSidedCopies) {
  crc::Runtime rt(mpi_options());
  auto* counter = rt.alloc<long>(1);
  const std::size_t n = 4096;
  auto* in = rt.alloc<double>(n);
  auto* out = rt.alloc<double>(n);
  if (rt.is_home())
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<double>(i);
  rt.run([&] {
    for (int k = 0; k < 50; ++k) {
      crc::lock(2);
      crc::write(counter, crc::read(counter) + 1);
      crc::unlock(2);
    }
    const auto [lo, hi] = crc::share(n, rt.page_size() / sizeof(double));
    for (std::size_t i = lo; i < hi; ++i) crc::write_single(&out[i], 3 * crc::read_only(&in[i]));
  });
  if (rt.is_home()) {
    EXPECT_EQ(*counter, 50L * rt.workers());
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 3.0 * static_cast<double>(i)) << i;
    EXPECT_GT(rt.stats().direct_gets, 0u);
    EXPECT_GT(rt.stats().direct_puts, 0u);
  }
}

// One-sided gets bypass the home: a worker must not start reading before the home finished what it
// stored into the shared space before the region, nor the home read before the workers' puts landed.
TEST_F(CrcMpi, OneSidedCopiesSeeWhatTheHomeStoredBeforeTheRegion) {
  crc::Runtime rt(mpi_options());
  const std::size_t n = 8192;
  auto* in = rt.alloc<double>(n);
  auto* out = rt.alloc<double>(n);
  for (int round = 0; round < 3; ++round) {
    if (rt.is_home()) {
      // The workers are already on their way into the region: a slow initialization.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<double>(i + round);
    }
    rt.run([&] {
      const auto [lo, hi] = crc::share(n, rt.page_size() / sizeof(double));
      for (std::size_t i = lo; i < hi;) {
        const crc::Local<const double> x = crc::read_only_local(&in[i]);
        const crc::Local<double> y = crc::overwrite_local(&out[i]);
        const std::size_t m = std::min({x.count, y.count, hi - i});
        for (std::size_t k = 0; k < m; ++k) y.data[k] = 2 * x.data[k];
        i += m;
      }
    });
    // Counted, not asserted: every rank must go on to the next region together.
    std::size_t wrong = 0, first = n;
    if (rt.is_home())
      for (std::size_t i = 0; i < n; ++i)
        if (out[i] != 2.0 * static_cast<double>(i + round)) {
          first = std::min(first, i);
          ++wrong;
        }
    EXPECT_EQ(wrong, 0u) << "round " << round << ", first wrong item " << first;
  }
}

// The home (rank 0) runs the task too, as worker workers() of workers() + 1, in place in its own
// memory; the workers' shares shrink to make room for it.
TEST_F(CrcMpi, TheHomeRunsTheTaskTooInARegionThatNeedsNoServicing) {
  crc::Runtime rt(mpi_options());
  const std::size_t n = 4 * 4096;
  auto* in = rt.alloc<double>(n);
  auto* out = rt.alloc<double>(n);
  auto* by = rt.alloc<std::int32_t>(n);
  if (rt.is_home())
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<double>(i);
  int count = 0;
  rt.run_with_home([&] {
    count = crc::worker_count();
    const auto [lo, hi] = crc::share(n, rt.page_size() / sizeof(double));
    for (std::size_t i = lo; i < hi; ++i) {
      crc::write_single(&out[i], 2 * crc::read_only(&in[i]));
      crc::write_single(&by[i], static_cast<std::int32_t>(crc::worker_id()));
    }
  });
  EXPECT_EQ(count, rt.workers() + 1);
  if (rt.is_home()) {
    std::size_t wrong = 0, homes = 0;
    for (std::size_t i = 0; i < n; ++i) {
      wrong += out[i] != 2.0 * static_cast<double>(i) ? 1 : 0;
      homes += by[i] == rt.workers() ? 1 : 0;
    }
    EXPECT_EQ(wrong, 0u);
    EXPECT_GT(homes, 0u);  // the home's share was the home's
    EXPECT_EQ(rt.stats().write_faults + rt.stats().read_misses, 0u);
  }
  // A plain region afterwards has the workers alone again.
  rt.run([&] { count = crc::worker_count(); });
  if (!rt.is_home()) {
    EXPECT_EQ(count, rt.workers());
  }
}

// The home's own task error reaches every rank as the same KernelFailure, whatever it threw (before,
// rank 0 got the original and the others a KernelFailure; a throw of no std::exception escaped on
// rank 0 before the ranks heard of it, and they waited for good).
// Options every rank must share, different on one rank, stop every rank with the same error
// (before, the workers sized the space their own way).
TEST_F(CrcMpi, OptionsTheRanksMustShareAreComparedFirst) {
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  // The message names the option that differs and its knob (before: "shared_bytes or page_size").
  for (const bool space : {true, false}) {
    crc::Options o = mpi_options();
    if (rank == ranks - 1) (space ? o.shared_bytes : o.page_size) *= 2;
    try {
      crc::Runtime rt(o);
      ADD_FAILURE() << "a runtime was made on rank " << rank;
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(space ? "Options::shared_bytes (HDSM_CRC_SHARED"
                                                 : "Options::page_size (HDSM_CRC_PAGE_SIZE"),
                std::string::npos)
          << e.what();
    }
  }
  crc::Runtime rt(mpi_options());  // the ranks are in step
  rt.run([] {});
}

// What a rank checks alone (here the last rank's local store is smaller than a page) fails on that
// rank with its error and on every other with one naming it, at the setup every rank enters: before,
// that rank threw before the engine's first collective and the others waited in it.
TEST_F(CrcMpi, AnOptionOneRankGetsWrongFailsEveryRank) {
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  crc::Options o = mpi_options();
  if (rank == ranks - 1) o.local_store = 512;  // below one 1 KiB page
  try {
    crc::Runtime rt(o);
    ADD_FAILURE() << "a runtime was made on rank " << rank;
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_EQ(rank, ranks - 1) << e.what();
    EXPECT_NE(std::string(e.what()).find("holds no page of 1024 B"), std::string::npos) << e.what();
  } catch (const hdsm::Error& e) {
    EXPECT_NE(rank, ranks - 1) << e.what();
    EXPECT_NE(std::string(e.what()).find(fmt::format("rank {} could not set up", ranks - 1)),
              std::string::npos)
        << e.what();
  }
  crc::Runtime rt(mpi_options());  // the ranks are in step
  rt.run([] {});
}

// Allocation is collective: ranks that ask for different sizes are refused, every one of them,
// before any pointer is handed out (before, each got the same pointer to blocks of its own size).
TEST_F(CrcMpi, AllocationsOfDifferentSizesAreRefusedOnEveryRank) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  crc::Runtime rt(mpi_options());
  try {
    (void)rt.alloc<int>(rank == 1 ? 100000 : 1000);
    ADD_FAILURE() << "allocated on rank " << rank;
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the ranks asked for different sizes"), std::string::npos)
        << e.what();
  }
  int* a = rt.alloc<int>(1000);  // the ranks are in step
  rt.run([&] {
    if (crc::worker_id() == 0) crc::write(&a[7], 7);
  });
  if (rt.is_home()) {
    EXPECT_EQ(a[7], 7);
  }
}

// Ranks that diverged (one calls run while the others allocate, one allocates 0 bytes) are refused on
// every rank instead of their collectives matching one another and hanging later.
TEST_F(CrcMpi, RanksInDifferentCollectivesAreRefused) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  crc::Runtime rt(mpi_options());
  try {
    if (rank == 1)
      rt.run([] {});
    else
      (void)rt.alloc<int>(16);
    ADD_FAILURE() << "rank " << rank << " went on";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the ranks called different collectives (some allocate, some run)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)rt.allocate(rank == 1 ? 0 : 64), hdsm::InvalidArgument);
  rt.run([] {});  // the ranks are in step
}

// A rank that destroys its runtime while another is in a call: before, the window's free met the
// call's allreduce.
TEST_F(CrcMpi, ARankThatEndsItsRuntimeWhileAnotherIsInACallFailsThatCall) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string what;
  {
    crc::Runtime rt(mpi_options());
    if (rank == 0) {
      try {
        (void)rt.alloc<int>(16);
      } catch (const hdsm::InvalidArgument& e) {
        what = e.what();
      }
    }
  }
  if (rank == 0) {
    EXPECT_NE(what.find("called different collectives (some allocate, some the runtime's end)"),
              std::string::npos)
        << what;
  }
}

// A task number one worker rank did not define fails the region on every rank (before, that rank
// threw before the region's collective and the others waited in it).
TEST_F(CrcMpi, ATaskNumberOneRankDidNotDefineFailsEveryRank) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  crc::Runtime rt(mpi_options());
  if (rank != 1) rt.define(7, [] {});
  try {
    rt.run(7);
    ADD_FAILURE() << "the region ran on rank " << rank;
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("crc worker 0: crc::Runtime::run(7): no task defined"),
              std::string::npos)
        << e.what();
  }
  rt.run([] {});  // the ranks are in step
}

// run on some ranks and run_with_home on others: the workers would count the home as one of them
// where it does not work, and shares would overlap. Refused on every rank before the region starts.
TEST_F(CrcMpi, RanksThatMixRunAndRunWithHomeAreRefused) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  crc::Runtime rt(mpi_options());
  bool ran = false;
  try {
    if (rank == 0)
      rt.run_with_home([&] { ran = true; });
    else
      rt.run([&] { ran = true; });
    ADD_FAILURE() << "the region ran on rank " << rank;
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("some ranks called run and others run_with_home"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(ran);
  rt.run([] {});  // the ranks are in step
}

// free is collective: a rank that freed alone would go on using what the home hands out again.
TEST_F(CrcMpi, RanksThatFreeDifferentPointersAreRefused) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  crc::Runtime rt(mpi_options());
  int* a = rt.alloc<int>(1024);
  int* b = rt.alloc<int>(1024);
  try {
    rt.free(rank == 1 ? b : a);
    ADD_FAILURE() << "rank " << rank << " freed alone";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the ranks freed different pointers"), std::string::npos)
        << e.what();
  }
  try {
    if (rank == 1)
      rt.free(a);
    else
      rt.run([] {});
    ADD_FAILURE() << "rank " << rank << " went on";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the ranks called different collectives"), std::string::npos)
        << e.what();
  }
  // Every rank frees a host pointer of its own (at a different address on each): no allocation,
  // said on every rank (before, "the ranks freed different pointers").
  int local = 0;
  try {
    rt.free(&local);
    ADD_FAILURE() << "rank " << rank << " freed a host pointer";
  } catch (const hdsm::InvalidPointer& e) {
    EXPECT_NE(std::string(e.what()).find("not an allocation of this shared space"), std::string::npos)
        << e.what();
  }
  // Null on every rank is nothing, agreed; null on one rank only is a different pointer.
  rt.free(nullptr);
  try {
    rt.free(rank == 1 ? nullptr : b);
    ADD_FAILURE() << "rank " << rank << " freed alone";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the ranks freed different pointers"), std::string::npos)
        << e.what();
  }
  // Both are still allocated everywhere: used, then freed together.
  rt.run([&] {
    if (crc::worker_id() == 0) crc::write(a + 5, 7);
  });
  if (rt.is_home()) {
    EXPECT_EQ(a[5], 7);
  }
  rt.free(a);
  rt.free(b);
}

// A region whose ranks set different page sizes is refused on every rank, before it starts.
TEST_F(CrcMpi, ARegionWhoseRanksSetDifferentPageSizesIsRefused) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  crc::Runtime rt(mpi_options());
  rt.page_size(rank == 1 ? 512 : 1024);
  try {
    rt.run([] {});
    ADD_FAILURE() << "the region ran on rank " << rank;
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("page sizes from 512 B to 1024 B"), std::string::npos) << e.what();
  }
  rt.page_size(1024);
  rt.run([] {});  // the ranks are in step
}

TEST_F(CrcMpi, TheHomesTaskErrorReachesEveryRankAsTheSameKernelFailure) {
  crc::Runtime rt(mpi_options());
  for (const bool standard : {true, false}) {
    try {
      rt.run_with_home([&] {
        if (crc::worker_id() == rt.workers()) {
          if (standard) throw std::runtime_error("home says no");
          throw 42;
        }
      });
      FAIL() << "no error";
    } catch (const hdsm::KernelFailure& e) {
      EXPECT_NE(
          std::string(e.what()).find(standard ? "the task threw: home says no"
                                              : "the task threw: an exception that is not a std::exception"),
          std::string::npos)
          << e.what();
      // The home's own error keeps the original nested (the others rebuild the class from its code).
      if (rt.is_home()) {
        const auto* nested = dynamic_cast<const std::nested_exception*>(&e);
        ASSERT_NE(nested, nullptr) << "rank 0 lost the original";
        if (standard) {
          try {
            nested->rethrow_nested();
          } catch (const std::runtime_error& original) {
            EXPECT_STREQ(original.what(), "home says no");
          }
        }
      }
    }
  }
  rt.run([] {});  // the ranks are in step
}

TEST_F(CrcMpi, AnAccessOfTheHomesThatNeedsServingIsUnsupported) {
  crc::Runtime rt(mpi_options());
  int* a = rt.alloc<int>(16);
  try {
    rt.run_with_home([&] {
      if (crc::worker_id() == rt.workers()) crc::write(&a[0], 1);  // a write fault: needs the home
    });
    FAIL() << "no error";
  } catch (const hdsm::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("(the home, in run_with_home)"), std::string::npos) << e.what();
  }
  rt.run([&] {
    if (crc::worker_id() == 0) crc::write(&a[1], 2);
  });  // the runtime goes on
  if (rt.is_home()) {
    EXPECT_EQ(a[1], 2);
  }
}

TEST_F(CrcMpi, ErrorsReachEveryRankWithTheWorkersNumber) {
  crc::Runtime rt(mpi_options());
  int local = 0;
  try {
    rt.run([&] {
      if (crc::worker_id() == rt.workers() - 1) crc::write(&local, 1);
      crc::barrier();
    });
    FAIL() << "no error";
  } catch (const hdsm::InvalidPointer& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("crc worker {}", rt.workers() - 1)), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("outside the shared space"), std::string::npos) << e.what();
  }
  // The runtime goes on.
  int* a = rt.alloc<int>(4);
  rt.run([&] {
    if (crc::worker_id() == 0) crc::write(a, 9);
  });
  if (rt.is_home()) {
    EXPECT_EQ(*a, 9);
  }
}

// Every rank knows which parts of the space are allocated (alloc and free are collective): a worker's
// access to freed memory fails, and the error reaches every rank.
TEST_F(CrcMpi, AnAccessToFreedMemoryFailsOnEveryRank) {
  crc::Runtime rt(mpi_options());
  int* a = rt.alloc<int>(1024);
  int* b = rt.alloc<int>(1024);
  rt.free(a);
  try {
    rt.run([&] {
      if (crc::worker_id() == rt.workers() - 1) (void)crc::read(&a[1]);
    });
    FAIL() << "no error";
  } catch (const hdsm::InvalidPointer& e) {
    EXPECT_NE(std::string(e.what()).find("is in shared memory that is not allocated"), std::string::npos)
        << e.what();
  }
  rt.run([&] {
    if (crc::worker_id() == 0) crc::write(&b[2], 4);
  });
  if (rt.is_home()) {
    EXPECT_EQ(b[2], 4);
  }
}

TEST_F(CrcMpi, DataRaceFreeProgramsReadWhatPlainMemoryWould) {
  for (const std::size_t page : {std::size_t{128}, std::size_t{1024}, std::size_t{16384}}) {
    hdsm::test::ModelRun run(4242 + page, 6);
    std::mt19937_64 rng(run.seed());
    crc::Runtime rt(mpi_options(page, 8 * page));
    const std::vector<crc_model::Phase> program =
        crc_model::make_program(rng, rt.workers(), run.iterations(), page);
    auto* data = rt.alloc<std::uint8_t>(crc_model::kBytes);
    auto* counters = rt.alloc<std::uint64_t>(crc_model::kCounters);
    int divergences = 0;
    std::string first;
    rt.run([&] { divergences = crc_model::run_worker(program, data, counters, page, first); });
    int total = 0;
    MPI_Allreduce(&divergences, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(total, 0) << first << "\n" << run.where();
    if (rt.is_home()) {
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < crc_model::kBytes; ++i) wrong += data[i] != program.back().after[i] ? 1 : 0;
      EXPECT_EQ(wrong, 0u) << "page " << page << "; " << run.where();
      std::uint64_t increments = 0;
      for (int k = 0; k < crc_model::kCounters; ++k) increments += counters[k];
      EXPECT_EQ(increments, static_cast<std::uint64_t>(3 * rt.workers() * run.iterations()));
    }
  }
}

TEST_F(CrcMpi, ApplicationsMatchTheirReferences) {
  namespace capps = hdsm::apps::crc_apps;
  crc::Runtime rt(mpi_options(1024, 64 << 10));
  for (const capps::CrcApp& app : capps::crc_apps())
    for (const capps::Version v : {capps::Version::plain, capps::Version::optimized}) {
      const hdsm::apps::Output got = app.run(rt, v, hdsm::apps::Scale::test);
      if (rt.is_home()) {
        EXPECT_EQ(hdsm::apps::compare(got, app.run_reference(hdsm::apps::Scale::test), app.tolerance), "")
            << app.name << (v == capps::Version::plain ? " plain" : " optimized");
      }
    }
}

}  // namespace
