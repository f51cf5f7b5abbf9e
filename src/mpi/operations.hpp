// The operations of libhdsm_mpi: a send or receive whose progress hdsm drives (a send from a shared
// object, any receive). Each is a non-blocking state machine: progress() does what it can now
// (post an MPI transfer, start a device copy, notice that one finished) and returns. Blocking calls
// and MPI_Wait/MPI_Test drive every pending operation in posting order, round-robin, so operations
// that depend on each other (two ranks that both send and receive) all move.
#pragma once

#include <hdsm/export.h>

#include "device/buffer_cache.hpp"
#include "device/staging_pool.hpp"
#include "mpi/protocol.hpp"
#include "runtime/memory_model.hpp"

#include <mpi.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hdsm::mpi {

/// The library's state: the private communicator chunks travel on (a duplicate of MPI_COMM_WORLD
/// made in MPI_Init, errors returned) and the next sequence number.
struct Wire {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm tokens = MPI_COMM_NULL;  // a duplicate of MPI_COMM_SELF for matched-message handles
  MPI_Comm groups = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD for MPI_Comm_create_group's barriers
  int tag_ub = 32767;
  std::atomic<std::uint64_t> next_sequence{0};
};
Wire& wire();

/// Writes "hdsm_mpi: <call>: <what>" to stderr and returns `code`.
int report(const char* call, int code, const std::string& what);

/// A user buffer as (buf, count, datatype) describes it.
struct UserBuffer {
  std::byte* data = nullptr;
  std::size_t bytes = 0;  // count * size of the datatype
  int count = 0;
  MPI_Datatype type = MPI_BYTE;
  bool contiguous = true;                // the bytes are [data, data + bytes)
  detail::MemoryModel* model = nullptr;  // non-null: in a shared object the model mediates
  StagingPool* pool = nullptr;           // the owning runtime's MPI staging pool ("mpi")
  BufferCache* buffers = nullptr;        // the owning runtime's kept receive buffers
  std::size_t chunk = 0;                 // the owning runtime's HDSM_MPI_CHUNK
  bool shared() const { return model != nullptr; }
};
/// libhdsm_mpi's pinned staging pool on `runtime` (HDSM_MPI_STAGING_BYTES in chunks of
/// HDSM_MPI_CHUNK), one of the runtime's pinned pools, made on first use.
StagingPool& staging_pool(const Runtime& runtime);
/// The pageable receive buffers libhdsm_mpi keeps on `runtime` (HDSM_MPI_RECV_CACHE), made on first
/// use and gone with the runtime.
HDSM_API BufferCache& receive_buffers(const Runtime& runtime);  // exported for the tests

/// The size and extent of `type`, and whether its elements are `size` bytes with no gap (false: an
/// invalid datatype).
bool type_layout(MPI_Datatype type, int& size, MPI_Aint& extent, bool& contiguous);
/// Fills `out`; an MPI error code (reported, naming `call`) when a shared buffer is not contiguous
/// or leaves the live shared objects.
int describe(const char* call, const void* buf, int count, MPI_Datatype type, UserBuffer& out);

/// A chunk of an operation's staging: a StagingChunk (pinned from the MPI pool when one is free,
/// pageable otherwise, never waiting, so operations cannot deadlock on the pool) and where it is in
/// the operation's pipeline.
struct ChunkBuffer : StagingChunk {
  enum class Stage { idle, device, network };
  Stage stage = Stage::idle;
  MPI_Request request = MPI_REQUEST_NULL;
  std::size_t chunk = 0;  // index of the chunk it holds
};

class Operation {
 public:
  Operation(const char* call, MPI_Comm comm) : call_(call), comm_(comm) {}
  virtual ~Operation() = default;
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

