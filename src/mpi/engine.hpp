// The pending operations of libhdsm_mpi and the calls that drive them (interpose.cpp). Every
// intercepted call that may wait drives all pending operations in posting order, so operations
// that depend on each other (two ranks that both send and receive) all move.
#pragma once

#include <hdsm/export.h>

#include "mpi/operations.hpp"

#include <exception>
#include <functional>
#include <memory>

namespace hdsm::mpi {

/// One pass over the pending operations; true when nothing is pending any more.
bool drive();
/// True when no operation is pending and no failed one waits for its requests to complete.
bool idle();
/// Drives until `op` is done, then fills `status`; its error goes through its communicator's error
/// handler (unless an MPI call already took it there).
HDSM_API int finish(const std::shared_ptr<Operation>& op, MPI_Status* status);  // exported for the tests
/// Puts `op` behind a generalized request (MPI_Grequest_start), stored in op->request and
/// *request, and makes it pending.
HDSM_API int start(const std::shared_ptr<Operation>& op, MPI_Request* request);  // exported for the tests
/// The operation behind a generalized request start() made, until libmpi frees that request; null
/// for any other request.
std::shared_ptr<Operation> operation_of(MPI_Request request);
/// False when no request of start()'s is alive (nothing to look up).
bool operations_live();
/// True while a pending operation, a request of start()'s not yet freed or a message matched by a
/// probe (matched()) uses `comm`; `pending_only`: a pending operation.
bool engine_uses(MPI_Comm comm, bool pending_only = false);
/// True while a persistent request of hdsm_mpi's (persistent.cpp) was made on `comm`.
bool persistent_uses(MPI_Comm comm);
/// True while a RequestView holds operations (whose communicators it may still raise errors on).
bool views_hold_operations();
/// Drops the held messages of `comm` (probe.cpp): once it is freed nobody can receive them, and a
/// new communicator at the same handle must not get them.
void forget_held(MPI_Comm comm);
/// Frees the communicators the program freed while hdsm_mpi still used them (communicators.cpp)
/// once nothing uses them; `all`: every one, at MPI_Finalize.
void release_freed(bool all = false);
/// Drives the pending operations until `test` (a nonblocking MPI test) sets its flag or fails; its
/// error code.
int drive_until(const std::function<int(int& flag)>& test);
/// Waits for a request of libmpi's while driving the pending operations.
int wait_driving(MPI_Request* request, MPI_Status* status);
/// describe() of a send buffer (nothing for MPI_PROC_NULL); its error through `comm`'s handler.
int describe_send(const char* call, const void* buf, int count, MPI_Datatype type, int dest, MPI_Comm comm,
                  UserBuffer& out);
/// libmpi's send calls that make a request (PMPI_Isend, PMPI_Send_init and their modes).
using HostRequestSend = int (*)(const void*, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request*);
/// A send call that makes a request: libmpi's `host` on host memory (and for MPI_PROC_NULL),
/// `shared` with the described buffer in a shared object; errors through `comm`'s handler.
int request_send(const char* call, HostRequestSend host, const void* buf, int count, MPI_Datatype type,
                 int dest, int tag, MPI_Comm comm, MPI_Request* request,
                 const std::function<int(const UserBuffer&)>& shared);
/// An error found before any transfer, through `comm`'s error handler (as MPI reports bad
/// arguments).
int refuse(MPI_Comm comm, int code);
/// An exception escaping an intercepted call: MPI_ERR_INTERN through `comm`'s error handler.
int internal(const char* call, MPI_Comm comm, const std::exception& e);

}  // namespace hdsm::mpi
