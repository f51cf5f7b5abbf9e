// What every operation of libhdsm_mpi shares: the library's wire state, error reports, the
// description of a user buffer (and the runtime's MPI pool and receive buffers), statuses, the
// operations' common parts and the helpers of the send, receive and probe files.
#include "mpi/operations.hpp"

#include "runtime/internal.hpp"
#include "runtime/shared_ranges.hpp"

#include <hdsm/error.hpp>

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

void set_status(MPI_Status* status, int source, int tag, MPI_Count bytes) {
  if (status == MPI_STATUS_IGNORE) return;
  status->MPI_SOURCE = source;
  status->MPI_TAG = tag;
  PMPI_Status_set_elements_x(status, MPI_BYTE, bytes);
  PMPI_Status_set_cancelled(status, 0);
}

void give_status(MPI_Status* status, const MPI_Status& from) {
  if (status == MPI_STATUS_IGNORE) return;
  const int error = status->MPI_ERROR;
  *status = from;
  status->MPI_ERROR = error;
}

void Operation::fill(MPI_Status* status) const {
  set_status(status, source_, tag_, bytes_);
  if (cancelled_ && status != MPI_STATUS_IGNORE) PMPI_Status_set_cancelled(status, 1);
}

int check_receive(const char* call, const void* buf, int count, MPI_Datatype type, int source, int tag,
                  MPI_Comm comm) {
  const auto refused = [&](int code, const std::string& what) {
    report(call, code, what);
    // MPI_COMM_NULL has no handler: MPI reports on MPI_COMM_WORLD then.
    PMPI_Comm_call_errhandler(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, code);
    return code;
  };
  if (comm == MPI_COMM_NULL) return refused(MPI_ERR_COMM, "the communicator is MPI_COMM_NULL");
  if (count < 0) return refused(MPI_ERR_COUNT, fmt::format("count {} is negative", count));
  int size = 0;
  MPI_Aint extent = 0, true_lb = 0, true_extent = 0;
  bool contiguous = false;
  if (type == MPI_DATATYPE_NULL || !type_layout(type, size, extent, contiguous) ||
      PMPI_Type_get_true_extent(type, &true_lb, &true_extent) != MPI_SUCCESS)
    return refused(MPI_ERR_TYPE, "invalid datatype (MPI_DATATYPE_NULL or freed)");
  // As MPI checks it: a null buffer with data to take, unless the datatype's addresses are absolute
  // (MPI_BOTTOM).
  if (buf == nullptr && count > 0 && size > 0 && true_lb == 0)
    return refused(MPI_ERR_BUFFER, fmt::format("a null buffer for {} elements", count));
  if (tag != MPI_ANY_TAG && (tag < 0 || tag > wire().tag_ub))
    return refused(MPI_ERR_TAG, fmt::format("tag {} is not MPI_ANY_TAG nor in [0, {}]", tag, wire().tag_ub));
  if (source != MPI_ANY_SOURCE && source != MPI_PROC_NULL) {
    int ranks = 0;
    const int rc = intercomm(comm) ? PMPI_Comm_remote_size(comm, &ranks) : PMPI_Comm_size(comm, &ranks);
    if (rc != MPI_SUCCESS) return refused(MPI_ERR_COMM, "invalid communicator");
    if (source < 0 || source >= ranks)
      return refused(MPI_ERR_RANK, fmt::format("source {} is not MPI_ANY_SOURCE nor one of the "
                                               "communicator's {} ranks",
                                               source, ranks));
  }
  return MPI_SUCCESS;
}

void Operation::fail(int code, const std::string& what, bool handled) {
  if (error_ != MPI_SUCCESS) return;
  if (!what.empty()) report(call_, code, what);
  error_ = code;
  error_handled_ = handled;
}

void Operation::fail_internal(const std::string& what) {
  fail(MPI_ERR_INTERN, fmt::format("internal error: {}", what));
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

}  // namespace hdsm::mpi
