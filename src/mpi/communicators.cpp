// Communicators, windows and files under libhdsm_mpi: the calls that make one are collectives, which
// must let the pending operations move while the rank waits in them (so are MPI_Win_fence,
// MPI_Win_wait and the collective file calls); and a communicator the
// program frees while an operation of hdsm_mpi's still uses it lives on until that operation is done, as
// MPI_Comm_free promises ("pending operations complete normally").
#include <hdsm/export.h>

#include "mpi/engine.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <numeric>
#include <system_error>
#include <thread>
#include <vector>

#include <sched.h>

namespace hdsm::mpi {
namespace {

/// The communicators the program freed while hdsm_mpi used them, freed here later.
struct Freed {
  std::mutex mutex;
  std::vector<MPI_Comm> comms;
  std::atomic<bool> any{false};  // read without the lock on every drive()
};
Freed& freed() {
  static Freed f;
  return f;
}

bool used(MPI_Comm comm) { return engine_uses(comm) || persistent_uses(comm); }

/// Every rank of `comm` has entered the call: a driven MPI_Ibarrier before a communicator
/// constructor that has no nonblocking form. A receive posted before the call matches a message
/// another rank must hand over before it can enter (a rendezvous-sized MPI_Send, an MPI_Ssend);
/// once all are in, the constructor's own messages need nothing from hdsm_mpi. Every rank makes the
/// barrier, pending operations or not: a collective has to match on all of them.
int entered(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return MPI_SUCCESS;  // libmpi's call reports it, under its own name
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = PMPI_Ibarrier(comm, &request);
  return rc != MPI_SUCCESS ? rc : wait_driving(&request, MPI_STATUS_IGNORE);
}

/// The program's windows and files, each with a duplicate of the communicator it was made (opened)
/// on: their collective calls (MPI_Win_fence, MPI_Win_free, the collective file calls) make their
/// driven barrier (entered()) there, as the program may have freed its own communicator since.
template <class Handle>
struct Made {
  std::mutex mutex;
  std::map<Handle, MPI_Comm> comms;
};
Made<MPI_Win>& windows() {
  static Made<MPI_Win> w;
  return w;
}
Made<MPI_File>& files() {
  static Made<MPI_File> f;
  return f;
}

/// A window constructor or MPI_File_open (`make`, libmpi's) on `comm`: first a driven MPI_Comm_idup
/// of `comm`, which every rank has entered once it completes, then the call, then the duplicate
/// recorded for the handle it made.
template <class Handle, class Make>
int make_with_dup(Made<Handle>& made, MPI_Comm comm, Handle* out, Handle null, Make make) {
  MPI_Comm dup = MPI_COMM_NULL;
  if (comm != MPI_COMM_NULL) {  // else libmpi's call reports it, under its own name
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = PMPI_Comm_idup(comm, &dup, &request);
    if (rc == MPI_SUCCESS) rc = wait_driving(&request, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return rc;
  }
  const int rc = make();
  if (rc != MPI_SUCCESS || out == nullptr || *out == null) {
    if (dup != MPI_COMM_NULL) PMPI_Comm_free(&dup);
    return rc;
  }
  std::lock_guard lock(made.mutex);
  if (const auto [it, added] = made.comms.emplace(*out, dup); !added && dup != MPI_COMM_NULL)
    PMPI_Comm_free(&dup);  // a handle libmpi gave twice: keep the first one's
  return rc;
}

/// The duplicate make_with_dup() recorded for `handle`; MPI_COMM_NULL for any other handle.
template <class Handle>
MPI_Comm comm_of(Made<Handle>& made, Handle handle) {
  std::lock_guard lock(made.mutex);
  const auto it = made.comms.find(handle);
  return it == made.comms.end() ? MPI_COMM_NULL : it->second;
}
MPI_Comm window_comm(MPI_Win win) { return comm_of(windows(), win); }
MPI_Comm file_comm(MPI_File file) { return comm_of(files(), file); }

/// libmpi's `call`, a blocking call with no nonblocking form (the one-sided synchronization calls),
/// while a helper thread drives the pending operations: the rank may wait in it for another rank (a
/// target's MPI_Win_post, a lock's grant) that first needs a message this rank's pending operations
/// hand over. Two threads in MPI at once need MPI_THREAD_MULTIPLE; at a lower level, or where no
/// thread can be started, libmpi's call alone.
template <class Call>
int driving_meanwhile(Call call) {
  int level = MPI_THREAD_SINGLE;
  if (idle() || PMPI_Query_thread(&level) != MPI_SUCCESS || level != MPI_THREAD_MULTIPLE) return call();
  std::atomic<bool> done{false};
  std::thread helper;
  try {
    helper = std::thread([&done] {
      while (!done.load(std::memory_order_acquire) && !drive()) sched_yield();
    });
  } catch (const std::system_error&) {
    return call();
  }
  const int rc = call();
  done.store(true, std::memory_order_release);
  helper.join();
  return rc;
}

/// A collective call on a file (`call`, libmpi's): a driven barrier on the file's duplicate first.
template <class Call>
int on_file(MPI_File fh, Call call) {
  const int rc = entered(file_comm(fh));
  return rc != MPI_SUCCESS ? rc : call();
}

/// A collective call that frees `*handle` (`free`, libmpi's MPI_Win_free or MPI_File_close): a
/// driven barrier on its duplicate, the call, then the duplicate freed.
template <class Handle, class Free>
int free_with_dup(Made<Handle>& made, Handle* handle, Free free) {
  if (handle == nullptr) return free();
  const Handle was = *handle;
  MPI_Comm comm = comm_of(made, was);
  if (const int rc = entered(comm); rc != MPI_SUCCESS) return rc;
  const int rc = free();
  if (rc == MPI_SUCCESS && comm != MPI_COMM_NULL) {
    {
      std::lock_guard lock(made.mutex);
      made.comms.erase(was);
    }
    PMPI_Comm_free(&comm);
  }
  return rc;
}

}  // namespace

void release_freed(bool all) {
  Freed& f = freed();
  if (!f.any.load() || (!all && views_hold_operations())) return;
  std::lock_guard lock(f.mutex);
  std::erase_if(f.comms, [&](MPI_Comm& comm) {
    if (!all && used(comm)) return false;
    PMPI_Comm_free(&comm);
    return true;
  });
  f.any.store(!f.comms.empty());
}

}  // namespace hdsm::mpi

using namespace hdsm::mpi;

extern "C" {
HDSM_VISIBLE_BEGIN

int MPI_Comm_free(MPI_Comm* comm) {
  if (comm == nullptr || *comm == MPI_COMM_NULL || *comm == MPI_COMM_WORLD || *comm == MPI_COMM_SELF)
    return PMPI_Comm_free(comm);  // libmpi's error
  forget_held(*comm);
  if (!used(*comm)) return PMPI_Comm_free(comm);
  // An operation still matches on it, or a request the program has not completed yet will raise an
  // error on it: it goes when they are done (release_freed); the program's handle is gone now.
  Freed& f = freed();
  std::lock_guard lock(f.mutex);
  f.comms.push_back(*comm);
  f.any.store(true);
  *comm = MPI_COMM_NULL;
  return MPI_SUCCESS;
}

int MPI_Comm_disconnect(MPI_Comm* comm) {
  // MPI_Comm_disconnect waits for the communicator's pending communication, hdsm_mpi's included.
  if (comm != nullptr && *comm != MPI_COMM_NULL) {
    forget_held(*comm);
    while (engine_uses(*comm, true)) {
      drive();
      sched_yield();
    }
  }
  return PMPI_Comm_disconnect(comm);
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* out) {
  if (comm == MPI_COMM_NULL) return PMPI_Comm_dup(comm, out);
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = PMPI_Comm_idup(comm, out, &request);
  return rc != MPI_SUCCESS ? rc : wait_driving(&request, MPI_STATUS_IGNORE);
}

int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm* out) {
  const int rc = entered(comm);
  return rc != MPI_SUCCESS ? rc : PMPI_Comm_dup_with_info(comm, info, out);
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* out) {
  const int rc = entered(comm);
  return rc != MPI_SUCCESS ? rc : PMPI_Comm_split(comm, color, key, out);
}

int MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info, MPI_Comm* out) {
  const int rc = entered(comm);
  return rc != MPI_SUCCESS ? rc : PMPI_Comm_split_type(comm, type, key, info, out);
}

