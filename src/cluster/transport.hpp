// What the kernel-boundary DSM needs from the ranks' interconnect: a few collectives and a page
// request to the rank that holds a page. MPI provides it between processes (mpi_transport.cpp); an
// in-process hub of threads provides it for the protocol's unit tests (threads_transport.hpp). The
// protocol (node.cpp) is the same over both.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hdsm::cluster::detail {

/// Answers page requests: the holder's side of Transport::fetch.
class PageServer {
 public:
  virtual ~PageServer() = default;
  /// The size of a page: what a request must ask for (checked before anything is allocated for it).
  virtual std::size_t page_bytes() const = 0;
  /// Copies page `page` as it was at the end of kernel boundary `epoch` (or later, when no write
  /// can have happened since) into `out` (one page). Waits until this rank finished that boundary.
  virtual void serve(std::uint64_t page, std::uint64_t epoch, std::span<std::byte> out) = 0;
};

enum class ReduceOp : std::uint8_t { sum, min, max };

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  /// Whether ranks share one address space (the in-process hub): global memory then cannot sit at
  /// one address on every rank, and each rank's kernels get its own pointers.
  virtual bool shared_address_space() const = 0;
  /// Whether a page server can answer requests while the rank's main thread runs collectives
  /// (MPI_THREAD_MULTIPLE); without it the runtime never invalidates pages (no lazy update).
  virtual bool concurrent_requests() const = 0;

  /// Element-wise reduction over all ranks, in place.
  virtual void allreduce(std::span<std::uint32_t> values, ReduceOp op) = 0;
  virtual void allreduce(std::span<std::uint64_t> values, ReduceOp op) = 0;
  /// Every rank's value, in rank order.
  virtual std::vector<std::uint64_t> allgather(std::uint64_t value) = 0;
  /// Rank 0 receives every rank's bytes, concatenated in rank order, with each rank's size; the
  /// other ranks get nothing back.
  virtual void gather(std::span<const std::byte> mine, std::vector<std::byte>& all,
                      std::vector<std::uint64_t>& sizes) = 0;
  /// Rank 0 sends `each[r]` to every rank r (only rank 0's `each` is read; rank 0 sends itself
  /// nothing); `mine` receives this rank's part.
  virtual void scatter(const std::vector<std::span<const std::byte>>& each, std::vector<std::byte>& mine) = 0;
  /// `data` of `root` lands in `data` of every rank (every rank passes the same size).
  virtual void broadcast(int root, std::span<std::byte> data) = 0;
  virtual void barrier() = 0;
  /// allreduce (max) of the session's agreements (every call's opening one, and the session's
  /// end), as a nonblocking collective: MPI never matches a blocking collective with a nonblocking
  /// one, and a session's end must meet the agreement another rank began a call with. It gives up
  /// after `limit` (milliseconds::max(): never): false when some rank did not come (it waits in
  /// another collective, or left); the next call goes on with the same reduction, so `values` must
  /// stay where they are until one returns true.
  virtual bool agree_within(std::span<std::uint64_t> values, std::chrono::milliseconds limit) = 0;
  /// This rank cannot follow the others through the collectives it is in (a boundary failed halfway
  /// on it alone, its copy of global memory lost): the job ends (MPI_Abort after printing `why`), or,
  /// in-process, every other rank's collectives fail. Returns only in-process; the caller throws.
  /// Allocates nothing where it ends the job: it serves a rank that ran out of memory too.
  virtual void abandon(const char* why) noexcept = 0;

  /// Starts answering other ranks' page requests with `server`, until stop_serving().
  virtual void serve_pages(PageServer* server) = 0;
  virtual void stop_serving() = 0;
  /// Asks `holder` for page `page` as of boundary `epoch`; the page lands in `into`. Called from any
  /// thread of the rank, one request at a time.
  virtual void fetch(int holder, std::uint64_t page, std::uint64_t epoch, std::span<std::byte> into) = 0;

  /// Bytes this rank has sent on the wire, as the MPI calls' payloads (a broadcast counts its
  /// payload once per receiving rank, at the root).
  std::uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  void reset_bytes_sent() { bytes_sent_.store(0, std::memory_order_relaxed); }

 protected:
  void count_sent(std::uint64_t bytes) { bytes_sent_.fetch_add(bytes, std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> bytes_sent_{0};  // the page server's thread adds too
};

}  // namespace hdsm::cluster::detail
