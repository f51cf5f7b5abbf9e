// libhdsm_mpi: MPI point-to-point calls on buffers in shared objects (seed 003 §3.3, Listing 4),
// through the standard PMPI profiling interface. A program links libhdsm_mpi before libmpi; these
// definitions then replace libmpi's MPI_* and call its PMPI_* ones.
//
// A send from host memory is libmpi's call, untouched. A send from a shared object, in any mode, is
// an operation (operations.hpp); persistent requests are in persistent.cpp. Every receive is an
// operation, since only the received message tells whether it is a plain message or the header of
// a chunked one: it matches with MPI_Improbe on the user's
// (source, tag, comm), so wildcards and MPI's matching order hold, and receives into a host buffer
// with MPI_Imrecv straight into it. MPI_Probe and MPI_Iprobe report the user's message, not a
// header: a message of a header's size is received to look at it and held for the receive that
// matches it (operations.hpp, Held). MPI_Mprobe and MPI_Improbe take the user's message out of the
// queues under a handle (a token for a held one, operations.hpp, Matched) that MPI_Mrecv and
// MPI_Imrecv receive. A nonblocking call returns a generalized request (MPI_Grequest_start) at
// once; MPI_Wait*, MPI_Test* and every blocking call drive all pending operations in posting order
// until what they wait for is done.
#include <hdsm/export.h>
#include <hdsm/config.hpp>

#include "mpi/engine.hpp"
#include "mpi/persistent.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <exception>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <sched.h>

