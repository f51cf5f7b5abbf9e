// Persistent requests whose transfers hdsm_mpi drives: every MPI_Recv_init (any receive may get a
// chunked message) and the MPI_*send_init calls on a shared object. The handle the user holds is
// libmpi's persistent receive of zero bytes on a private communicator, never started, so it is a
// real MPI_Request nothing else can match. MPI_Start posts the operation as the
// matching nonblocking call would and keeps its generalized request as the handle's active
// request; MPI_Wait* and MPI_Test* see that request through a RequestView, and a completed one
// leaves the persistent handle inactive, as MPI does with a persistent request.
#pragma once

#include "mpi/operations.hpp"

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace hdsm::mpi {

/// The user's requests as libmpi is to see them: a persistent handle becomes its active generalized
/// request, or MPI_REQUEST_NULL while inactive (libmpi treats both alike: an empty status, never an
/// index); any other request stays itself. Without a persistent handle among them the view is the user's
/// array itself.
class RequestView {
 public:
  RequestView(int count, MPI_Request* user);
  ~RequestView();
  RequestView(const RequestView&) = delete;
  RequestView& operator=(const RequestView&) = delete;

  MPI_Request* data() { return view_.empty() ? user_ : view_.data(); }
  /// After the libmpi call: its changes to other requests go back to the user's array, and a
  /// persistent handle whose active request completed becomes inactive; the user's handle stays.
  void commit();

  /// After a libmpi call that completed request `index` (MPI_Wait, MPI_Test with its flag set,
  /// MPI_Waitany's index; MPI_UNDEFINED: none) and returned `rc`: where hdsm_mpi's operation
  /// behind that request failed, its error, raised on the operation's communicator (unless it went
  /// through that handler when it happened); `rc` otherwise.
  int completed(int rc, int index) const;
  /// After a libmpi call that completed the requests `indices[0..n)` (every request for MPI_Waitall
  /// and a successful MPI_Testall: `indices` null), `statuses[k]` being indices[k]'s: where
  /// operations failed, MPI_ERR_IN_STATUS with every status's MPI_ERROR set, raised on the first
  /// failed operation's communicator; `rc` otherwise.
  int completed_some(int rc, int n, const int* indices, MPI_Status* statuses) const;

 private:
  MPI_Request* user_;
  std::vector<MPI_Request> view_;  // empty: no persistent handle among the user's requests
  std::vector<std::size_t> persistent_;
  // hdsm_mpi's operations behind the requests, by index (empty: none), held so that their errors
  // outlive the requests libmpi frees when they complete.
  std::vector<std::shared_ptr<Operation>> operations_;
};

}  // namespace hdsm::mpi
