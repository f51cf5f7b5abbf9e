// Sends and receives on shared objects as non-blocking state machines (operations.hpp).
#include "mpi/operations.hpp"

#include <hdsm/error.hpp>

#include "runtime/internal.hpp"
#include "runtime/knobs.hpp"
#include "runtime/shared_ranges.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>

namespace hdsm::mpi {

Wire& wire() {
  static Wire w;
  return w;
}

int report(const char* call, int code, const std::string& what) {
  std::fprintf(stderr, "hdsm_mpi: %s: %s\n", call, what.c_str());
  return code;
}

bool type_layout(MPI_Datatype type, int& size, MPI_Aint& extent, bool& contiguous) {
  MPI_Aint lb = 0, true_lb = 0, true_extent = 0;
  if (PMPI_Type_size(type, &size) != MPI_SUCCESS || PMPI_Type_get_extent(type, &lb, &extent) != MPI_SUCCESS ||
      PMPI_Type_get_true_extent(type, &true_lb, &true_extent) != MPI_SUCCESS)
    return false;
  contiguous = lb == 0 && true_lb == 0 && extent == size && true_extent == size;
  return true;
}

int describe(const char* call, const void* buf, int count, MPI_Datatype type, UserBuffer& out) {
  out = UserBuffer{};
  out.data = static_cast<std::byte*>(const_cast<void*>(buf));
  out.count = count;
  out.type = type;
  if (count <= 0 || type == MPI_DATATYPE_NULL) return MPI_SUCCESS;  // nothing moves: MPI's own checks
  Runtime* runtime = detail::shared_ranges.owner(buf);
  if (runtime == nullptr) return MPI_SUCCESS;
  detail::MemoryModel& model = detail::memory_model(*runtime);
  if (!model.mediates(buf)) return MPI_SUCCESS;
  int size = 0;
  MPI_Aint extent = 0;
  if (!type_layout(type, size, extent, out.contiguous))
    return report(call, MPI_ERR_TYPE, fmt::format("buffer {} in a shared object: invalid datatype", buf));
  out.bytes = static_cast<std::size_t>(count) * static_cast<std::size_t>(size);
  if (!out.contiguous)
    return report(
        call, MPI_ERR_TYPE,
        fmt::format("buffer {} is in a shared object and its datatype is not contiguous (size {} B, "
                    "extent {} B): hdsm_mpi moves shared objects with contiguous datatypes only; "
                    "pack the data or use MPI_BYTE",
                    buf, size, extent));
  try {
    model.check(buf, out.bytes, call);
  } catch (const Error& e) {
    return report(call, MPI_ERR_BUFFER,
                  fmt::format("buffer {} of {} B ({} x {} B): {}", buf, out.bytes, count, size, e.what()));
  }
  out.model = &model;
  out.pool = &staging_pool(*runtime);
  out.buffers = &receive_buffers(*runtime);
  out.chunk = out.pool->chunk_bytes();
  return MPI_SUCCESS;
}

StagingPool& staging_pool(const Runtime& runtime) {
  const Config& config = runtime.config();
  return detail::pinned_pool(runtime, "mpi", config.size("HDSM_MPI_STAGING_BYTES"),
                             config.size("HDSM_MPI_CHUNK"), {"HDSM_MPI_STAGING_BYTES", "HDSM_MPI_CHUNK"});
}

BufferCache& receive_buffers(const Runtime& runtime) {
  return detail::attachment<BufferCache>(runtime, "mpi.receive_buffers", [&] {
    return std::make_shared<BufferCache>(runtime.config().size("HDSM_MPI_RECV_CACHE"));
  });
}

void set_status(MPI_Status* status, int source, int tag, int error, MPI_Count bytes) {
  if (status == MPI_STATUS_IGNORE) return;
  status->MPI_SOURCE = source;
  status->MPI_TAG = tag;
  status->MPI_ERROR = error;
  PMPI_Status_set_elements_x(status, MPI_BYTE, bytes);
  PMPI_Status_set_cancelled(status, 0);
}

void Operation::fill(MPI_Status* status) const {
  set_status(status, source_, tag_, error_, bytes_);
  if (cancelled_ && status != MPI_STATUS_IGNORE) PMPI_Status_set_cancelled(status, 1);
}

void Operation::fail(int code, const std::string& what, bool handled) {
  if (error_ != MPI_SUCCESS) return;
  if (!what.empty()) report(call_, code, what);
  error_ = code;
  error_handled_ = handled;
}

bool Operation::settled(std::vector<Event>& events) {
  for (const Event& e : events)
    if (!e.query()) return false;
  for (const Event& e : events) {
    try {
      e.wait();
    } catch (const std::exception& x) {
      fail(MPI_ERR_OTHER, fmt::format("device copy of a shared object failed: {}", x.what()));
    }
  }
  events.clear();
  return true;
}

namespace {

/// `rank` of `comm` in MPI_COMM_WORLD, or -1.
int world_rank(MPI_Comm comm, int rank) {
  if (comm == MPI_COMM_WORLD) return rank;
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  int out = MPI_UNDEFINED;
  if (PMPI_Comm_group(comm, &group) == MPI_SUCCESS && PMPI_Comm_group(MPI_COMM_WORLD, &world) == MPI_SUCCESS)
    PMPI_Group_translate_ranks(group, 1, &rank, world, &out);
  if (group != MPI_GROUP_NULL) PMPI_Group_free(&group);
  if (world != MPI_GROUP_NULL) PMPI_Group_free(&world);
  return out == MPI_UNDEFINED ? -1 : out;
}

bool intercomm(MPI_Comm comm) {
  int inter = 0;
  PMPI_Comm_test_inter(comm, &inter);
  return inter != 0;
}

/// Receives a matched message of a header's size and tells whether it is a header of the chunked
/// protocol (on an intercommunicator nothing is chunked).
int receive_40(MPI_Message& message, MPI_Comm comm, Header& h, bool& chunked) {
  const int rc = PMPI_Mrecv(&h, sizeof h, MPI_BYTE, &message, MPI_STATUS_IGNORE);
  chunked = rc == MPI_SUCCESS && h.valid(wire().tag_ub) && wire().comm != MPI_COMM_NULL && !intercomm(comm);
  return rc;
}

/// MPI_Test that records an error of the request (handled: it went through `comm`'s handler).
bool tested(MPI_Request& request, MPI_Status* status, int& rc) {
  int flag = 0;
  rc = PMPI_Test(&request, &flag, status);
  return rc != MPI_SUCCESS || flag != 0;
}

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
            buffer_.model->copy(s.data(), buffer_.data + at, length(staged_), &s.pending());
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
          const int rc = PMPI_Isend(s.data(), static_cast<int>(length(posted_)), MPI_BYTE, world_dest_,
                                    static_cast<int>(header_.sequence), wire().comm, &s.request);
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