namespace hdsm::mpi {
namespace {

struct ProgressEngine {
  std::mutex mutex;
  std::list<std::shared_ptr<Operation>> pending;  // posting order
  // Operations an exception ended with requests of their own in flight, kept (with the memory those
  // requests use) until the requests complete; tested on every pass.
  std::vector<std::shared_ptr<Operation>> orphans;
};

/// True while `op` has a request of its own in flight.
bool in_flight(Operation& op) {
  const std::vector<MPI_Request*> requests = op.requests();
  return std::any_of(requests.begin(), requests.end(),
                     [](const MPI_Request* r) { return *r != MPI_REQUEST_NULL; });
}

/// Tests the orphans' requests; drops the orphans whose requests all completed (an error ends a
/// request too: libmpi has let go of its memory).
void test_orphans(ProgressEngine& e) {
  std::erase_if(e.orphans, [](const std::shared_ptr<Operation>& op) {
    for (MPI_Request* r : op->requests()) {
      int flag = 0;
      if (*r != MPI_REQUEST_NULL && PMPI_Test(r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        *r = MPI_REQUEST_NULL;
    }
    return !in_flight(*op);
  });
}
ProgressEngine& engine() {
  static ProgressEngine e;
  return e;
}

// Whether two receives' (source, tag) patterns can take one message: then the one posted first
// matches first (MPI's order), and the later one waits for it; otherwise no message is theirs both.
bool overlap(const std::pair<int, int>& a, const std::pair<int, int>& b) {
  const auto same = [](int x, int y, int any) { return x == any || y == any || x == y; };
  return same(a.first, b.first, MPI_ANY_SOURCE) && same(a.second, b.second, MPI_ANY_TAG);
}

/// One pass over the pending operations (the engine's lock held). A receive not yet matched keeps
/// the later receives on its communicator that could take its message (overlap) from probing in
/// this pass, so they match in posting order; the others go on.
void drive_locked(ProgressEngine& e) {
  struct Unmatched {
    MPI_Comm comm;
    std::pair<int, int> pattern;
  };
  std::vector<Unmatched> unmatched;  // receives not yet matched, in posting order
  if (!e.orphans.empty()) test_orphans(e);
  for (auto it = e.pending.begin(); it != e.pending.end();) {
    Operation& op = **it;
    if (!op.done) {
      const bool waits =
          op.matching() && std::any_of(unmatched.begin(), unmatched.end(), [&](const Unmatched& u) {
            return u.comm == op.comm() && overlap(u.pattern, op.pattern());
          });
      if (!waits) {
        try {
          op.done = op.progress();
        } catch (const std::exception& x) {  // a bug: fail the request rather than lose it
          op.fail_internal(x.what());
          op.done = true;
          if (in_flight(op)) e.orphans.push_back(*it);
        }
      }
      if (!op.done && op.matching()) unmatched.push_back({op.comm(), op.pattern()});
    }
    if (op.done) {
      if (op.request != MPI_REQUEST_NULL) PMPI_Grequest_complete(op.request);
      it = e.pending.erase(it);
    } else {
      ++it;
    }
  }
}

void enqueue(const std::shared_ptr<Operation>& op) {
  ProgressEngine& e = engine();
  std::lock_guard lock(e.mutex);
  e.pending.push_back(op);
}

/// The generalized requests of the nonblocking operations, by handle, from MPI_Grequest_start until
/// libmpi frees them: the calls that complete requests find the operation behind one (RequestView).
struct Requests {
  std::mutex mutex;  // taken after the engine's lock, never before it
  std::unordered_map<MPI_Request, std::shared_ptr<Operation>> live;
  std::atomic<std::size_t> size{0};  // read without the lock: no request of ours, nothing to look up
};
Requests& requests() {
  static Requests r;
  return r;
}

int query_fn(void* extra, MPI_Status* status) {
  // The operation's error is not libmpi's to report: a generalized request has no communicator, so
  // libmpi would raise it on MPI_COMM_WORLD's handler. The calls that complete requests raise it on
  // the operation's own (RequestView).
  const Operation& op = **static_cast<std::shared_ptr<Operation>*>(extra);
  op.fill(status);
  status->MPI_ERROR = MPI_SUCCESS;
  return MPI_SUCCESS;
}
int free_fn(void* extra) {
  auto* op = static_cast<std::shared_ptr<Operation>*>(extra);
  {
    Requests& r = requests();
    std::lock_guard lock(r.mutex);
    r.live.erase((*op)->request);
    r.size.store(r.live.size());
  }
  delete op;
  return MPI_SUCCESS;
}
int cancel_fn(void* extra, int complete) {
  if (complete == 0) (*static_cast<std::shared_ptr<Operation>*>(extra))->request_cancel();
  return MPI_SUCCESS;
}

/// Waits for a receive and a send (in that order in `pair`) while driving the pending operations;
/// the first error of either, which went through the communicator's handler once.
int wait_pair(MPI_Request pair[2], MPI_Status statuses[2]) {
  RequestView view(2, pair);
  int rc = MPI_SUCCESS;
  for (;;) {
    drive();
    int flag = 0;
    rc = PMPI_Testall(2, view.data(), &flag, statuses);
    if (rc != MPI_SUCCESS || flag != 0) break;
    sched_yield();
  }
  view.commit();
  if (rc == MPI_ERR_IN_STATUS)  // libmpi's own, through the handler already
    return statuses[0].MPI_ERROR != MPI_SUCCESS ? statuses[0].MPI_ERROR : statuses[1].MPI_ERROR;
  if (rc != MPI_SUCCESS) return rc;
  rc = view.completed(MPI_SUCCESS, 0);
  return rc != MPI_SUCCESS ? rc : view.completed(MPI_SUCCESS, 1);
}

/// After MPI_Init: the private communicator of the chunks and the largest tag.
int open_wire(const char* call) {
  Wire& w = wire();
  const int rc = PMPI_Comm_dup(MPI_COMM_WORLD, &w.comm);
  if (rc != MPI_SUCCESS)
    return report(call, rc, "MPI_Comm_dup(MPI_COMM_WORLD) for the hdsm_mpi chunks failed");
  PMPI_Comm_set_errhandler(w.comm, MPI_ERRORS_RETURN);
  if (const int rc = PMPI_Comm_dup(MPI_COMM_SELF, &w.tokens); rc != MPI_SUCCESS)
    return report(call, rc, "MPI_Comm_dup(MPI_COMM_SELF) for the hdsm_mpi message handles failed");
  PMPI_Comm_set_errhandler(w.tokens, MPI_ERRORS_RETURN);
  if (const int rc = PMPI_Comm_dup(MPI_COMM_WORLD, &w.groups); rc != MPI_SUCCESS)
    return report(call, rc, "MPI_Comm_dup(MPI_COMM_WORLD) for the MPI_Comm_create_group barriers failed");
  PMPI_Comm_set_errhandler(w.groups, MPI_ERRORS_RETURN);
  int* tag_ub = nullptr;
  int flag = 0;
  PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  if (flag != 0 && tag_ub != nullptr) w.tag_ub = *tag_ub;
  return MPI_SUCCESS;
}

/// The operation receiving a message MPI_Mprobe/MPI_Improbe matched; nullptr with MPI_SUCCESS for
/// a handle hdsm_mpi did not give out (MPI_MESSAGE_NO_PROC, or not a message at all), which goes to
/// libmpi as it is.
int matched_receive(const char* call, void* buf, int count, MPI_Datatype type, MPI_Message* message,
                    std::shared_ptr<Operation>& op) {
  op = nullptr;
  if (message == nullptr) return MPI_SUCCESS;
  ProgressEngine& e = engine();
  std::lock_guard lock(e.mutex);
  const auto it = matched().find(*message);
  if (it == matched().end()) return MPI_SUCCESS;
  if (const int rc = check_receive(call, buf, count, type, MPI_ANY_SOURCE, MPI_ANY_TAG, it->second.comm);
      rc != MPI_SUCCESS)
    return rc;  // the handle stays the user's
  UserBuffer b;
  if (const int rc = describe(call, buf, count, type, b); rc != MPI_SUCCESS)
    return refuse(it->second.comm, rc);
  return make_matched_receive(call, b, message, op);
}

using HostSend = int (*)(const void*, int, MPI_Datatype, int, int, MPI_Comm);

/// A blocking send in `mode`: an operation from a shared object; from host memory libmpi's call
/// (`host`), or its nonblocking form (`ihost`) driven to its end while operations are pending.
int blocking_send(const char* call, SendMode mode, HostSend host, HostRequestSend ihost, const void* buf,
                  int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  try {
    UserBuffer b;
    if (const int rc = describe_send(call, buf, count, type, dest, comm, b); rc != MPI_SUCCESS) return rc;
    if (!b.shared()) {
      if (idle()) return host(buf, count, type, dest, tag, comm);
      MPI_Request request = MPI_REQUEST_NULL;
      const int rc = ihost(buf, count, type, dest, tag, comm, &request);
      return rc != MPI_SUCCESS ? rc : wait_driving(&request, MPI_STATUS_IGNORE);
    }
    return finish(make_send(call, b, dest, tag, comm, mode), MPI_STATUS_IGNORE);
  } catch (const std::exception& e) {
    return internal(call, comm, e);
  }
}

/// A nonblocking send in `mode`: an operation from a shared object, libmpi's `host` otherwise.
int nonblocking_send(const char* call, SendMode mode, HostRequestSend host, const void* buf, int count,
                     MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* request) {
  return request_send(call, host, buf, count, type, dest, tag, comm, request, [&](const UserBuffer& b) {
    return start(make_send(call, b, dest, tag, comm, mode), request);
  });
}

}  // namespace

bool drive() {
  bool done = false;
  {
    ProgressEngine& e = engine();
    std::lock_guard lock(e.mutex);
    if (!e.pending.empty() || !e.orphans.empty()) drive_locked(e);
    done = e.pending.empty();
  }
  release_freed();
  return done;
}

bool idle() {
  ProgressEngine& e = engine();
  std::lock_guard lock(e.mutex);
  return e.pending.empty() && e.orphans.empty();
}

int finish(const std::shared_ptr<Operation>& op, MPI_Status* status) {
  enqueue(op);
  for (;;) {
    {
      ProgressEngine& e = engine();
      std::lock_guard lock(e.mutex);
      drive_locked(e);
      if (op->done) break;
    }
    sched_yield();
  }
  op->fill(status);
  if (op->error() != MPI_SUCCESS && !op->error_handled()) PMPI_Comm_call_errhandler(op->comm(), op->error());
  return op->error();
}

int start(const std::shared_ptr<Operation>& op, MPI_Request* request) {
  auto* extra = new std::shared_ptr<Operation>(op);
  const int rc = PMPI_Grequest_start(query_fn, free_fn, cancel_fn, extra, &op->request);
  if (rc != MPI_SUCCESS) {
    delete extra;
    return report(op->call(), rc, "MPI_Grequest_start failed");
  }
  *request = op->request;
  {
    Requests& r = requests();
    std::lock_guard lock(r.mutex);
    r.live.emplace(op->request, op);
    r.size.store(r.live.size());
  }
  enqueue(op);
  return MPI_SUCCESS;
}

std::shared_ptr<Operation> operation_of(MPI_Request request) {
  Requests& r = requests();
  if (r.size.load() == 0 || request == MPI_REQUEST_NULL) return nullptr;
  std::lock_guard lock(r.mutex);
  const auto it = r.live.find(request);
  return it == r.live.end() ? nullptr : it->second;
}

bool operations_live() { return requests().size.load() != 0; }

bool engine_uses(MPI_Comm comm, bool pending_only) {
  ProgressEngine& e = engine();
  std::lock_guard lock(e.mutex);
  if (std::any_of(e.pending.begin(), e.pending.end(), [&](const auto& op) { return op->comm() == comm; }))
    return true;
  if (pending_only) return false;
  if (std::any_of(matched().begin(), matched().end(), [&](const auto& m) { return m.second.comm == comm; }))
    return true;
  Requests& r = requests();
  std::lock_guard live(r.mutex);
  return std::any_of(r.live.begin(), r.live.end(), [&](const auto& op) { return op.second->comm() == comm; });
}

void forget_held(MPI_Comm comm) {
  ProgressEngine& e = engine();
  std::lock_guard lock(e.mutex);
  std::erase_if(held(), [&](const Held& h) { return h.comm == comm; });
}

int drive_until(const std::function<int(int& flag)>& test) {
  // A yield every 64 polls, as os::spin_until_for: a collective of ranks that are all there completes
  // in a few polls, which a yield each (a system call) made several times slower.
  for (unsigned polls = 1;; ++polls) {
    drive();
    int flag = 0;
    const int rc = test(flag);
    if (rc != MPI_SUCCESS || flag != 0) return rc;
    if (polls % 64 == 0) sched_yield();
  }
}

int wait_driving(MPI_Request* request, MPI_Status* status) {
  return drive_until([&](int& flag) { return PMPI_Test(request, &flag, status); });
}

int describe_send(const char* call, const void* buf, int count, MPI_Datatype type, int dest, MPI_Comm comm,
                  UserBuffer& out) {
  out = UserBuffer{};
  if (dest == MPI_PROC_NULL) return MPI_SUCCESS;
  const int rc = describe(call, buf, count, type, out);
  return rc == MPI_SUCCESS ? rc : refuse(comm, rc);
}

int request_send(const char* call, HostRequestSend host, const void* buf, int count, MPI_Datatype type,
                 int dest, int tag, MPI_Comm comm, MPI_Request* request,
                 const std::function<int(const UserBuffer&)>& shared) {
  try {
    UserBuffer b;
    if (const int rc = describe_send(call, buf, count, type, dest, comm, b); rc != MPI_SUCCESS) return rc;
    if (!b.shared()) return host(buf, count, type, dest, tag, comm, request);
    return shared(b);
  } catch (const std::exception& e) {
    return internal(call, comm, e);
  }
}

int refuse(MPI_Comm comm, int code) {
  PMPI_Comm_call_errhandler(comm, code);
  return code;
}

int internal(const char* call, MPI_Comm comm, const std::exception& e) {
  return refuse(comm, report(call, MPI_ERR_INTERN, fmt::format("internal error: {}", e.what())));
}

}  // namespace hdsm::mpi

using namespace hdsm::mpi;

extern "C" {
HDSM_VISIBLE_BEGIN

int MPI_Init(int* argc, char*** argv) {
  const int rc = PMPI_Init(argc, argv);
  return rc != MPI_SUCCESS ? rc : open_wire("MPI_Init");
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int rc = PMPI_Init_thread(argc, argv, required, provided);
  return rc != MPI_SUCCESS ? rc : open_wire("MPI_Init_thread");
}

int MPI_Finalize(void) {
  // Requests nobody waited for still finish their transfers; but a receive no rank ever sends to
  // would keep this loop going forever, so after HDSM_MPI_FINALIZE_WAIT they are abandoned, with a
  // message. (A malformed knob failed the runtime that made the requests already: the default here.)
  std::int64_t wait_ms = 10000;
  try {
    wait_ms = hdsm::Config::from_environment().integer("HDSM_MPI_FINALIZE_WAIT");
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): the default above
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (!drive()) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr,
                   "hdsm MPI: MPI_Finalize: requests on shared objects still pending after %lld ms "
                   "(HDSM_MPI_FINALIZE_WAIT: a receive that no rank sends to, or a send that no rank "
                   "receives, or a cluster session still open: end it before MPI_Finalize); abandoned\n",
                   static_cast<long long>(wait_ms));
      break;
    }
    sched_yield();
  }
  release_freed(true);
  Wire& w = wire();
  if (w.comm != MPI_COMM_NULL) PMPI_Comm_free(&w.comm);
  if (w.tokens != MPI_COMM_NULL) PMPI_Comm_free(&w.tokens);
  if (w.groups != MPI_COMM_NULL) PMPI_Comm_free(&w.groups);
  return PMPI_Finalize();
}

