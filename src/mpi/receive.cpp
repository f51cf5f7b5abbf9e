// Receives into any buffer: matched like the user's message (held messages first), a header
// starting the chunked protocol, a plain message staged into a shared object.
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

class Receive final : public Operation {
 public:
  Receive(const char* call, const UserBuffer& b, int source, int tag, MPI_Comm comm)
      : Operation(call, comm), buffer_(b), want_source_(source), want_tag_(tag) {
    if (!b.shared() && b.count > 0) {
      int size = 0;
      MPI_Aint extent = 0;
      if (type_layout(b.type, size, extent, buffer_.contiguous))
        buffer_.bytes = static_cast<std::size_t>(b.count) * static_cast<std::size_t>(size);
    }
  }

  /// The receive of a message a matched probe took out of the queues.
  Receive(const char* call, const UserBuffer& b, Matched m, MPI_Message message)
      : Receive(call, b, m.source, m.tag, m.comm) {
    matched_ = m;
    message_ = message;
    state_ = State::matched;
  }

  bool matching() const override { return state_ == State::match; }
  std::pair<int, int> pattern() const override { return {want_source_, want_tag_}; }

  bool progress() override {
    switch (state_) {
      case State::match:
        if (cancel_requested_.load()) {
          cancelled_ = true;
          return true;
        }
        return match();
      case State::matched:
        if (matched_.payload) return take_held(*matched_.payload);
        return take_message(message_, matched_.source, matched_.tag, matched_.bytes);
      case State::plain: {
        MPI_Status st;
        int rc = MPI_SUCCESS;
        if (!tested(plain_.request, &st, rc)) return false;
        if (rc != MPI_SUCCESS) {
          fail(rc, "", true);
          return true;
        }
        if (!buffer_.shared()) return true;
        try {
          buffer_.model->copy(buffer_.data, plain_.data(), static_cast<std::size_t>(bytes_),
                              &plain_.pending());
        } catch (const std::exception& e) {
          fail(MPI_ERR_BUFFER, fmt::format("writing {} B into the shared object at {}: {}", bytes_,
                                           static_cast<void*>(buffer_.data), e.what()));
        }
        state_ = State::writing;
        return settled(plain_.pending());
      }
      case State::writing:
        return settled(plain_.pending());
      case State::chunks:
        return chunks();
    }
    return true;
  }

 private:
  enum class State { match, matched, plain, writing, chunks };

  bool match() {
    auto& waiting = held();
    for (auto it = waiting.begin(); it != waiting.end(); ++it) {
      if (!it->matches(want_source_, want_tag_, comm_)) continue;
      const Held h = *it;
      waiting.erase(it);
      return take_held(h);
    }
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status st;
    const int rc = PMPI_Improbe(want_source_, want_tag_, comm_, &flag, &message, &st);
    if (rc != MPI_SUCCESS) {
      fail(rc, "", true);
      return true;
    }
    if (flag == 0) return false;
    MPI_Count bytes = 0;
    PMPI_Get_elements_x(&st, MPI_BYTE, &bytes);
    return take_message(message, st.MPI_SOURCE, st.MPI_TAG, bytes);
  }

  bool take_held(const Held& h) {
    source_ = h.source;
    tag_ = h.tag;
    bytes_ = sizeof h.header;
    return take_40(h.header, h.chunked);
  }

  /// A message libmpi matched: a header's size is received and looked at, any other goes into the
  /// buffer.
  bool take_message(MPI_Message& message, int source, int tag, MPI_Count bytes) {
    source_ = source;
    tag_ = tag;
    bytes_ = bytes;
    int rc = MPI_SUCCESS;
    if (static_cast<std::size_t>(bytes) == sizeof(Header)) return maybe_header(message);
    if (static_cast<std::size_t>(bytes) > buffer_.bytes) {  // host buffers too (see truncate())
      truncate(message, bytes);
      return true;
    }
    if (!buffer_.shared()) {  // straight into the user's buffer, MPI checks count and type
      state_ = State::plain;
      rc = PMPI_Imrecv(buffer_.data, buffer_.count, buffer_.type, &message, &plain_.request);
      if (rc != MPI_SUCCESS) {
        fail(rc, "", true);
        return true;
      }
      return progress();
    }
    // A plain message into a shared object: whole into staging memory (at most the receive
    // buffer's size), then into the object.
    plain_.acquire(buffer_.pool, static_cast<std::size_t>(bytes), StagingPool::Wait::never, buffer_.buffers);
    state_ = State::plain;
    if (bytes > INT_MAX) {
      truncate(message, bytes);
      return true;
    }
    rc = PMPI_Imrecv(plain_.data(), static_cast<int>(bytes), MPI_BYTE, &message, &plain_.request);
    if (rc != MPI_SUCCESS) {
      fail(rc, "", true);
      return true;
    }
    return progress();
  }