  /// Advances without blocking; true once finished (successfully or not).
  virtual bool progress() = 0;
  /// True for a receive not yet matched: a later receive on the same communicator must not probe
  /// before it (MPI's matching order).
  virtual bool matching() const { return false; }
  /// The (source, tag) a matching() receive takes (wildcards as MPI_ANY_SOURCE, MPI_ANY_TAG).
  virtual std::pair<int, int> pattern() const { return {MPI_ANY_SOURCE, MPI_ANY_TAG}; }

  /// The status of the user's message (source, tag, count in bytes, error, cancelled).
  void fill(MPI_Status* status) const;
  /// MPI_Cancel of the user's request (any thread): a receive not yet matched then ends at its next
  /// progress() without a message, its status cancelled; anything else runs to its end, as MPI
  /// allows for a cancel that comes too late.
  void request_cancel() { cancel_requested_.store(true); }
  /// An exception that escaped progress() (a bug or an allocation failure): the operation ends
  /// with MPI_ERR_INTERN, reported naming `what`, so its request fails instead of completing as if
  /// the transfer had happened.
  void fail_internal(const std::string& what);
  /// The operation's own MPI requests (MPI_REQUEST_NULL when not in flight). One that ends by an
  /// exception with any still in flight is kept alive until they complete, so libmpi never writes
  /// into (or reads from) memory freed under it; none is cancelled, as the peer's half of the
  /// transfer (a chunk the header promised) goes on.
  virtual std::vector<MPI_Request*> requests() { return {}; }
  int error() const { return error_; }
  /// True when the error already went through the communicator's error handler (it came from an
  /// MPI call on the user's communicator).
  bool error_handled() const { return error_handled_; }
  MPI_Comm comm() const { return comm_; }
  const char* call() const { return call_; }

  bool done = false;
  MPI_Request request = MPI_REQUEST_NULL;  // the generalized request of a nonblocking call

 protected:
  /// Records the first error; `handled` as error_handled().
  void fail(int code, const std::string& what, bool handled = false);
  /// True once every event finished; device errors become the operation's error.
  bool settled(std::vector<Event>& events);

  const char* call_;
  MPI_Comm comm_;
  int error_ = MPI_SUCCESS;
  bool error_handled_ = false;
  std::atomic<bool> cancel_requested_{false};
  bool cancelled_ = false;  // ended by request_cancel()
  int source_ = MPI_ANY_SOURCE;
  int tag_ = MPI_ANY_TAG;
  MPI_Count bytes_ = 0;
};

/// Sets a status as MPI_Recv would: source, tag and `bytes` received as MPI_BYTE. Its MPI_ERROR
/// stays as it was: MPI sets that field only where a call completes several requests and returns
/// MPI_ERR_IN_STATUS.
void set_status(MPI_Status* status, int source, int tag, MPI_Count bytes);
/// Copies libmpi's status `from` into the user's, but for MPI_ERROR (set_status).
void give_status(MPI_Status* status, const MPI_Status& from);
/// The checks MPI makes of a receive's arguments before it matches anything (the communicator, the
/// count, the datatype, a null buffer, the tag, the source): an MPI error code, reported and through
/// the communicator's handler, so a bad receive fails with MPI's error class and leaves the message
/// it could have matched for the next receive.
int check_receive(const char* call, const void* buf, int count, MPI_Datatype type, int source, int tag,
                  MPI_Comm comm);

// Helpers of the send, receive and probe files (wire.cpp).
/// `rank` of `comm` in MPI_COMM_WORLD, or -1.
int world_rank(MPI_Comm comm, int rank);
bool intercomm(MPI_Comm comm);
/// Receives a matched message of a header's size and tells whether it is a header of the chunked
/// protocol (on an intercommunicator nothing is chunked).
int receive_40(MPI_Message& message, MPI_Comm comm, Header& h, bool& chunked);
/// MPI_Test that records an error of the request (handled: it went through `comm`'s handler).
bool tested(MPI_Request& request, MPI_Status* status, int& rc);

