// The cluster's transport between MPI ranks: collectives on a duplicate of MPI_COMM_WORLD, and page
// requests to rank 0's server thread on a second duplicate (so they never match a collective's
// messages). The session (session.cpp) initializes MPI and makes one of these. Every call is a PMPI_
// one, as the crc engine's: libhdsm_mpi's interposed MPI_ functions, in the same program, must not take
// the transport's own traffic for the program's (its MPI_Finalize would wait for the page server's
// pending receive), and an MPI profiler sees the program's calls, not the runtime's.
#include "cluster/mpi/mpi_transport.hpp"
#include "mpi/check.hpp"
#include "mpi/poll.hpp"
#include "os/process.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include <sched.h>
#include <time.h>

namespace hdsm::cluster::detail {
namespace {

constexpr int kRequestTag = 7201;
constexpr int kReplyTag = 7202;
constexpr std::size_t kChunk = std::size_t{1} << 30;  // MPI counts are ints: broadcast in chunks

constexpr mpi_detail::CallCheck check{"cluster over MPI"};

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
  }
  return MPI_SUM;
}

int checked_count(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw Unsupported(fmt::format("cluster over MPI: {} of {} elements is above MPI's int counts", what, n));
  return static_cast<int>(n);
}

// The counts and displacements of a gather or scatter of `sizes` bytes from or to each rank, which
// every rank computes from the same sizes: a total past MPI's int counts is refused by all of them
// together, never by the root alone while the others wait in the collective.
void layout(const std::vector<std::uint64_t>& sizes, std::vector<int>& counts, std::vector<int>& displs,
            const char* what) {
  std::uint64_t total = 0;
  for (const std::uint64_t s : sizes) total += s;
  if (total > static_cast<std::uint64_t>(INT_MAX))
    throw Unsupported(fmt::format(
        "cluster over MPI: {} of {} B in one kernel boundary is above MPI's int counts (2 GiB): write "
        "less global memory per kernel, or use fewer ranks per node's share",
        what, total));
  counts.clear();
  displs.clear();
  total = 0;
  for (const std::uint64_t s : sizes) {
    counts.push_back(static_cast<int>(s));
    displs.push_back(static_cast<int>(total));
    total += s;
  }
}

// Between two polls of a request that may take long (a page request, the last barrier): yield while
// it came recently, then sleep a little longer each time, up to 0.5 ms, so that a rank that waits
// long leaves its core to the others (a blocking MPI call polls the network without pause).
void pause_after(unsigned polls) {
  if (polls < 256) {
    ::sched_yield();
    return;
  }
  const long pause_ns = std::min(500'000L, 20'000L << std::min(5u, (polls - 256) / 16));
  const timespec pause{0, pause_ns};
  ::nanosleep(&pause, nullptr);
}

}  // namespace

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    default:
      return "MPI_THREAD_MULTIPLE";
  }
}

bool MpiTransport::may_call_mpi() const {
  if (level_ >= MPI_THREAD_SERIALIZED) return true;
  int main = 0;
  PMPI_Is_thread_main(&main);
  return main != 0;
}

void MpiTransport::on_mpi_thread(const char* call) const {
  if (!may_call_mpi())
    throw Unsupported(fmt::format(
        "cluster over MPI: {} from a thread that did not initialize MPI, which gives {}: every cluster "
        "call (the session, alloc, launch, memcpy, sync, free) must come from that thread, or MPI must be "
        "initialized with MPI_THREAD_SERIALIZED or more",
        call, thread_level_name(level_)));
}

MpiTransport::MpiTransport(MPI_Comm world, int thread_level, std::chrono::milliseconds timeout)
    : level_(thread_level), multiple_(thread_level >= MPI_THREAD_MULTIPLE), timeout_(timeout) {
  on_mpi_thread("a session");
  mpi_detail::duplicate(world, &comm_, check, "the cluster's collectives");
  mpi_detail::duplicate(world, &server_comm_, check, "the cluster's page requests");
  // Errors come back as codes, which become exceptions naming the call, instead of aborting.
  PMPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  PMPI_Comm_set_errhandler(server_comm_, MPI_ERRORS_RETURN);
  PMPI_Comm_rank(comm_, &rank_);
  PMPI_Comm_size(comm_, &ranks_);
}

