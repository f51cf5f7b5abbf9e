// Sends from shared objects: a message up to the chunk size staged whole (StagedSend), larger ones
// as a header and double-buffered chunks (ChunkedSend).
#include "mpi/operations.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>

namespace hdsm::mpi {
namespace {

// A message up to the chunk size (or on an intercommunicator): staged whole, then one MPI_Isend.
class StagedSend final : public Operation {
 public:
  StagedSend(const char* call, const UserBuffer& b, int dest, int tag, MPI_Comm comm, SendMode mode)
      : Operation(call, comm) {
    if (b.bytes > static_cast<std::size_t>(INT_MAX)) {
      fail(MPI_ERR_COUNT,
           fmt::format("a message of {} B from a shared object exceeds INT_MAX bytes, and it cannot "
                       "be chunked ({})",
                       b.bytes, mode == SendMode::buffered ? "a buffered send" : "an intercommunicator"));
      return;
    }
    slot_.acquire(b.pool, b.bytes, StagingPool::Wait::never);
    try {
      b.model->copy(slot_.data(), b.data, b.bytes, &slot_.pending());
    } catch (const std::exception& e) {
      fail(MPI_ERR_BUFFER,
           fmt::format("reading {} B at {}: {}", b.bytes, static_cast<void*>(b.data), e.what()));
    }
    for (const Event& e : slot_.pending()) {
      try {
        e.wait();  // blocks on the device only; settled() records an error
      } catch (const std::exception&) {
      }
    }
    settled(slot_.pending());
    const auto post = mode == SendMode::synchronous ? PMPI_Issend
                      : mode == SendMode::buffered  ? PMPI_Ibsend
                                                    : PMPI_Isend;
    const int rc = post(slot_.data(), static_cast<int>(b.bytes), MPI_BYTE, dest, tag, comm, &slot_.request);
    if (rc != MPI_SUCCESS) fail(rc, "", true);
  }
  bool progress() override {
    if (slot_.request == MPI_REQUEST_NULL) return true;
    int rc = MPI_SUCCESS;
    if (!tested(slot_.request, MPI_STATUS_IGNORE, rc)) return false;
    if (rc != MPI_SUCCESS) fail(rc, "", true);
    return true;
  }
  std::vector<MPI_Request*> requests() override { return {&slot_.request}; }

 private:
  ChunkBuffer slot_;
};

// Above the chunk size: the header on the user's communicator, then the chunks on the wire
// communicator. Chunk i + 1 is copied from the device while chunk i is on the network.
class ChunkedSend final : public Operation {
 public:
  ChunkedSend(const char* call, const UserBuffer& b, int dest, int world_dest, int tag, MPI_Comm comm,
              SendMode mode)
      : Operation(call, comm), buffer_(b), world_dest_(world_dest) {
    Wire& w = wire();
    header_.total = b.bytes;
    header_.chunk = b.chunk;
    header_.sequence = w.next_sequence.fetch_add(1) % (static_cast<std::uint64_t>(w.tag_ub) + 1);
    header_.check = header_.checksum();
    chunks_ = header_.chunks();
    // A synchronous send is complete once the receiver matched the header (its receive started).
    const auto post = mode == SendMode::synchronous ? PMPI_Issend : PMPI_Isend;
    const int rc = post(&header_, sizeof header_, MPI_BYTE, dest, tag, comm, &header_request_);
    if (rc != MPI_SUCCESS) {
      fail(rc, "", true);
      chunks_ = 0;
    }
  }

  bool progress() override {
    for (bool moved = true; moved;) {
      moved = false;
      for (ChunkBuffer& s : slots_) {
        int rc = MPI_SUCCESS;
        if (s.stage == ChunkBuffer::Stage::network && tested(s.request, MPI_STATUS_IGNORE, rc)) {
          if (rc != MPI_SUCCESS)
            fail(rc, fmt::format("MPI_Isend of chunk {} failed (error {})", s.chunk, rc));
          s.stage = ChunkBuffer::Stage::idle;
          ++sent_;
          moved = true;
        }
      }
      if (staged_ < chunks_) {
        ChunkBuffer& s = slots_[staged_ % slots_.size()];
        if (s.stage == ChunkBuffer::Stage::idle) {
          s.acquire(buffer_.pool, header_.chunk, StagingPool::Wait::never);
          const std::size_t at = staged_ * header_.chunk;
          try {
            buffer_.model->copy(s.data(), buffer_.data + at, header_.length(staged_), &s.pending());
          } catch (const std::exception& e) {
            fail(MPI_ERR_BUFFER, fmt::format("reading chunk {} of the shared object at {}: {}", staged_,
                                             static_cast<void*>(buffer_.data), e.what()));
          }
          s.chunk = staged_++;
          s.stage = ChunkBuffer::Stage::device;
          moved = true;
        }
      }
      if (posted_ < chunks_) {
        ChunkBuffer& s = slots_[posted_ % slots_.size()];
        if (s.stage == ChunkBuffer::Stage::device && s.chunk == posted_ && settled(s.pending())) {
          const int rc = PMPI_Isend(s.data(), static_cast<int>(header_.length(posted_)), MPI_BYTE,
                                    world_dest_, static_cast<int>(header_.sequence), wire().comm, &s.request);
          if (rc != MPI_SUCCESS) {
            fail(rc, fmt::format("MPI_Isend of chunk {} on the hdsm_mpi communicator failed (error {})",
                                 posted_, rc));
            s.stage = ChunkBuffer::Stage::idle;
            ++sent_;
          } else {
            s.stage = ChunkBuffer::Stage::network;
          }
          ++posted_;
          moved = true;
        }
      }
    }
    int rc = MPI_SUCCESS;
    if (header_request_ != MPI_REQUEST_NULL && tested(header_request_, MPI_STATUS_IGNORE, rc) &&
        rc != MPI_SUCCESS)
      fail(rc, "", true);
    return sent_ == chunks_ && header_request_ == MPI_REQUEST_NULL;
  }
  std::vector<MPI_Request*> requests() override {
    return {&header_request_, &slots_[0].request, &slots_[1].request};
  }

 private:
  UserBuffer buffer_;
  int world_dest_;
  Header header_;
  MPI_Request header_request_ = MPI_REQUEST_NULL;
  std::size_t chunks_ = 0, staged_ = 0, posted_ = 0, sent_ = 0;
  std::array<ChunkBuffer, 2> slots_;
};

}  // namespace

std::shared_ptr<Operation> make_send(const char* call, const UserBuffer& b, int dest, int tag, MPI_Comm comm,
                                     SendMode mode) {
  if (b.bytes > b.chunk && mode != SendMode::buffered && wire().comm != MPI_COMM_NULL && !intercomm(comm)) {
    const int world_dest = world_rank(comm, dest);
    if (world_dest >= 0) return std::make_shared<ChunkedSend>(call, b, dest, world_dest, tag, comm, mode);
  }
  return std::make_shared<StagedSend>(call, b, dest, tag, comm, mode);
}

}  // namespace hdsm::mpi