  /// Consumes a message that does not fit (MPI semantics: it is received, the call fails). The
  /// whole message is received into a scratch buffer, since Open MPI 4.1's single-copy (CMA)
  /// transport writes a truncated message past the end of the receive buffer; only a message
  /// above Header::kMaxChunk is truncated by MPI, into a zero-length receive.
  void truncate(MPI_Message& message, MPI_Count bytes) {
    std::unique_ptr<std::byte[]> scratch;
    int count = 0;  // MPI_ERR_TRUNCATE from MPI itself, through the handler
    if (static_cast<std::uint64_t>(bytes) <= Header::kMaxChunk) {
      scratch = std::make_unique_for_overwrite<std::byte[]>(static_cast<std::size_t>(bytes) + 1);
      count = static_cast<int>(bytes);
    } else {
      scratch = std::make_unique_for_overwrite<std::byte[]>(1);
    }
    PMPI_Mrecv(scratch.get(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE);
    fail(MPI_ERR_TRUNCATE,
         fmt::format("a message of {} B from rank {} (tag {}) does not fit the receive buffer {} of {} B",
                     bytes, source_, tag_, static_cast<void*>(buffer_.data), buffer_.bytes));
  }

  bool maybe_header(MPI_Message& message) {
    Header h;
    bool chunked = false;
    if (const int rc = receive_40(message, comm_, h, chunked); rc != MPI_SUCCESS) {
      fail(rc, "", true);
      return true;
    }
    return take_40(h, chunked);
  }

  /// A received message of a header's size: a header starts the chunks, anything else is the
  /// user's own 40 bytes.
  bool take_40(const Header& h, bool chunked) {
    if (chunked) return start_chunks(h);
    if (sizeof h > buffer_.bytes) {
      fail(MPI_ERR_TRUNCATE,
           fmt::format("a message of {} B from rank {} (tag {}) does not fit the receive "
                       "buffer {} of {} B",
                       sizeof h, source_, tag_, static_cast<void*>(buffer_.data), buffer_.bytes));
      return true;
    }
    if (buffer_.shared()) {
      plain_.acquire(nullptr, sizeof h);
      std::memcpy(plain_.data(), &h, sizeof h);
      try {
        buffer_.model->copy(buffer_.data, plain_.data(), sizeof h, &plain_.pending());
      } catch (const std::exception& e) {
        fail(MPI_ERR_BUFFER, fmt::format("writing into the shared object at {}: {}",
                                         static_cast<void*>(buffer_.data), e.what()));
      }
      state_ = State::writing;
      return settled(plain_.pending());
    }
    if (buffer_.contiguous) {  // dense: the bytes in order, a partial last element as MPI leaves it
      std::memcpy(buffer_.data, &h, sizeof h);
      return true;
    }
    if (const int rc = self_receive(h); rc != MPI_SUCCESS)
      fail(rc, fmt::format("placing a message of {} B from rank {} (tag {}) into the receive buffer {} of "
                           "its datatype failed",
                           sizeof h, source_, tag_, static_cast<void*>(buffer_.data)));
    return true;
  }

  /// The 40 bytes into a host buffer of a datatype with gaps, as libmpi would place them: sent to
  /// this process and received with the user's count and datatype (MPI_Unpack refuses a datatype
  /// whose size does not divide 40, where a receive fills a partial last element). Under the engine's
  /// lock, as every progress(): one such message at a time on the tag.
  int self_receive(const Header& h) {
    constexpr int kTag = 1;  // the tokens' messages (probe.cpp) have tag 0
    const MPI_Comm self = wire().tokens;
    if (self == MPI_COMM_NULL) return MPI_ERR_OTHER;  // MPI_Init did not run through hdsm_mpi
    MPI_Request send = MPI_REQUEST_NULL;
    int rc = PMPI_Isend(&h, sizeof h, MPI_BYTE, 0, kTag, self, &send);
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Recv(buffer_.data, buffer_.count, buffer_.type, 0, kTag, self, MPI_STATUS_IGNORE);
    const int sent = PMPI_Wait(&send, MPI_STATUS_IGNORE);
    return rc != MPI_SUCCESS ? rc : sent;
  }

  bool start_chunks(const Header& h) {
    header_ = h;
    bytes_ = static_cast<MPI_Count>(h.total);
    chunks_ = h.chunks();
    world_source_ = world_rank(comm_, source_);
    state_ = State::chunks;
    if (world_source_ < 0) {  // cannot happen for an intracommunicator; the chunks are lost
      fail(MPI_ERR_RANK, fmt::format("rank {} of the communicator is not in MPI_COMM_WORLD", source_));
      chunks_ = 0;
      return true;
    }
    // From here on every chunk is received (discarded on error) so that the sender finishes.
    if (h.total > buffer_.bytes) {
      discard_ = true;
      fail(MPI_ERR_TRUNCATE,
           fmt::format("a message of {} B from rank {} (tag {}) does not fit the receive "
                       "buffer {} of {} B",
                       h.total, source_, tag_, static_cast<void*>(buffer_.data), buffer_.bytes));
    } else if (!buffer_.contiguous) {
      discard_ = true;
      fail(MPI_ERR_TYPE,
           fmt::format("a chunked message of {} B from a shared object cannot be received into a "
                       "non-contiguous datatype; receive it as MPI_BYTE",
                       h.total));
    }
    return chunks();
  }

  bool chunks() {
    for (bool moved = true; moved;) {
      moved = false;
      for (ChunkBuffer& s : slots_) {
        if (s.stage == ChunkBuffer::Stage::network) {
          MPI_Status st;
          int rc = MPI_SUCCESS;
          if (!tested(s.request, &st, rc)) continue;
          moved = true;
          MPI_Count got = 0;
          PMPI_Get_elements_x(&st, MPI_BYTE, &got);
          if (!discard_ && (rc != MPI_SUCCESS || static_cast<std::size_t>(got) != header_.length(s.chunk))) {
            fail(rc != MPI_SUCCESS ? rc : MPI_ERR_OTHER,
                 fmt::format("chunk {} of a message from rank {}: {} B instead of {} B (error {})", s.chunk,
                             source_, got, header_.length(s.chunk), rc));
            discard_ = true;
          }
          if (discard_ || !buffer_.shared()) {
            s.stage = ChunkBuffer::Stage::idle;
            ++received_;
            continue;
          }
          try {
            buffer_.model->copy(buffer_.data + s.chunk * header_.chunk, s.data(), header_.length(s.chunk),
                                &s.pending());
          } catch (const std::exception& e) {
            fail(MPI_ERR_BUFFER, fmt::format("writing chunk {} into the shared object at {}: {}", s.chunk,
                                             static_cast<void*>(buffer_.data), e.what()));
          }
          s.stage = ChunkBuffer::Stage::device;
        }
        if (s.stage == ChunkBuffer::Stage::device && settled(s.pending())) {
          s.stage = ChunkBuffer::Stage::idle;
          ++received_;
          moved = true;
        }
      }
      if (posted_ < chunks_) {
        ChunkBuffer& s = slots_[posted_ % slots_.size()];
        if (s.stage == ChunkBuffer::Stage::idle) {
          void* target = nullptr;
          const int count = static_cast<int>(header_.length(posted_));
          if (discard_) {  // received whole and dropped (see truncate())
            s.acquire(nullptr, header_.chunk);
            target = s.data();
          } else {
            if (buffer_.shared()) {
              s.acquire(buffer_.pool, header_.chunk,
                        StagingPool::Wait::never);  // at most the receive buffer's size
              target = s.data();
            } else {
              target = buffer_.data + posted_ * header_.chunk;
            }
          }
          const int rc = PMPI_Irecv(target, count, MPI_BYTE, world_source_,
                                    static_cast<int>(header_.sequence), wire().comm, &s.request);
          if (rc != MPI_SUCCESS) {
            fail(rc, fmt::format("MPI_Irecv of chunk {} on the hdsm_mpi communicator failed (error {})",
                                 posted_, rc));
            chunks_ = posted_;  // nothing more can be received
            break;
          }
          s.chunk = posted_++;
          s.stage = ChunkBuffer::Stage::network;
          moved = true;
        }
      }
    }
    return received_ == chunks_;
  }

 public:
  std::vector<MPI_Request*> requests() override {
    return {&plain_.request, &slots_[0].request, &slots_[1].request};
  }

 private:
  UserBuffer buffer_;
  int want_source_, want_tag_;
  State state_ = State::match;
  Matched matched_;                         // State::matched: what the probe took
  MPI_Message message_ = MPI_MESSAGE_NULL;  // State::matched without a payload: libmpi's message
  ChunkBuffer plain_;
  Header header_;
  int world_source_ = -1;
  bool discard_ = false;
  std::size_t chunks_ = 0, posted_ = 0, received_ = 0;
  std::array<ChunkBuffer, 2> slots_;
};

}  // namespace

std::shared_ptr<Operation> make_receive(const char* call, const UserBuffer& b, int source, int tag,
                                        MPI_Comm comm) {
  return std::make_shared<Receive>(call, b, source, tag, comm);
}

int make_matched_receive(const char* call, const UserBuffer& b, MPI_Message* message,
                         std::shared_ptr<Operation>& out) {
  out = nullptr;
  const auto it = matched().find(*message);
  if (it == matched().end()) return MPI_SUCCESS;
  const Matched m = it->second;
  matched().erase(it);
  MPI_Message own = *message;
  *message = MPI_MESSAGE_NULL;
  if (m.payload) {  // the token's own zero bytes go; the held message is the user's
    if (const int rc = PMPI_Mrecv(nullptr, 0, MPI_BYTE, &own, MPI_STATUS_IGNORE); rc != MPI_SUCCESS)
      return report(call, rc, "receiving a message handle's token failed");
    own = MPI_MESSAGE_NULL;
  }
  out = std::make_shared<Receive>(call, b, m, own);
  return MPI_SUCCESS;
}

}  // namespace hdsm::mpi
