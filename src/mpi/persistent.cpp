// Persistent requests of libhdsm_mpi (persistent.hpp): the MPI_*_init calls, MPI_Start,
// MPI_Startall, MPI_Request_free, MPI_Cancel and MPI_Request_get_status, and the view MPI_Wait* and
// MPI_Test* take of the user's requests.
#include "mpi/persistent.hpp"

#include <hdsm/export.h>

#include "mpi/engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>

namespace hdsm::mpi {
namespace {

/// What MPI_Start posts: the arguments of the init call.
struct Persistent {
  const char* call = "";  // the init call, which names errors at MPI_Start too
  bool receive = false;
  SendMode mode = SendMode::standard;
  void* buf = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int peer = MPI_PROC_NULL;
  int tag = 0;
  MPI_Comm comm = MPI_COMM_NULL;
  bool shared = false;                    // the buffer was in a shared object at the init call
  MPI_Request active = MPI_REQUEST_NULL;  // the running operation's generalized request
};

struct Registry {
  std::mutex mutex;
  std::map<MPI_Request, Persistent> entries;  // by persistent handle
  std::atomic<std::size_t> size{0};           // read without the lock: no persistent handle, no view
};
Registry& registry() {
  static Registry r;
  return r;
}

/// The entry of the persistent handle `request`, copied (and erased with `erase`); none for any other
/// request.
std::optional<Persistent> find(const MPI_Request* request, bool erase) {
  if (request == nullptr) return std::nullopt;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.entries.find(*request);
  if (it == r.entries.end()) return std::nullopt;
  Persistent p = it->second;
  if (erase) {
    r.entries.erase(it);
    r.size.store(r.entries.size());
  }
  return p;
}

int create(const Persistent& p, MPI_Request* request) {
  const MPI_Comm comm = wire().tokens != MPI_COMM_NULL ? wire().tokens : MPI_COMM_SELF;
  if (const int rc = PMPI_Recv_init(nullptr, 0, MPI_BYTE, 0, 0, comm, request); rc != MPI_SUCCESS)
    return refuse(p.comm, report(p.call, rc, "MPI_Recv_init of the persistent request's handle failed"));
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.entries.emplace(*request, p);
  r.size.store(r.entries.size());
  return MPI_SUCCESS;
}

/// A persistent send in `mode`: hdsm_mpi's on a shared object, libmpi's (`host`) otherwise.
int init_send(const char* call, SendMode mode, HostRequestSend host, const void* buf, int count,
              MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* request) {
  return request_send(call, host, buf, count, type, dest, tag, comm, request, [&](const UserBuffer&) {
    return create({.call = call,
                   .mode = mode,
                   .buf = const_cast<void*>(buf),
                   .count = count,
                   .type = type,
                   .peer = dest,
                   .tag = tag,
                   .comm = comm,
                   .shared = true},
                  request);
  });
}

/// Posts `p` as its nonblocking call would (the registry's lock not held).
int post(Persistent p, MPI_Request handle) {
  UserBuffer b;
  if (const int rc = describe(p.call, p.buf, p.count, p.type, b); rc != MPI_SUCCESS)
    return refuse(p.comm, rc);
  if (p.shared && !b.shared())
    return refuse(
        p.comm,
        report(p.call, MPI_ERR_BUFFER,
               fmt::format("MPI_Start: buffer {} was in a shared object that has been freed since", p.buf)));
  const std::shared_ptr<Operation> op = p.receive ? make_receive(p.call, b, p.peer, p.tag, p.comm)
                                                  : make_send(p.call, b, p.peer, p.tag, p.comm, p.mode);
  MPI_Request active = MPI_REQUEST_NULL;
  if (const int rc = start(op, &active); rc != MPI_SUCCESS) return rc;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.entries.at(handle).active = active;
  return MPI_SUCCESS;
}

}  // namespace

std::atomic<int>& views_with_operations() {
  static std::atomic<int> views{0};
  return views;
}

bool views_hold_operations() { return views_with_operations().load() != 0; }

bool persistent_uses(MPI_Comm comm) {
  Registry& r = registry();
  if (r.size.load() == 0) return false;
  std::lock_guard lock(r.mutex);
  return std::any_of(r.entries.begin(), r.entries.end(),
                     [&](const auto& e) { return e.second.comm == comm; });
}

RequestView::~RequestView() {
  if (operations_.empty()) return;
  views_with_operations().fetch_sub(1);
  release_freed();
}

RequestView::RequestView(int count, MPI_Request* user) : user_(user) {
  if (count <= 0 || user == nullptr) return;
  if (Registry& r = registry(); r.size.load() != 0) {
    std::lock_guard lock(r.mutex);
    for (std::size_t i = 0; i < static_cast<std::size_t>(count); ++i) {
      const auto it = r.entries.find(user[i]);
      if (it == r.entries.end()) continue;
      if (view_.empty()) view_.assign(user, user + count);
      view_[i] = it->second.active;
      persistent_.push_back(i);
    }
  }
  if (!operations_live()) return;
  const MPI_Request* requests = data();
  for (std::size_t i = 0; i < static_cast<std::size_t>(count); ++i) {
    std::shared_ptr<Operation> op = operation_of(requests[i]);
    if (!op) continue;
    if (operations_.empty()) {
      operations_.resize(static_cast<std::size_t>(count));
      views_with_operations().fetch_add(1);  // before libmpi may free the request
    }
    operations_[i] = std::move(op);
  }
}

int RequestView::completed(int rc, int index) const {
  if (rc != MPI_SUCCESS || index < 0 || static_cast<std::size_t>(index) >= operations_.size()) return rc;
  const Operation* op = operations_[static_cast<std::size_t>(index)].get();
  if (op == nullptr || op->error() == MPI_SUCCESS) return rc;
  if (!op->error_handled()) PMPI_Comm_call_errhandler(op->comm(), op->error());
  return op->error();
}

int RequestView::completed_some(int rc, int n, const int* indices, MPI_Status* statuses) const {
  if (operations_.empty() || (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS)) return rc;
  const auto operation = [&](int k) -> const Operation* {
    const int i = indices == nullptr ? k : indices[k];
    const Operation* op = i >= 0 && static_cast<std::size_t>(i) < operations_.size()
                              ? operations_[static_cast<std::size_t>(i)].get()
                              : nullptr;
    return op != nullptr && op->error() != MPI_SUCCESS ? op : nullptr;
  };
  const Operation* first = nullptr;  // the first failed operation whose error was not raised yet
  bool failed = false;
  for (int k = 0; k < n; ++k) {
    const Operation* op = operation(k);
    if (op == nullptr) continue;
    failed = true;
    if (first == nullptr && !op->error_handled()) first = op;
  }
  if (!failed) return rc;
  if (statuses != MPI_STATUSES_IGNORE) {
    for (int k = 0; k < n; ++k) {
      const Operation* op = operation(k);
      if (op != nullptr)
        statuses[k].MPI_ERROR = op->error();
      else if (rc == MPI_SUCCESS)  // libmpi set no error field: MPI_ERR_IN_STATUS sets them all
        statuses[k].MPI_ERROR = MPI_SUCCESS;
    }
  }
  if (rc == MPI_SUCCESS && first != nullptr) PMPI_Comm_call_errhandler(first->comm(), MPI_ERR_IN_STATUS);
  return MPI_ERR_IN_STATUS;
}

void RequestView::commit() {
  if (view_.empty()) return;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::size_t next = 0;
  for (std::size_t i = 0; i < view_.size(); ++i) {
    if (next < persistent_.size() && persistent_[next] == i) {
      ++next;
      if (const auto it = r.entries.find(user_[i]); it != r.entries.end()) it->second.active = view_[i];
    } else {
      user_[i] = view_[i];
    }
  }
}

}  // namespace hdsm::mpi

