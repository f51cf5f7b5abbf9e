// Persistent requests whose transfers hdsm_mpi drives: every MPI_Recv_init (any receive may get a
// chunked message) and the MPI_*send_init calls on a shared object. The handle the user holds is
// libmpi's persistent receive of zero bytes on a private communicator, never started, so it is a
// real MPI_Request nothing else can match. MPI_Start posts the operation as the
// matching nonblocking call would and keeps its generalized request as the handle's active
// request; MPI_Wait* and MPI_Test* see that request through a RequestView, and a completed one
// leaves the persistent handle inactive, as MPI does with a persistent request.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace hdsm::mpi {

/// The user's requests as libmpi is to see them: a persistent handle becomes its active generalized
/// request, or MPI_REQUEST_NULL while inactive (libmpi treats both alike: an empty status, never an
/// index); any other request stays itself. Without a persistent handle among them the view is the user's
/// array itself.
class RequestView {
 public:
  RequestView(int count, MPI_Request* user);
  RequestView(const RequestView&) = delete;
  RequestView& operator=(const RequestView&) = delete;

  MPI_Request* data() { return view_.empty() ? user_ : view_.data(); }
  /// After the libmpi call: its changes to other requests go back to the user's array, and a
  /// persistent handle whose active request completed becomes inactive; the user's handle stays.
  void commit();

 private:
  MPI_Request* user_;
  std::vector<MPI_Request> view_;  // empty: no persistent handle among the user's requests
  std::vector<std::size_t> persistent_;
};

}  // namespace hdsm::mpi
