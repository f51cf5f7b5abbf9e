// Shapes of whole MPI programs that a test inside one gtest process cannot take (they end MPI, or
// set a knob on one rank only), in one program that links the cluster, crc and libhdsm_mpi's
// interposition of MPI; run by ctest on two ranks, passing on the output:
//  - "cluster_finalize_first": MPI_Init; a cluster::Session in a local scope; MPI_Finalize inside
//    that scope, so the session's end comes after it (before, Open MPI aborted the job there; and
//    with libhdsm_mpi, whose MPI_Finalize took the page server's receive for the program's, it
//    waited 10 s and abandoned it);
//  - "crc_finalize_first": the same with a crc::Runtime over MPI;
//  - "crc_direct_access": a worker's task stores through a shared pointer, which ends the job with a
//    message naming crc::read and crc::write;
//  - "pending_receive_at_finalize": a receive nobody sends to, pending at MPI_Finalize, which
//    libhdsm_mpi's MPI_Finalize abandons after HDSM_MPI_FINALIZE_WAIT (before, it waited forever);
//  - "crc_space_beyond_shm": a crc shared space larger than /dev/shm's free room, which must not
//    hang in MPI_Win_allocate;
//  - "bad_knob_on_rank_1": rank 1 alone has a malformed HDSM_CLUSTER_PAGE_SIZE and catches the
//    error; every rank must throw, none wait (before, rank 0 waited in MPI_Init forever).
// Each rank prints "rank <r>: ok" or "rank <r>: caught: <message>".
#include <hdsm/cluster.hpp>
#include <hdsm/crc.hpp>
#include <hdsm/error.hpp>

#include <mpi.h>
#include <sys/statvfs.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