int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return blocking_send("MPI_Send", SendMode::standard, PMPI_Send, PMPI_Isend, buf, count, type, dest, tag,
                       comm);
}

int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return blocking_send("MPI_Ssend", SendMode::synchronous, PMPI_Ssend, PMPI_Issend, buf, count, type, dest,
                       tag, comm);
}

int MPI_Rsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return blocking_send("MPI_Rsend", SendMode::standard, PMPI_Rsend, PMPI_Irsend, buf, count, type, dest, tag,
                       comm);
}

int MPI_Bsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return blocking_send("MPI_Bsend", SendMode::buffered, PMPI_Bsend, PMPI_Ibsend, buf, count, type, dest, tag,
                       comm);
}

int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
              MPI_Request* request) {
  return nonblocking_send("MPI_Isend", SendMode::standard, PMPI_Isend, buf, count, type, dest, tag, comm,
                          request);
}

int MPI_Issend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request* request) {
  return nonblocking_send("MPI_Issend", SendMode::synchronous, PMPI_Issend, buf, count, type, dest, tag, comm,
                          request);
}

int MPI_Irsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request* request) {
  return nonblocking_send("MPI_Irsend", SendMode::standard, PMPI_Irsend, buf, count, type, dest, tag, comm,
                          request);
}

int MPI_Ibsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request* request) {
  return nonblocking_send("MPI_Ibsend", SendMode::buffered, PMPI_Ibsend, buf, count, type, dest, tag, comm,
                          request);
}