MpiTransport::~MpiTransport() {
  if (server_.joinable()) {
    try {
      stop_serving();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hdsm cluster: stopping the page server: %s\n", e.what());
    }
  }
  if (!may_call_mpi()) {
    std::fprintf(
        stderr,
        "hdsm cluster: the session ends on a thread that did not initialize MPI, which gives %s: its "
        "two communicators are left to MPI_Finalize\n",
        thread_level_name(level_));
    return;
  }
  PMPI_Comm_free(&server_comm_);
  PMPI_Comm_free(&comm_);
}

// The reductions of a kernel's boundary, the first of which waits for the ranks whose blocks finish
// last: nonblocking and polled (mpi_detail::wait_within, which yields every few microseconds and
// sleeps after 20 ms), so that a rank that came early leaves its core to the threads of a rank that
// still computes (oversubscribed ranks, or a busy machine), where MPI's own blocking wait polls
// without end.
void MpiTransport::allreduce(std::span<std::uint32_t> values, ReduceOp op) {
  on_mpi_thread("an allreduce");
  MPI_Request request = MPI_REQUEST_NULL;
  check(PMPI_Iallreduce(MPI_IN_PLACE, values.data(), checked_count(values.size(), "an allreduce"),
                        MPI_UINT32_T, mpi_op(op), comm_, &request),
        "MPI_Iallreduce", [&] { return fmt::format("{} page counters", values.size()); });
  mpi_detail::wait_within(request, std::chrono::milliseconds::max(), check, "a reduction of page counters");
  count_sent(values.size_bytes());
}

void MpiTransport::allreduce(std::span<std::uint64_t> values, ReduceOp op) {
  on_mpi_thread("an allreduce");
  MPI_Request request = MPI_REQUEST_NULL;
  check(PMPI_Iallreduce(MPI_IN_PLACE, values.data(), checked_count(values.size(), "an allreduce"),
                        MPI_UINT64_T, mpi_op(op), comm_, &request),
        "MPI_Iallreduce", [&] { return fmt::format("{} values", values.size()); });
  mpi_detail::wait_within(request, std::chrono::milliseconds::max(), check, "a reduction of values");
  count_sent(values.size_bytes());
}

std::vector<std::uint64_t> MpiTransport::allgather(std::uint64_t value) {
  on_mpi_thread("an allgather");
  std::vector<std::uint64_t> all(static_cast<std::size_t>(ranks_));
  check(PMPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm_), "MPI_Allgather",
        "one value a rank");
  count_sent(sizeof value);
  return all;
}

void MpiTransport::gather(std::span<const std::byte> mine, std::vector<std::byte>& all,
                          std::vector<std::uint64_t>& sizes) {
  on_mpi_thread("a gather");
  std::uint64_t size = mine.size();
  sizes.assign(static_cast<std::size_t>(ranks_), 0);
  // Every rank learns every size, so all of them check the total (see layout).
  check(PMPI_Allgather(&size, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, comm_), "MPI_Allgather",
        "record sizes");
  std::vector<int> counts, displs;
  layout(sizes, counts, displs, "a gather to rank 0");
  if (rank_ == 0)
    all.resize(static_cast<std::size_t>(displs.back()) + static_cast<std::size_t>(counts.back()));
  check(PMPI_Gatherv(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(), counts.data(),
                     displs.data(), MPI_BYTE, 0, comm_),
        "MPI_Gatherv", [&] { return fmt::format("{} B of page records from rank {}", mine.size(), rank_); });
  count_sent(sizeof size + (rank_ != 0 ? mine.size() : 0));
}