int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm* out) {
  const int rc = entered(comm);
  return rc != MPI_SUCCESS ? rc : PMPI_Comm_create(comm, group, out);
}

// Collective over `group` alone: the other ranks of `comm` never call it, so no barrier on `comm` can
// tell that the members are in. The members make a dissemination barrier of empty messages instead,
// driven, on hdsm_mpi's own duplicate of MPI_COMM_WORLD (at their world ranks) with the call's tag,
// which MPI asks threads that make communicators at once to keep apart. A group with a member outside
// MPI_COMM_WORLD (a spawned or connected process) gets libmpi's call alone.
int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm* out) {
  const auto call = [&] { return PMPI_Comm_create_group(comm, group, tag, out); };
  const Wire& w = wire();
  int me = MPI_UNDEFINED, n = 0;
  if (comm == MPI_COMM_NULL || group == MPI_GROUP_NULL || w.groups == MPI_COMM_NULL || tag < 0 ||
      tag > w.tag_ub || PMPI_Group_rank(group, &me) != MPI_SUCCESS || me == MPI_UNDEFINED ||
      PMPI_Group_size(group, &n) != MPI_SUCCESS || n < 2)
    return call();  // libmpi's error, its answer to a rank outside the group, or no one to wait for
  std::vector<int> ranks(static_cast<std::size_t>(n)), world(static_cast<std::size_t>(n), MPI_UNDEFINED);
  std::iota(ranks.begin(), ranks.end(), 0);
  MPI_Group all = MPI_GROUP_NULL;
  int rc = PMPI_Comm_group(MPI_COMM_WORLD, &all);
  if (rc == MPI_SUCCESS) rc = PMPI_Group_translate_ranks(group, n, ranks.data(), all, world.data());
  if (all != MPI_GROUP_NULL) PMPI_Group_free(&all);
  if (rc != MPI_SUCCESS) return refuse(comm, rc);
  if (std::ranges::find(world, MPI_UNDEFINED) != world.end()) return call();
  // Round k: a message to the member 2^k after this one, from the one 2^k before; after the last
  // round every member has heard, through some chain, from every other.
  for (int k = 1; k < n; k *= 2) {
    MPI_Request both[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    rc = PMPI_Irecv(nullptr, 0, MPI_BYTE, world[static_cast<std::size_t>((me - k + n) % n)], tag, w.groups,
                    &both[0]);
    if (rc == MPI_SUCCESS)
      rc = PMPI_Isend(nullptr, 0, MPI_BYTE, world[static_cast<std::size_t>((me + k) % n)], tag, w.groups,
                      &both[1]);
    if (rc == MPI_SUCCESS)
      rc = drive_until([&](int& flag) { return PMPI_Testall(2, both, &flag, MPI_STATUSES_IGNORE); });
    if (rc != MPI_SUCCESS) {
      for (MPI_Request& r : both)
        if (r != MPI_REQUEST_NULL) {
          PMPI_Cancel(&r);
          PMPI_Request_free(&r);
        }
      return refuse(comm, rc);
    }
  }
  return call();
}

// Collective over two groups, whose leaders talk on `peer` with `tag` (MPI's own use of them, which
// the program keeps free of other traffic): every local rank enters (a driven barrier), the leaders
// exchange an empty message there, driven, and a second barrier tells the local ranks that the remote
// group has entered too. Then nobody waits in libmpi's call for a receive to match.
int MPI_Intercomm_create(MPI_Comm local, int local_leader, MPI_Comm peer, int remote_leader, int tag,
                         MPI_Comm* out) {
  const auto call = [&] { return PMPI_Intercomm_create(local, local_leader, peer, remote_leader, tag, out); };
  int me = -1, peers = 0;
  if (local == MPI_COMM_NULL || PMPI_Comm_rank(local, &me) != MPI_SUCCESS) return call();  // its error
  if (int rc = entered(local); rc != MPI_SUCCESS) return rc;
  if (me == local_leader && peer != MPI_COMM_NULL && PMPI_Comm_size(peer, &peers) == MPI_SUCCESS &&
      remote_leader >= 0 && remote_leader < peers) {
    MPI_Request both[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int rc = PMPI_Irecv(nullptr, 0, MPI_BYTE, remote_leader, tag, peer, &both[0]);
    if (rc == MPI_SUCCESS) rc = PMPI_Isend(nullptr, 0, MPI_BYTE, remote_leader, tag, peer, &both[1]);
    if (rc == MPI_SUCCESS)
      rc = drive_until([&](int& flag) { return PMPI_Testall(2, both, &flag, MPI_STATUSES_IGNORE); });
    if (rc != MPI_SUCCESS) return rc;
  }
  const int rc = entered(local);
  return rc != MPI_SUCCESS ? rc : call();
}

int MPI_Intercomm_merge(MPI_Comm intercomm, int high, MPI_Comm* out) {
  const int rc = entered(intercomm);
  return rc != MPI_SUCCESS ? rc : PMPI_Intercomm_merge(intercomm, high, out);
}

int MPI_Cart_create(MPI_Comm comm, int ndims, const int dims[], const int periods[], int reorder,
                    MPI_Comm* out) {
  const int rc = entered(comm);
  return rc != MPI_SUCCESS ? rc : PMPI_Cart_create(comm, ndims, dims, periods, reorder, out);
}

int MPI_Cart_sub(MPI_Comm comm, const int remain_dims[], MPI_Comm* out) {
  const int rc = entered(comm);
  return rc != MPI_SUCCESS ? rc : PMPI_Cart_sub(comm, remain_dims, out);
}

int MPI_Graph_create(MPI_Comm comm, int nnodes, const int index[], const int edges[], int reorder,
                     MPI_Comm* out) {
  const int rc = entered(comm);
  return rc != MPI_SUCCESS ? rc : PMPI_Graph_create(comm, nnodes, index, edges, reorder, out);
}

int MPI_Dist_graph_create(MPI_Comm comm, int n, const int sources[], const int degrees[],
                          const int destinations[], const int weights[], MPI_Info info, int reorder,
                          MPI_Comm* out) {
  const int rc = entered(comm);
  return rc != MPI_SUCCESS
             ? rc
             : PMPI_Dist_graph_create(comm, n, sources, degrees, destinations, weights, info, reorder, out);
}

int MPI_Dist_graph_create_adjacent(MPI_Comm comm, int indegree, const int sources[],
                                   const int sourceweights[], int outdegree, const int destinations[],
                                   const int destweights[], MPI_Info info, int reorder, MPI_Comm* out) {
  const int rc = entered(comm);
  return rc != MPI_SUCCESS
             ? rc
             : PMPI_Dist_graph_create_adjacent(comm, indegree, sources, sourceweights, outdegree,
                                               destinations, destweights, info, reorder, out);
}

// One-sided communication: the calls that make or free a window and the fence are collective over
// the window's group (the ranks of the communicator it was made on).

int MPI_Win_create(void* base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, MPI_Win* win) {
  return make_with_dup(windows(), comm, win, MPI_WIN_NULL,
                       [&] { return PMPI_Win_create(base, size, disp_unit, info, comm, win); });
}

int MPI_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void* base, MPI_Win* win) {
  return make_with_dup(windows(), comm, win, MPI_WIN_NULL,
                       [&] { return PMPI_Win_allocate(size, disp_unit, info, comm, base, win); });
}

int MPI_Win_allocate_shared(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void* base,
                            MPI_Win* win) {
  return make_with_dup(windows(), comm, win, MPI_WIN_NULL,
                       [&] { return PMPI_Win_allocate_shared(size, disp_unit, info, comm, base, win); });
}

int MPI_Win_create_dynamic(MPI_Info info, MPI_Comm comm, MPI_Win* win) {
  return make_with_dup(windows(), comm, win, MPI_WIN_NULL,
                       [&] { return PMPI_Win_create_dynamic(info, comm, win); });
}

int MPI_Win_fence(int assertion, MPI_Win win) {
  const int rc = entered(window_comm(win));
  return rc != MPI_SUCCESS ? rc : PMPI_Win_fence(assertion, win);
}

// MPI_Win_wait ends an exposure epoch once every origin of the group called MPI_Win_complete, and an
// origin may first need a message this rank's pending operations hand over (a receive posted before
// MPI_Win_post that its MPI_Ssend waits for): MPI_Win_test, the call's nonblocking form, is polled
// while they are driven.
int MPI_Win_wait(MPI_Win win) {
  if (idle()) return PMPI_Win_wait(win);
  return drive_until([&](int& flag) { return PMPI_Win_test(win, &flag); });
}

// The other synchronization calls of one-sided communication have no nonblocking form: with
// MPI_THREAD_MULTIPLE a helper thread drives the pending operations while the rank waits in them.
int MPI_Win_start(MPI_Group group, int assertion, MPI_Win win) {
  return driving_meanwhile([&] { return PMPI_Win_start(group, assertion, win); });
}

int MPI_Win_complete(MPI_Win win) {
  return driving_meanwhile([&] { return PMPI_Win_complete(win); });
}

int MPI_Win_lock(int type, int rank, int assertion, MPI_Win win) {
  return driving_meanwhile([&] { return PMPI_Win_lock(type, rank, assertion, win); });
}

int MPI_Win_unlock(int rank, MPI_Win win) {
  return driving_meanwhile([&] { return PMPI_Win_unlock(rank, win); });
}

int MPI_Win_lock_all(int assertion, MPI_Win win) {
  return driving_meanwhile([&] { return PMPI_Win_lock_all(assertion, win); });
}

int MPI_Win_unlock_all(MPI_Win win) {
  return driving_meanwhile([&] { return PMPI_Win_unlock_all(win); });
}

int MPI_Win_flush(int rank, MPI_Win win) {
  return driving_meanwhile([&] { return PMPI_Win_flush(rank, win); });
}

int MPI_Win_flush_all(MPI_Win win) {
  return driving_meanwhile([&] { return PMPI_Win_flush_all(win); });
}

int MPI_Win_flush_local(int rank, MPI_Win win) {
  return driving_meanwhile([&] { return PMPI_Win_flush_local(rank, win); });
}

int MPI_Win_flush_local_all(MPI_Win win) {
  return driving_meanwhile([&] { return PMPI_Win_flush_local_all(win); });
}

int MPI_Win_free(MPI_Win* win) {
  return free_with_dup(windows(), win, [&] { return PMPI_Win_free(win); });
}

// MPI-IO: MPI_File_open makes a driven duplicate of its communicator, kept for the file; the
// collective file calls (closing, the view, the size, sync, the shared pointer, the collective and
// split collective reads and writes) make a driven barrier on it first, as MPI_Win_fence does.

int MPI_File_open(MPI_Comm comm, const char* filename, int amode, MPI_Info info, MPI_File* fh) {
  return make_with_dup(files(), comm, fh, MPI_FILE_NULL,
                       [&] { return PMPI_File_open(comm, filename, amode, info, fh); });
}

int MPI_File_close(MPI_File* fh) {
  return free_with_dup(files(), fh, [&] { return PMPI_File_close(fh); });
}

int MPI_File_set_size(MPI_File fh, MPI_Offset size) {
  return on_file(fh, [&] { return PMPI_File_set_size(fh, size); });
}

int MPI_File_preallocate(MPI_File fh, MPI_Offset size) {
  return on_file(fh, [&] { return PMPI_File_preallocate(fh, size); });
}

int MPI_File_set_info(MPI_File fh, MPI_Info info) {
  return on_file(fh, [&] { return PMPI_File_set_info(fh, info); });
}

int MPI_File_set_view(MPI_File fh, MPI_Offset disp, MPI_Datatype etype, MPI_Datatype filetype,
                      const char* datarep, MPI_Info info) {
  return on_file(fh, [&] { return PMPI_File_set_view(fh, disp, etype, filetype, datarep, info); });
}

int MPI_File_set_atomicity(MPI_File fh, int flag) {
  return on_file(fh, [&] { return PMPI_File_set_atomicity(fh, flag); });
}

int MPI_File_sync(MPI_File fh) {
  return on_file(fh, [&] { return PMPI_File_sync(fh); });
}

int MPI_File_seek_shared(MPI_File fh, MPI_Offset offset, int whence) {
  return on_file(fh, [&] { return PMPI_File_seek_shared(fh, offset, whence); });
}

int MPI_File_read_all(MPI_File fh, void* buf, int count, MPI_Datatype type, MPI_Status* status) {
  return on_file(fh, [&] { return PMPI_File_read_all(fh, buf, count, type, status); });
}

int MPI_File_write_all(MPI_File fh, const void* buf, int count, MPI_Datatype type, MPI_Status* status) {
  return on_file(fh, [&] { return PMPI_File_write_all(fh, buf, count, type, status); });
}

int MPI_File_read_at_all(MPI_File fh, MPI_Offset offset, void* buf, int count, MPI_Datatype type,
                         MPI_Status* status) {
  return on_file(fh, [&] { return PMPI_File_read_at_all(fh, offset, buf, count, type, status); });
}

int MPI_File_write_at_all(MPI_File fh, MPI_Offset offset, const void* buf, int count, MPI_Datatype type,
                          MPI_Status* status) {
  return on_file(fh, [&] { return PMPI_File_write_at_all(fh, offset, buf, count, type, status); });
}

int MPI_File_read_ordered(MPI_File fh, void* buf, int count, MPI_Datatype type, MPI_Status* status) {
  return on_file(fh, [&] { return PMPI_File_read_ordered(fh, buf, count, type, status); });
}

int MPI_File_write_ordered(MPI_File fh, const void* buf, int count, MPI_Datatype type, MPI_Status* status) {
  return on_file(fh, [&] { return PMPI_File_write_ordered(fh, buf, count, type, status); });
}

int MPI_File_read_all_begin(MPI_File fh, void* buf, int count, MPI_Datatype type) {
  return on_file(fh, [&] { return PMPI_File_read_all_begin(fh, buf, count, type); });
}

int MPI_File_read_all_end(MPI_File fh, void* buf, MPI_Status* status) {
  return on_file(fh, [&] { return PMPI_File_read_all_end(fh, buf, status); });
}

int MPI_File_write_all_begin(MPI_File fh, const void* buf, int count, MPI_Datatype type) {
  return on_file(fh, [&] { return PMPI_File_write_all_begin(fh, buf, count, type); });
}

int MPI_File_write_all_end(MPI_File fh, const void* buf, MPI_Status* status) {
  return on_file(fh, [&] { return PMPI_File_write_all_end(fh, buf, status); });
}

int MPI_File_read_at_all_begin(MPI_File fh, MPI_Offset offset, void* buf, int count, MPI_Datatype type) {
  return on_file(fh, [&] { return PMPI_File_read_at_all_begin(fh, offset, buf, count, type); });
}

int MPI_File_read_at_all_end(MPI_File fh, void* buf, MPI_Status* status) {
  return on_file(fh, [&] { return PMPI_File_read_at_all_end(fh, buf, status); });
}

int MPI_File_write_at_all_begin(MPI_File fh, MPI_Offset offset, const void* buf, int count,
                                MPI_Datatype type) {
  return on_file(fh, [&] { return PMPI_File_write_at_all_begin(fh, offset, buf, count, type); });
}

int MPI_File_write_at_all_end(MPI_File fh, const void* buf, MPI_Status* status) {
  return on_file(fh, [&] { return PMPI_File_write_at_all_end(fh, buf, status); });
}

int MPI_File_read_ordered_begin(MPI_File fh, void* buf, int count, MPI_Datatype type) {
  return on_file(fh, [&] { return PMPI_File_read_ordered_begin(fh, buf, count, type); });
}

int MPI_File_read_ordered_end(MPI_File fh, void* buf, MPI_Status* status) {
  return on_file(fh, [&] { return PMPI_File_read_ordered_end(fh, buf, status); });
}

int MPI_File_write_ordered_begin(MPI_File fh, const void* buf, int count, MPI_Datatype type) {
  return on_file(fh, [&] { return PMPI_File_write_ordered_begin(fh, buf, count, type); });
}

int MPI_File_write_ordered_end(MPI_File fh, const void* buf, MPI_Status* status) {
  return on_file(fh, [&] { return PMPI_File_write_ordered_end(fh, buf, status); });
}

HDSM_VISIBLE_END
}  // extern "C"