int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status* status) {
  try {
    if (source == MPI_PROC_NULL) return PMPI_Recv(buf, count, type, source, tag, comm, status);
    if (const int rc = check_receive("MPI_Recv", buf, count, type, source, tag, comm); rc != MPI_SUCCESS)
      return rc;
    UserBuffer b;
    if (const int rc = describe("MPI_Recv", buf, count, type, b); rc != MPI_SUCCESS) return refuse(comm, rc);
    return finish(make_receive("MPI_Recv", b, source, tag, comm), status);
  } catch (const std::exception& e) {
    return internal("MPI_Recv", comm, e);
  }
}

int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Request* request) {
  try {
    if (source == MPI_PROC_NULL) return PMPI_Irecv(buf, count, type, source, tag, comm, request);
    if (const int rc = check_receive("MPI_Irecv", buf, count, type, source, tag, comm); rc != MPI_SUCCESS)
      return rc;
    UserBuffer b;
    if (const int rc = describe("MPI_Irecv", buf, count, type, b); rc != MPI_SUCCESS) return refuse(comm, rc);
    return start(make_receive("MPI_Irecv", b, source, tag, comm), request);
  } catch (const std::exception& e) {
    return internal("MPI_Irecv", comm, e);
  }
}

int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                 MPI_Status* status) {
  try {
    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Status statuses[2];
    int rc = MPI_Irecv(recvbuf, recvcount, recvtype, source, recvtag, comm, &requests[0]);
    if (rc != MPI_SUCCESS) return rc;
    rc = MPI_Isend(sendbuf, sendcount, sendtype, dest, sendtag, comm, &requests[1]);
    if (rc != MPI_SUCCESS) {
      wait_driving(&requests[0], MPI_STATUS_IGNORE);
      return rc;
    }
    rc = wait_pair(requests, statuses);
    give_status(status, statuses[0]);
    return rc;
  } catch (const std::exception& e) {
    return internal("MPI_Sendrecv", comm, e);
  }
}