using namespace hdsm::mpi;

extern "C" {
HDSM_VISIBLE_BEGIN

int MPI_Send_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  return init_send("MPI_Send_init", SendMode::standard, PMPI_Send_init, buf, count, type, dest, tag, comm,
                   request);
}

int MPI_Ssend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                   MPI_Request* request) {
  return init_send("MPI_Ssend_init", SendMode::synchronous, PMPI_Ssend_init, buf, count, type, dest, tag,
                   comm, request);
}

int MPI_Rsend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                   MPI_Request* request) {
  return init_send("MPI_Rsend_init", SendMode::standard, PMPI_Rsend_init, buf, count, type, dest, tag, comm,
                   request);
}

int MPI_Bsend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                   MPI_Request* request) {
  return init_send("MPI_Bsend_init", SendMode::buffered, PMPI_Bsend_init, buf, count, type, dest, tag, comm,
                   request);
}

int MPI_Recv_init(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  try {
    if (source == MPI_PROC_NULL) return PMPI_Recv_init(buf, count, type, source, tag, comm, request);
    if (const int rc = check_receive("MPI_Recv_init", buf, count, type, source, tag, comm); rc != MPI_SUCCESS)
      return rc;
    UserBuffer b;
    if (const int rc = describe("MPI_Recv_init", buf, count, type, b); rc != MPI_SUCCESS)
      return refuse(comm, rc);
    return create({.call = "MPI_Recv_init",
                   .receive = true,
                   .buf = buf,
                   .count = count,
                   .type = type,
                   .peer = source,
                   .tag = tag,
                   .comm = comm,
                   .shared = b.shared()},
                  request);
  } catch (const std::exception& e) {
    return internal("MPI_Recv_init", comm, e);
  }
}

int MPI_Start(MPI_Request* request) {
  try {
    const std::optional<Persistent> p = find(request, false);
    if (!p) return PMPI_Start(request);
    if (p->active != MPI_REQUEST_NULL)
      return refuse(p->comm, report("MPI_Start", MPI_ERR_REQUEST,
                                    fmt::format("the persistent request of {} on {} is still active", p->call,
                                                p->buf)));
    return post(*p, *request);
  } catch (const std::exception& e) {
    return internal("MPI_Start", MPI_COMM_WORLD, e);
  }
}

int MPI_Startall(int count, MPI_Request requests[]) {
  for (int i = 0; i < count; ++i)
    if (const int rc = MPI_Start(&requests[i]); rc != MPI_SUCCESS) return rc;
  return MPI_SUCCESS;
}

int MPI_Request_free(MPI_Request* request) {
  std::optional<Persistent> p = find(request, true);
  if (!p) return PMPI_Request_free(request);
  // A running transfer goes on to its end (MPI's rule for a freed active request): the engine
  // still holds its operation and completes the generalized request.
  if (p->active != MPI_REQUEST_NULL) PMPI_Request_free(&p->active);
  const int rc = PMPI_Request_free(request);
  release_freed();  // a communicator the program freed may have waited for this request
  return rc;
}

int MPI_Cancel(MPI_Request* request) {
  RequestView view(1, request);  // a persistent request's running operation
  return PMPI_Cancel(view.data());
}

int MPI_Request_get_status(MPI_Request request, int* flag, MPI_Status* status) {
  drive();  // a caller that polls with this call alone still sees its transfer move
  // An inactive persistent request is MPI_REQUEST_NULL to libmpi: flag set, an empty status.
  RequestView view(1, &request);
  const int rc = PMPI_Request_get_status(*view.data(), flag, status);
  return *flag != 0 ? view.completed(rc, 0) : rc;
}

HDSM_VISIBLE_END
}  // extern "C"