namespace {

int cluster_finalize_first() {
  namespace cl = hdsm::cluster;
  int rank = -1;
  {
    cl::Session session;
    rank = session.rank();
    int* a = cl::alloc<int>(4096);
    const auto k = hdsm::per_thread("fill", [](const hdsm::Thread& t, int* p) { p[t.global_x()] = 7; });
    cl::launch(k, hdsm::cover(4096), a);
    std::vector<int> host(4096);
    cl::memcpy(host.data(), a, host.size() * sizeof(int));
    for (const int v : host)
      if (v != 7) return std::fprintf(stderr, "rank %d: wrong data\n", rank), 1;
    MPI_Finalize();
    // The session still knows its rank; a call now is an error naming the session, not an abort of
    // the job (nor a null dereference).
    if (session.rank() != rank || session.ranks() != 2 || session.lazy_available())
      return std::fprintf(stderr, "rank %d: the session lost its rank\n", rank), 1;
    try {
      cl::sync();
      std::fprintf(stderr, "rank %d: a call after MPI_Finalize went through\n", rank);
      return 1;
    } catch (const hdsm::Error&) {
    }
  }
  std::fprintf(stderr, "rank %d: ok\n", rank);
  return 0;
}

// crc over MPI with a 1 MiB shared space.
hdsm::crc::Options crc_on_mpi() {
  hdsm::crc::Options o;
  o.transport = hdsm::crc::Transport::mpi;
  o.shared_bytes = 1 << 20;
  return o;
}

int crc_finalize_first() {
  namespace crc = hdsm::crc;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  {
    crc::Runtime rt(crc_on_mpi());
    int* a = rt.alloc<int>(1024);
    rt.run([&] {
      const auto [lo, hi] = crc::share(1024);
      for (std::size_t i = lo; i < hi; ++i) crc::write(&a[i], 5);
    });
    if (rt.is_home())
      for (int i = 0; i < 1024; ++i)
        if (a[i] != 5) return std::fprintf(stderr, "rank %d: wrong data\n", rank), 1;
    MPI_Finalize();
    try {
      rt.run([] {});
      std::fprintf(stderr, "rank %d: a region after MPI_Finalize ran\n", rank);
      return 1;
    } catch (const hdsm::InvalidArgument& e) {
      if (std::strstr(e.what(), "MPI_Finalize") == nullptr)
        return std::fprintf(stderr, "rank %d: %s\n", rank, e.what()), 1;
    }
  }
  std::fprintf(stderr, "rank %d: ok\n", rank);
  return 0;
}

// A crc shared space larger than /dev/shm has room for: Open MPI's shared-memory window cannot be
// made, which failed on rank 0 alone while the workers waited in MPI_Win_allocate for good. Now the
// window is not tried, and the pages go through the home (or, where the home cannot map the space
// either, every rank gets the error).
int crc_space_beyond_shm() {
  namespace crc = hdsm::crc;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  struct statvfs fs {};
  crc::Options o = crc_on_mpi();
  const std::size_t chunk = std::size_t{64} << 20;
  if (::statvfs("/dev/shm", &fs) == 0)
    o.shared_bytes = (static_cast<std::size_t>(fs.f_bavail) * fs.f_frsize / chunk + 4) * chunk;
  const char* outcome = "ok";
  try {
    crc::Runtime rt(o);
    int* a = rt.alloc<int>(1024);
    rt.run([&] {
      const auto [lo, hi] = crc::share(1024);
      for (std::size_t i = lo; i < hi; ++i) crc::write(&a[i], 7);
    });
    if (rt.is_home())
      for (int i = 0; i < 1024; ++i)
        if (a[i] != 7) outcome = "wrong data";
  } catch (const hdsm::Error& e) {
    std::fprintf(stderr, "rank %d: caught: %s\n", rank, e.what());
    outcome = nullptr;
  }
  if (outcome != nullptr) std::fprintf(stderr, "rank %d: %s\n", rank, outcome);
  MPI_Finalize();
  return 0;
}

// A task on a worker that dereferences a shared pointer (rank 0's address, nothing there) ends with
// a message saying to use crc::read and crc::write (before: "not in shared memory").
int crc_direct_access() {
  namespace crc = hdsm::crc;
  crc::Runtime rt(crc_on_mpi());
  int* a = rt.alloc<int>(1024);
  rt.run([&] {
    volatile int* direct = a;
    direct[crc::worker_id()] = 1;
  });
  std::fprintf(stderr, "the direct store went through\n");
  return 1;
}

// A receive that no rank sends to, left pending at MPI_Finalize (an erroneous program): libhdsm_mpi's
// MPI_Finalize gives up on it after 10 s with a message, instead of waiting forever.
int pending_receive_at_finalize() {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int value = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Irecv(&value, 1, MPI_INT, 1 - rank, 99, MPI_COMM_WORLD, &request);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  std::fprintf(stderr, "rank %d: ok\n", rank);
  return 0;
}

int bad_knob_on_rank_1() {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 1) setenv("HDSM_CLUSTER_PAGE_SIZE", "banana", 1);
  try {
    hdsm::cluster::Session session;
    std::fprintf(stderr, "rank %d: the session opened\n", rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: caught: %s\n", rank, e.what());
  }
  MPI_Finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "cluster_finalize_first") == 0) return cluster_finalize_first();
  if (std::strcmp(mode, "bad_knob_on_rank_1") == 0) return bad_knob_on_rank_1();
  if (std::strcmp(mode, "crc_finalize_first") == 0) return crc_finalize_first();
  if (std::strcmp(mode, "crc_direct_access") == 0) return crc_direct_access();
  if (std::strcmp(mode, "crc_space_beyond_shm") == 0) return crc_space_beyond_shm();
  if (std::strcmp(mode, "pending_receive_at_finalize") == 0) return pending_receive_at_finalize();
  std::fprintf(
      stderr,
      "usage: %s "
      "cluster_finalize_first|bad_knob_on_rank_1|crc_finalize_first|crc_direct_access|crc_space_beyond_shm|"
      "pending_receive_at_finalize\n",
      argv[0]);
  MPI_Finalize();
  return 2;
}