int MPI_Sendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int sendtag, int source,
                         int recvtag, MPI_Comm comm, MPI_Status* status) {
  try {
    UserBuffer b;
    if (const int rc = describe("MPI_Sendrecv_replace", buf, count, type, b); rc != MPI_SUCCESS)
      return refuse(comm, rc);
    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Status statuses[2];
    std::vector<std::byte> copy;
    int rc = MPI_SUCCESS;
    if (b.shared()) {
      // The send reads the object (from the device, chunk by chunk) while the message arrives, so
      // the message goes to host memory first and into the object once both are done.
      if (b.bytes > static_cast<std::size_t>(INT_MAX))
        return refuse(
            comm, report("MPI_Sendrecv_replace", MPI_ERR_COUNT,
                         fmt::format("{} B in a shared object is more than one receive can take", b.bytes)));
      copy.resize(b.bytes);
      rc = MPI_Irecv(copy.data(), static_cast<int>(b.bytes), MPI_BYTE, source, recvtag, comm, &requests[0]);
      if (rc != MPI_SUCCESS) return rc;
      rc = MPI_Isend(buf, count, type, dest, sendtag, comm, &requests[1]);
    } else {
      // The send goes from a packed copy, so the receive may fill the buffer at once (and through
      // hdsm_mpi, which takes chunked messages apart).
      int size = 0, position = 0;
      rc = PMPI_Pack_size(count, type, comm, &size);
      if (rc != MPI_SUCCESS) return refuse(comm, rc);
      copy.resize(static_cast<std::size_t>(size));
      rc = PMPI_Pack(buf, count, type, copy.data(), size, &position, comm);
      if (rc != MPI_SUCCESS) return refuse(comm, rc);
      rc = MPI_Irecv(buf, count, type, source, recvtag, comm, &requests[0]);
      if (rc != MPI_SUCCESS) return rc;
      rc = PMPI_Isend(copy.data(), position, MPI_PACKED, dest, sendtag, comm, &requests[1]);
    }
    if (rc != MPI_SUCCESS) {
      wait_driving(&requests[0], MPI_STATUS_IGNORE);
      return rc;
    }
    rc = wait_pair(requests, statuses);
    if (rc == MPI_SUCCESS && b.shared() && source != MPI_PROC_NULL) {
      MPI_Count got = 0;
      PMPI_Get_elements_x(&statuses[0], MPI_BYTE, &got);
      std::vector<hdsm::Event> written;
      try {
        b.model->copy(b.data, copy.data(), static_cast<std::size_t>(got), &written);
        for (const hdsm::Event& e : written) e.wait();
      } catch (const std::exception& e) {
        rc = refuse(comm, report("MPI_Sendrecv_replace", MPI_ERR_BUFFER,
                                 fmt::format("writing the received {} B into the shared object at {}: {}",
                                             got, buf, e.what())));
      }
    }
    give_status(status, statuses[0]);
    return rc;
  } catch (const std::exception& e) {
    return internal("MPI_Sendrecv_replace", comm, e);
  }
}