void MpiTransport::scatter(const std::vector<std::span<const std::byte>>& each,
                           std::vector<std::byte>& mine) {
  on_mpi_thread("a scatter");
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(ranks_), 0);
  if (rank_ == 0)
    for (int r = 1; r < ranks_; ++r)
      sizes[static_cast<std::size_t>(r)] = each[static_cast<std::size_t>(r)].size();
  // Every rank learns every size, so all of them check the total (see layout).
  check(PMPI_Bcast(sizes.data(), ranks_, MPI_UINT64_T, 0, comm_), "MPI_Bcast", "record sizes");
  if (rank_ == 0) count_sent(sizes.size() * sizeof(std::uint64_t) * static_cast<std::uint64_t>(ranks_ - 1));
  std::vector<int> counts, displs;
  layout(sizes, counts, displs, "a scatter from rank 0");
  std::vector<std::byte> packed;
  if (rank_ == 0)
    for (int r = 1; r < ranks_; ++r) {
      const std::span<const std::byte> part = each[static_cast<std::size_t>(r)];
      packed.insert(packed.end(), part.begin(), part.end());
      count_sent(part.size());
    }
  const std::uint64_t size = sizes[static_cast<std::size_t>(rank_)];
  mine.resize(size);
  check(PMPI_Scatterv(packed.data(), counts.data(), displs.data(), MPI_BYTE, mine.data(),
                      static_cast<int>(size), MPI_BYTE, 0, comm_),
        "MPI_Scatterv", [&] { return fmt::format("{} B of merged pages to rank {}", size, rank_); });
}

void MpiTransport::broadcast(int root, std::span<std::byte> data) {
  on_mpi_thread("a broadcast");
  for (std::size_t at = 0; at < data.size(); at += kChunk) {
    const std::size_t n = std::min(kChunk, data.size() - at);
    check(PMPI_Bcast(data.data() + at, static_cast<int>(n), MPI_BYTE, root, comm_), "MPI_Bcast",
          [&] { return fmt::format("{} B from rank {}", n, root); });
  }
  if (rank_ == root) count_sent(data.size() * static_cast<std::uint64_t>(ranks_ - 1));
}

void MpiTransport::barrier() {
  on_mpi_thread("a barrier");
  check(PMPI_Barrier(comm_), "MPI_Barrier", "the cluster's ranks");
}

bool MpiTransport::agree_within(std::span<std::uint64_t> values, std::chrono::milliseconds limit) {
  on_mpi_thread("an agreement");
  // A reduction an earlier call gave up on is still the one to finish (a second would not match).
  MPI_Request& request = pending_agreement_;
  if (request == MPI_REQUEST_NULL)
    check(PMPI_Iallreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_UINT64_T, MPI_MAX,
                          comm_, &request),
          "MPI_Iallreduce", "the cluster's ranks");
  if (!mpi_detail::wait_within(request, limit, check, "the cluster's agreement")) return false;
  count_sent(values.size_bytes());
  return true;
}

void MpiTransport::abandon(const char* why) noexcept {
  std::fprintf(stderr, "hdsm cluster: rank %d ends the job: %s\n", rank_, why);
  std::fflush(stderr);
  // The other ranks wait in a collective this rank will not finish. A thread that may not call MPI
  // ends its process instead, which mpirun turns into the end of the job too.
  if (may_call_mpi()) PMPI_Abort(comm_, 70);
  std::abort();
}

void MpiTransport::serve_pages(PageServer* server) {
  if (!multiple_) throw Unsupported("cluster over MPI: a page server needs MPI_THREAD_MULTIPLE");
  server_ = os::service_thread([this, server] {  // the program's handlers never run on it
    std::vector<std::byte> page;
    for (;;) {
      PageRequest req{};
      MPI_Status status;
      bool stopped = false;
      int rc = wait_for_request(req, status, stopped);
      try {
        check(rc, "MPI_Irecv/MPI_Test", "a page request");
        if (stopped) return;
        // A request another version of the library, or a corrupted message, sent: refused before its
        // size allocates anything.
        if (req.bytes != server->page_bytes())
          throw Error(Errc::system,
                      fmt::format("rank {} asked for page {} as {} B, where pages are {} B",
                                  status.MPI_SOURCE, req.page, req.bytes, server->page_bytes()));
        page.resize(req.bytes);
        server->serve(req.page, req.epoch, page);
        check(PMPI_Send(page.data(), checked_count(page.size(), "a page"), MPI_BYTE, status.MPI_SOURCE,
                        kReplyTag, server_comm_),
              "MPI_Send", [&] { return fmt::format("page {} to rank {}", req.page, status.MPI_SOURCE); });
        count_sent(page.size());
      } catch (const std::exception& e) {
        // A rank waits for this page: end the job rather than leave it waiting.
        std::fprintf(stderr, "hdsm cluster: rank 0's page server failed: %s\n", e.what());
        PMPI_Abort(MPI_COMM_WORLD, 70);
        return;
      }
    }
  });
}

