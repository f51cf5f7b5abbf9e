#pragma once

#include "cluster/transport.hpp"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace hdsm::cluster::detail {

/// A page request on the wire.
struct PageRequest {
  std::uint64_t page;
  std::uint64_t epoch;
  std::uint64_t bytes;
};

/// "MPI_THREAD_FUNNELED" and the like.
const char* thread_level_name(int level);

class MpiTransport final : public Transport {
 public:
  /// Duplicates `world` twice. `thread_level`: what MPI provides (MPI_THREAD_MULTIPLE lets the page
  /// server and a fault's fetch call MPI beside the collectives; below MPI_THREAD_SERIALIZED, every
  /// call must come from the thread that initialized MPI, or hdsm::Unsupported).
  MpiTransport(MPI_Comm world, int thread_level, std::chrono::milliseconds timeout);
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }
  bool shared_address_space() const override { return false; }
  bool concurrent_requests() const override { return multiple_; }
  void allreduce(std::span<std::uint32_t> values, ReduceOp op) override;
  void allreduce(std::span<std::uint64_t> values, ReduceOp op) override;
  std::vector<std::uint64_t> allgather(std::uint64_t value) override;
  void gather(std::span<const std::byte> mine, std::vector<std::byte>& all,
              std::vector<std::uint64_t>& sizes) override;
  void scatter(const std::vector<std::span<const std::byte>>& each, std::vector<std::byte>& mine) override;
  void broadcast(int root, std::span<std::byte> data) override;
  void barrier() override;
  bool agree_within(std::span<std::uint64_t> values, std::chrono::milliseconds limit) override;
  void abandon(const char* why) noexcept override;
  void serve_pages(PageServer* server) override;
  void stop_serving() override;
  void fetch(int holder, std::uint64_t page, std::uint64_t epoch, std::span<std::byte> into) override;

 private:
  int wait_for_request(PageRequest& req, MPI_Status& status, bool& stopped);
  /// Whether this thread may call MPI: always from MPI_THREAD_SERIALIZED up, else only the thread
  /// that initialized it.
  bool may_call_mpi() const;
  /// hdsm::Unsupported naming `call` where this thread may not call MPI: before any MPI call of a
  /// collective, so that where every rank calls from the same kind of thread (as an SPMD program
  /// does) no rank is left waiting in half of one.
  void on_mpi_thread(const char* call) const;

  MPI_Comm comm_ = MPI_COMM_NULL, server_comm_ = MPI_COMM_NULL;
  int rank_ = 0, ranks_ = 1;
  int level_;
  bool multiple_;
  std::chrono::milliseconds timeout_;
  std::thread server_;
  std::atomic<bool> stopping_{false};                 // the server's polling loop ends at its next look
  MPI_Request pending_agreement_ = MPI_REQUEST_NULL;  // agree_within's, while not all ranks came
};

}  // namespace hdsm::cluster::detail