int MPI_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
  if (source == MPI_PROC_NULL) return PMPI_Iprobe(source, tag, comm, flag, status);
  try {
    drive();  // receives posted before the probe match first, as they would inside MPI
    ProgressEngine& e = engine();
    std::lock_guard lock(e.mutex);
    return probe(source, tag, comm, flag, status);
  } catch (const std::exception& x) {
    return internal("MPI_Iprobe", comm, x);
  }
}

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
  if (source == MPI_PROC_NULL) return PMPI_Probe(source, tag, comm, status);
  for (int flag = 0;;) {
    const int rc = MPI_Iprobe(source, tag, comm, &flag, status);
    if (rc != MPI_SUCCESS || flag != 0) return rc;
    sched_yield();
  }
}

int MPI_Improbe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* message, MPI_Status* status) {
  if (source == MPI_PROC_NULL) return PMPI_Improbe(source, tag, comm, flag, message, status);
  try {
    drive();  // receives posted before the probe match first
    ProgressEngine& e = engine();
    std::lock_guard lock(e.mutex);
    return matched_probe(source, tag, comm, flag, message, status);
  } catch (const std::exception& x) {
    return internal("MPI_Improbe", comm, x);
  }
}

int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message* message, MPI_Status* status) {
  if (source == MPI_PROC_NULL) return PMPI_Mprobe(source, tag, comm, message, status);
  for (int flag = 0;;) {
    const int rc = MPI_Improbe(source, tag, comm, &flag, message, status);
    if (rc != MPI_SUCCESS || flag != 0) return rc;
    sched_yield();
  }
}