 private:
  std::size_t length(std::size_t chunk) const {
    return static_cast<std::size_t>(
        std::min<std::uint64_t>(header_.chunk, header_.total - chunk * header_.chunk));
  }

  UserBuffer buffer_;
  int world_dest_;
  Header header_;
  MPI_Request header_request_ = MPI_REQUEST_NULL;
  std::size_t chunks_ = 0, staged_ = 0, posted_ = 0, sent_ = 0;
  std::array<ChunkBuffer, 2> slots_;
};

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
    matched_ = std::move(m);
    message_ = message;
    state_ = State::matched;
  }

  bool matching() const override { return state_ == State::match; }

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
    int position = 0, size = 0;
    PMPI_Type_size(buffer_.type, &size);
    if (size == 0 || sizeof h % static_cast<std::size_t>(size) != 0) {
      fail(MPI_ERR_TYPE, fmt::format("a message of {} B is not a whole number of the receive datatype's {} B",
                                     sizeof h, size));
      return true;
    }
    PMPI_Unpack(&h, sizeof h, &position, buffer_.data,
                static_cast<int>(sizeof h / static_cast<std::size_t>(size)), buffer_.type, comm_);
    return true;
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

  std::size_t length(std::size_t chunk) const {
    return static_cast<std::size_t>(
        std::min<std::uint64_t>(header_.chunk, header_.total - chunk * header_.chunk));
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
          if (!discard_ && (rc != MPI_SUCCESS || static_cast<std::size_t>(got) != length(s.chunk))) {
            fail(rc != MPI_SUCCESS ? rc : MPI_ERR_OTHER,
                 fmt::format("chunk {} of a message from rank {}: {} B instead of {} B (error {})", s.chunk,
                             source_, got, length(s.chunk), rc));
            discard_ = true;
          }
          if (discard_ || !buffer_.shared()) {
            s.stage = ChunkBuffer::Stage::idle;
            ++received_;
            continue;
          }
          try {
            buffer_.model->copy(buffer_.data + s.chunk * header_.chunk, s.data(), length(s.chunk),
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
          const int count = static_cast<int>(length(posted_));
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

std::deque<Held>& held() {
  static std::deque<Held> messages;
  return messages;
}

std::map<MPI_Message, Matched>& matched() {
  static std::map<MPI_Message, Matched> messages;
  return messages;
}

namespace {

/// A token: libmpi's handle of a zero-byte message this process sends itself on Wire::tokens.
int make_token(MPI_Message* token) {
  const MPI_Comm tokens = wire().tokens;
  if (tokens == MPI_COMM_NULL)
    return report("MPI_Improbe", MPI_ERR_OTHER, "MPI_Init has not run through hdsm_mpi");
  MPI_Request send = MPI_REQUEST_NULL;
  int rc = PMPI_Isend(nullptr, 0, MPI_BYTE, 0, 0, tokens, &send);
  if (rc != MPI_SUCCESS)
    return report("MPI_Improbe", rc, "sending a message handle's token to itself failed");
  rc = PMPI_Mprobe(0, 0, tokens, token, MPI_STATUS_IGNORE);  // the one just sent: tokens go out one at a time
  const int sent = PMPI_Wait(&send, MPI_STATUS_IGNORE);
  if (rc == MPI_SUCCESS) rc = sent;
  return rc != MPI_SUCCESS ? report("MPI_Improbe", rc, "matching a message handle's token failed")
                           : MPI_SUCCESS;
}

}  // namespace

int matched_probe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* message, MPI_Status* status) {
  *flag = 0;
  Matched m;
  m.comm = comm;
  auto& waiting = held();
  const auto it = std::find_if(waiting.begin(), waiting.end(),
                               [&](const Held& h) { return h.matches(source, tag, comm); });
  if (it != waiting.end()) {
    m.payload = *it;
  } else {
    MPI_Status st;
    MPI_Message got = MPI_MESSAGE_NULL;
    int rc = PMPI_Improbe(source, tag, comm, flag, &got, &st);
    if (rc != MPI_SUCCESS || *flag == 0) return rc;
    *flag = 0;
    MPI_Count bytes = 0;
    PMPI_Get_elements_x(&st, MPI_BYTE, &bytes);
    if (static_cast<std::size_t>(bytes) != sizeof(Header)) {
      m.source = st.MPI_SOURCE;
      m.tag = st.MPI_TAG;
      m.bytes = bytes;
      matched()[got] = m;
      *message = got;
      *flag = 1;
      if (status != MPI_STATUS_IGNORE) *status = st;
      return MPI_SUCCESS;
    }
    Held h;
    h.comm = comm;
    h.source = st.MPI_SOURCE;
    h.tag = st.MPI_TAG;
    if ((rc = receive_40(got, comm, h.header, h.chunked)) != MPI_SUCCESS) return rc;
    m.payload = h;
  }
  MPI_Message token = MPI_MESSAGE_NULL;
  if (const int rc = make_token(&token); rc != MPI_SUCCESS) {
    if (it == waiting.end()) waiting.push_back(*m.payload);  // received: later receives still get it
    return rc;
  }
  if (it != waiting.end()) waiting.erase(it);
  m.source = m.payload->source;
  m.tag = m.payload->tag;
  m.bytes = m.payload->bytes();
  matched()[token] = m;
  *message = token;
  *flag = 1;
  set_status(status, m.source, m.tag, MPI_SUCCESS, m.bytes);
  return MPI_SUCCESS;
}

int probe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
  *flag = 0;
  for (const Held& h : held()) {
    if (!h.matches(source, tag, comm)) continue;
    *flag = 1;
    set_status(status, h.source, h.tag, MPI_SUCCESS, h.bytes());
    return MPI_SUCCESS;
  }
  MPI_Status st;
  int rc = PMPI_Iprobe(source, tag, comm, flag, &st);
  if (rc != MPI_SUCCESS || *flag == 0) return rc;
  MPI_Count bytes = 0;
  PMPI_Get_elements_x(&st, MPI_BYTE, &bytes);
  if (static_cast<std::size_t>(bytes) != sizeof(Header)) {
    if (status != MPI_STATUS_IGNORE) *status = st;
    return MPI_SUCCESS;
  }
  // The first message from that source with that tag is the one just probed (MPI keeps the order
  // of one sender's messages), so this receives exactly it.
  MPI_Message message = MPI_MESSAGE_NULL;
  rc = PMPI_Improbe(st.MPI_SOURCE, st.MPI_TAG, comm, flag, &message, &st);
  if (rc != MPI_SUCCESS || *flag == 0) return rc;  // not there: another thread received it meanwhile
  Held h;
  h.comm = comm;
  h.source = st.MPI_SOURCE;
  h.tag = st.MPI_TAG;
  rc = receive_40(message, comm, h.header, h.chunked);
  if (rc != MPI_SUCCESS) {
    *flag = 0;
    return rc;
  }
  held().push_back(h);
  set_status(status, h.source, h.tag, MPI_SUCCESS, h.bytes());
  return MPI_SUCCESS;
}

std::shared_ptr<Operation> make_send(const char* call, const UserBuffer& b, int dest, int tag, MPI_Comm comm,
                                     SendMode mode) {
  if (b.bytes > b.chunk && mode != SendMode::buffered && wire().comm != MPI_COMM_NULL && !intercomm(comm)) {
    const int world_dest = world_rank(comm, dest);
    if (world_dest >= 0) return std::make_shared<ChunkedSend>(call, b, dest, world_dest, tag, comm, mode);
  }
  return std::make_shared<StagedSend>(call, b, dest, tag, comm, mode);
}

std::shared_ptr<Operation> make_receive(const char* call, const UserBuffer& b, int source, int tag,
                                        MPI_Comm comm) {
  return std::make_shared<Receive>(call, b, source, tag, comm);
}

int make_matched_receive(const char* call, const UserBuffer& b, MPI_Message* message,
                         std::shared_ptr<Operation>& out) {
  out = nullptr;
  const auto it = matched().find(*message);
  if (it == matched().end()) return MPI_SUCCESS;
  Matched m = std::move(it->second);
  matched().erase(it);
  MPI_Message own = *message;
  *message = MPI_MESSAGE_NULL;
  if (m.payload) {  // the token's own zero bytes go; the held message is the user's
    if (const int rc = PMPI_Mrecv(nullptr, 0, MPI_BYTE, &own, MPI_STATUS_IGNORE); rc != MPI_SUCCESS)
      return report(call, rc, "receiving a message handle's token failed");
    own = MPI_MESSAGE_NULL;
  }
  out = std::make_shared<Receive>(call, b, std::move(m), own);
  return MPI_SUCCESS;
}

}  // namespace hdsm::mpi