/// A message of a header's size that MPI_Probe or MPI_Iprobe had to receive to tell a header from
/// the user's own 40 bytes (MPI offers no way to look into a message and leave it queued). It came
/// before anything MPI still queues from its source with its tag, so receives take held messages
/// first. Not exact in one case: when the probe named a tag and its source had sent an earlier
/// message with another tag, a later MPI_ANY_TAG receive from that source gets the held one first.
struct Held {
  MPI_Comm comm = MPI_COMM_NULL;
  int source = MPI_ANY_SOURCE;
  int tag = MPI_ANY_TAG;
  Header header;         // the 40 bytes as received
  bool chunked = false;  // a valid header: the user's message is `header.total` bytes in chunks
  bool matches(int want_source, int want_tag, MPI_Comm want_comm) const {
    return comm == want_comm && (want_source == MPI_ANY_SOURCE || want_source == source) &&
           (want_tag == MPI_ANY_TAG || want_tag == tag);
  }
  /// The size of the user's message.
  MPI_Count bytes() const {
    return chunked ? static_cast<MPI_Count>(header.total) : MPI_Count{sizeof header};
  }
};
/// The held messages in arrival order. Guarded by the lock of the pending operations (interpose.cpp):
/// receives match and probes run under it.
std::deque<Held>& held();

/// MPI_Iprobe on the user's message (the caller holds the lock of held()): a held message first;
/// otherwise a message MPI holds, where one of a header's size is received into held() so that the
/// status gives the size of a chunked message, not of its header.
int probe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status);

/// A message MPI_Mprobe or MPI_Improbe matched for the user and nobody received yet: the held 40
/// bytes it was (a header or the user's own), or libmpi's message of another size.
struct Matched {
  MPI_Comm comm = MPI_COMM_NULL;
  int source = MPI_ANY_SOURCE;
  int tag = MPI_ANY_TAG;
  MPI_Count bytes = 0;          // the size of the user's message
  std::optional<Held> payload;  // set: the handle is a token (below), the message is this one
};
/// The matched messages by the handle the user holds. For a held message that handle is a token:
/// libmpi's handle of a zero-byte message to itself on Wire::tokens, so it is a real MPI_Message
/// that nobody else can produce. Guarded as held() is.
std::map<MPI_Message, Matched>& matched();

/// MPI_Improbe on the user's message (the caller holds the lock of held()): as probe(), and the
/// message leaves the queues for the handle.
int matched_probe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* message, MPI_Status* status);

/// How a send completes, as MPI's send modes. A ready send is a standard one: MPI allows an
/// implementation to replace one with the other.
enum class SendMode {
  standard,     // MPI_Send
  synchronous,  // MPI_Ssend: complete once the receiver matched the message (its header)
  buffered,     // MPI_Bsend: one message copied into the attached buffer, never chunked
};

/// A send from a shared object: one staged message up to the chunk size (or on an
/// intercommunicator, or buffered), header + double-buffered chunks above it. The first message on
/// the user's communicator is posted by the constructor, so sends keep their order.
std::shared_ptr<Operation> make_send(const char* call, const UserBuffer& buffer, int dest, int tag,
                                     MPI_Comm comm, SendMode mode = SendMode::standard);
/// A receive into any buffer: matched with MPI_Improbe on (source, tag, comm); a header starts the
/// chunked protocol.
std::shared_ptr<Operation> make_receive(const char* call, const UserBuffer& buffer, int source, int tag,
                                        MPI_Comm comm);
/// The receive of a message matched_probe() gave out (the caller holds the lock of held()): its
/// entry leaves matched() and *message becomes MPI_MESSAGE_NULL. nullptr for a handle that is not
/// one of them. An MPI error code when a token's own message cannot be received.
int make_matched_receive(const char* call, const UserBuffer& buffer, MPI_Message* message,
                         std::shared_ptr<Operation>& out);

}  // namespace hdsm::mpi