int MPI_Mrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Status* status) {
  try {
    std::shared_ptr<Operation> op;
    if (const int rc = matched_receive("MPI_Mrecv", buf, count, type, message, op); rc != MPI_SUCCESS)
      return rc;
    return op ? finish(op, status) : PMPI_Mrecv(buf, count, type, message, status);
  } catch (const std::exception& e) {
    return internal("MPI_Mrecv", MPI_COMM_WORLD, e);
  }
}

int MPI_Imrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Request* request) {
  try {
    std::shared_ptr<Operation> op;
    if (const int rc = matched_receive("MPI_Imrecv", buf, count, type, message, op); rc != MPI_SUCCESS)
      return rc;
    return op ? start(op, request) : PMPI_Imrecv(buf, count, type, message, request);
  } catch (const std::exception& e) {
    return internal("MPI_Imrecv", MPI_COMM_WORLD, e);
  }
}

// Each sees the user's requests through a RequestView (persistent.hpp), so a persistent request of
// hdsm_mpi's is its running operation's request and stays the user's handle once that completed.

int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  RequestView view(1, request);
  const int rc = idle() ? PMPI_Wait(view.data(), status) : wait_driving(view.data(), status);
  view.commit();
  return view.completed(rc, 0);
}

int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  drive();
  RequestView view(1, request);
  const int rc = PMPI_Test(view.data(), flag, status);
  view.commit();
  return *flag != 0 ? view.completed(rc, 0) : rc;
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  RequestView view(count, requests);
  int rc = MPI_SUCCESS;
  if (idle()) {
    rc = PMPI_Waitall(count, view.data(), statuses);
  } else {
    for (int flag = 0;;) {
      drive();
      rc = PMPI_Testall(count, view.data(), &flag, statuses);
      if (rc != MPI_SUCCESS || flag != 0) break;
      sched_yield();
    }
  }
  view.commit();
  return view.completed_some(rc, count, nullptr, statuses);
}

int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  drive();
  RequestView view(count, requests);
  const int rc = PMPI_Testall(count, view.data(), flag, statuses);
  view.commit();
  return *flag != 0 ? view.completed_some(rc, count, nullptr, statuses) : rc;
}

int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  RequestView view(count, requests);
  int rc = MPI_SUCCESS;
  if (idle()) {
    rc = PMPI_Waitany(count, view.data(), index, status);
  } else {
    for (int flag = 0;;) {
      drive();
      rc = PMPI_Testany(count, view.data(), index, &flag, status);
      if (rc != MPI_SUCCESS || flag != 0) break;
      sched_yield();
    }
  }
  view.commit();
  return view.completed(rc, *index);
}

int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  drive();
  RequestView view(count, requests);
  const int rc = PMPI_Testany(count, view.data(), index, flag, status);
  view.commit();
  return *flag != 0 ? view.completed(rc, *index) : rc;
}

int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) {
  RequestView view(incount, requests);
  int rc = MPI_SUCCESS;
  if (idle()) {
    rc = PMPI_Waitsome(incount, view.data(), outcount, indices, statuses);
  } else {
    for (;;) {
      drive();
      rc = PMPI_Testsome(incount, view.data(), outcount, indices, statuses);
      if (rc != MPI_SUCCESS || *outcount != 0) break;
      sched_yield();
    }
  }
  view.commit();
  return *outcount == MPI_UNDEFINED ? rc : view.completed_some(rc, *outcount, indices, statuses);
}

int MPI_Testsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) {
  drive();
  RequestView view(incount, requests);
  const int rc = PMPI_Testsome(incount, view.data(), outcount, indices, statuses);
  view.commit();
  return *outcount == MPI_UNDEFINED ? rc : view.completed_some(rc, *outcount, indices, statuses);
}

HDSM_VISIBLE_END
}  // extern "C"