// A blocking MPI_Recv polls the network without pause (Open MPI's progress loop), which would take a
// core from the rank's own threads for the whole run. The server polls instead, yielding while
// requests came recently and sleeping with a growing pause (up to 0.5 ms) when none come. It stops
// when stop_serving() raises the flag: the pending receive is cancelled (no rank asks any more).
int MpiTransport::wait_for_request(PageRequest& req, MPI_Status& status, bool& stopped) {
  MPI_Request pending = MPI_REQUEST_NULL;
  int rc = PMPI_Irecv(&req, sizeof req, MPI_BYTE, MPI_ANY_SOURCE, kRequestTag, server_comm_, &pending);
  if (rc != MPI_SUCCESS) return rc;
  for (unsigned idle = 0;; ++idle) {
    if (stopping_.load(std::memory_order_acquire)) {
      rc = PMPI_Cancel(&pending);
      if (rc == MPI_SUCCESS) rc = PMPI_Wait(&pending, MPI_STATUS_IGNORE);
      stopped = true;
      return rc;
    }
    int done = 0;
    rc = PMPI_Test(&pending, &done, &status);
    if (rc != MPI_SUCCESS || done != 0) return rc;
    pause_after(idle);
  }
}

void MpiTransport::stop_serving() {
  if (!server_.joinable()) return;
  stopping_.store(true, std::memory_order_release);
  server_.join();
}

void MpiTransport::fetch(int holder, std::uint64_t page, std::uint64_t epoch, std::span<std::byte> into) {
  const PageRequest req{page, epoch, into.size()};
  MPI_Request reply = MPI_REQUEST_NULL;
  check(PMPI_Irecv(into.data(), checked_count(into.size(), "a page"), MPI_BYTE, holder, kReplyTag,
                   server_comm_, &reply),
        "MPI_Irecv", [&] { return fmt::format("page {} from rank {}", page, holder); });
  check(PMPI_Send(&req, sizeof req, MPI_BYTE, holder, kRequestTag, server_comm_), "MPI_Send",
        [&] { return fmt::format("the request for page {} to rank {}", page, holder); });
  count_sent(sizeof req);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (unsigned polls = 0;; ++polls) {
    int done = 0;
    MPI_Status status;
    check(PMPI_Test(&reply, &done, &status), "MPI_Test",
          [&] { return fmt::format("page {} from rank {}", page, holder); });
    if (done != 0) {
      // A shorter reply would leave the rest of the page stale, and the page counted current.
      int received = 0;
      PMPI_Get_count(&status, MPI_BYTE, &received);
      if (static_cast<std::size_t>(received) != into.size())
        throw Error(Errc::system, fmt::format("cluster over MPI: rank {} sent {} B for page {}, not {} B",
                                              holder, received, page, into.size()));
      return;
    }
    if (polls % 64 == 63) {
      if (std::chrono::steady_clock::now() >= deadline) {
        // No receive left posted into the page (nor at MPI_Finalize).
        if (PMPI_Cancel(&reply) == MPI_SUCCESS) PMPI_Wait(&reply, MPI_STATUS_IGNORE);
        throw Error(Errc::system,
                    fmt::format("cluster over MPI: rank {} waited {} ms for page {} from rank {} "
                                "(HDSM_CLUSTER_TIMEOUT)",
                                rank_, timeout_.count(), page, holder));
      }
      ::sched_yield();
    }
  }
}

}  // namespace hdsm::cluster::detail
