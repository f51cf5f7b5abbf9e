// Collectives and nonblocking file I/O on shared objects: MPI_Bcast, MPI_Reduce, MPI_Allreduce, MPI_Gather,
// MPI_Scatter, MPI_Allgather and MPI_Alltoall, their v and w forms, the reduce-scatters, the scans and the
// neighbourhood collectives. libmpi reads and writes a collective's buffers itself, and on a
// shared object that would cost a page fault per block (a fetch for every block read, a dirty block
// for every block written). Instead a buffer in a shared object is staged through host memory: one
// bulk read of the bytes the call reads before it (device-resident blocks come straight from the
// device copy), one bulk write of the bytes it writes after it (which go to the device copy where
// the host's is invalid). The collective itself is libmpi's, on the host copies. The nonblocking
// forms stage the same way: the bytes they read at the call, the bytes they wrote once libmpi's
// request completes, before the user's request does (an operation of the engine's). Buffers in host
// memory, non-contiguous datatypes (but for the w forms, staged as bytes), intercommunicators and
// communicators with no topology for a neighbourhood collective are passed through untouched.
#include <hdsm/export.h>

#include "mpi/engine.hpp"
#include "mpi/operations.hpp"
#include "runtime/shared_ranges.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

namespace hdsm::mpi {
namespace {

/// One buffer argument of a collective as the call passes it to libmpi.
class Staged {
 public:
  /// `buf` as the call passes it: what libmpi gets unless stage() makes a copy (a communicator
  /// whose collectives are not staged passes the user's buffers as they are).
  explicit Staged(const void* buf = nullptr) : user_(buf) {}

  /// Stages the `count` elements of `type` from `buf` when they lie in a shared object: a host copy,
  /// filled from the object when the call `reads` them. An MPI error code (reported, naming `call`)
  /// when the range leaves the live shared objects.
  int stage(const char* call, const void* buf, std::size_t count, MPI_Datatype type, bool reads,
            bool writes) {
    user_ = buf;
    if (buf == MPI_IN_PLACE || buf == nullptr || count == 0 || count > INT_MAX || type == MPI_DATATYPE_NULL)
      return MPI_SUCCESS;
    if (detail::shared_ranges.owner(buf) == nullptr || !contiguous(type)) return MPI_SUCCESS;
    UserBuffer b;
    if (const int rc = describe(call, buf, static_cast<int>(count), type, b); rc != MPI_SUCCESS) return rc;
    if (!b.shared() || b.bytes == 0) return MPI_SUCCESS;
    model_ = b.model;
    bytes_ = b.bytes;
    writes_ = writes;
    copy_ = std::make_unique_for_overwrite<std::byte[]>(bytes_);
    if (reads) model_->copy(copy_.get(), user_, bytes_, nullptr);
    return MPI_SUCCESS;
  }
  /// What libmpi gets: the host copy, or the user's pointer.
  void* get() const { return copy_ ? copy_.get() : const_cast<void*>(user_); }
  bool staged() const { return copy_ != nullptr; }
  /// After the collective: the bytes it wrote go back to the object.
  void finish() const {
    if (copy_ && writes_) model_->copy(const_cast<void*>(user_), copy_.get(), bytes_, nullptr);
  }

 private:
  static bool contiguous(MPI_Datatype type) {
    int size = 0;
    MPI_Aint extent = 0;
    bool contiguous = false;
    return type_layout(type, size, extent, contiguous) && contiguous;
  }

  const void* user_ = nullptr;
  detail::MemoryModel* model_ = nullptr;
  std::size_t bytes_ = 0;
  bool writes_ = false;
  std::unique_ptr<std::byte[]> copy_;
};

/// The caller's rank and the group's size, and whether `comm` is an intracommunicator (the only
/// kind staged: an intercommunicator's roots and counts follow other rules).
struct Group {
  int rank = 0;
  int size = 0;
  bool intra = false;
};
Group group_of(MPI_Comm comm) {
  Group g;
  int inter = 1;
  if (comm == MPI_COMM_NULL || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter != 0) return g;
  if (PMPI_Comm_rank(comm, &g.rank) != MPI_SUCCESS || PMPI_Comm_size(comm, &g.size) != MPI_SUCCESS) return g;
  g.intra = true;
  return g;
}

/// A nonblocking collective with a staged buffer, behind a generalized request of the engine's:
/// libmpi's request runs on the staged copies, and once it completes the copies the collective wrote
/// go back to their objects, before the user's request completes.
class StagedCollective final : public Operation {
 public:
  StagedCollective(const char* call, MPI_Comm comm, Staged (&buffers)[2], MPI_Request inner)
      : Operation(call, comm), buffers_{std::move(buffers[0]), std::move(buffers[1])}, inner_(inner) {}

  bool progress() override {
    int rc = MPI_SUCCESS;
    MPI_Status status;
    if (!tested(inner_, &status, rc)) return false;
    // The bytes libmpi's request moved (a file read may end short); a collective's status says nothing.
    if (MPI_Count moved = 0; rc == MPI_SUCCESS &&
                             PMPI_Get_elements_x(&status, MPI_BYTE, &moved) == MPI_SUCCESS &&
                             moved != MPI_UNDEFINED)
      bytes_ = moved;
    if (rc != MPI_SUCCESS) {
      fail(rc, "", true);  // MPI_Test raised it on the communicator's handler
      return true;
    }
    try {
      for (const Staged& b : buffers_) b.finish();
    } catch (const std::exception& x) {
      fail(MPI_ERR_OTHER, fmt::format("writing the result back to its shared object failed: {}", x.what()));
    }
    return true;
  }
  std::vector<MPI_Request*> requests() override { return {&inner_}; }

 private:
  Staged buffers_[2];
  MPI_Request inner_;
};

/// The shape of every collective: stage the buffers (`prepare`, an MPI error code, where `stage`),
/// start libmpi's nonblocking form on what they give (`begin`), then
/// - blocking (`request` null): wait for it, driving the pending operations, and write back what it
///   wrote. A receive posted before the collective must match a message another rank sent before
///   entering it (MPI's progress rule), and receives are matched only when something drives them (an
///   Irecv, a Barrier, then the Wait hung on any rendezvous-sized message). Always the nonblocking
///   form, not only while operations are pending here: a nonblocking collective does not match a
///   blocking one on another rank;
/// - nonblocking: the user's request is libmpi's where nothing was staged, a StagedCollective's
///   otherwise.
/// Errors before the collective go through `comm`'s handler; libmpi's own are returned as they are.
template <class Prepare, class Begin>
int collective(const char* call, MPI_Comm comm, MPI_Request* request, bool stage, Staged (&b)[2],
               Prepare prepare, Begin begin) {
  try {
    if (stage)
      if (const int rc = prepare(); rc != MPI_SUCCESS) return refuse(comm, rc);
    if (request != nullptr && !b[0].staged() && !b[1].staged()) return begin(request);
    MPI_Request inner = MPI_REQUEST_NULL;
    if (const int rc = begin(&inner); rc != MPI_SUCCESS) return rc;
    if (request == nullptr) {
      if (const int rc = wait_driving(&inner, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) return rc;
      for (const Staged& s : b) s.finish();
      return MPI_SUCCESS;
    }
    const auto op = std::make_shared<StagedCollective>(call, comm, b, inner);
    const int rc = start(op, request);
    if (rc != MPI_SUCCESS)  // no request to give: libmpi's must end before the copies go
      while (!op->progress()) drive();
    return rc;
  } catch (const std::exception& e) {
    return internal(call, comm, e);
  }
}

/// No buffer to stage.
int nothing() { return MPI_SUCCESS; }

std::size_t times(int count, int n) { return count > 0 && n > 0 ? static_cast<std::size_t>(count) * n : 0; }

/// The blocks of a v collective's buffer: counts[i] elements at displs[i] (null: one after the other),
/// i < n. What is staged is the elements from the buffer's start to the end of the last block.
struct Blocks {
  std::size_t span = 0;  // 0: nothing staged (a negative count or displacement: libmpi's own checks)
  bool gaps = false;     // the blocks leave elements out: a staged copy the call writes is read first,
                         // so that the elements it does not write come back unchanged
};
Blocks blocks(const int counts[], const int displs[], int n) {
  Blocks b;
  if (counts == nullptr || n <= 0) return b;
  std::size_t covered = 0, end = 0, next = 0;
  for (int i = 0; i < n; ++i) {
    const long long displ = displs != nullptr ? displs[i] : static_cast<long long>(next);
    if (counts[i] < 0 || displ < 0) return {};
    next = static_cast<std::size_t>(displ) + static_cast<std::size_t>(counts[i]);
    covered += static_cast<std::size_t>(counts[i]);
    if (counts[i] > 0) end = std::max(end, next);
  }
  b.span = end;
  b.gaps = covered != end;  // blocks a call writes do not overlap (MPI's rule): fewer means gaps
  return b;
}
int sum(const int counts[], int n) {
  long long total = 0;
  for (int i = 0; counts != nullptr && i < n; ++i) total += counts[i] > 0 ? counts[i] : 0;
  return total > INT_MAX ? INT_MAX : static_cast<int>(total);
}

/// The bytes of a w collective's buffer from its start to the end of its last block: counts[i]
/// elements of types[i] at byte displacement displs[i], i < n, as the types lay them out (their true
/// extents). Staged as bytes, whatever the types: the copy keeps the layout. Nothing staged (a span
/// of 0) where a block starts before the buffer or an argument is one libmpi will refuse.
template <class Displacement>
Blocks byte_blocks(const int counts[], const Displacement displs[], const MPI_Datatype types[], int n) {
  if (counts == nullptr || displs == nullptr || types == nullptr || n <= 0) return {};
  long long covered = 0, end = 0;
  for (int i = 0; i < n; ++i) {
    if (counts[i] < 0 || displs[i] < 0) return {};
    if (counts[i] == 0) continue;
    MPI_Aint lb = 0, extent = 0, true_lb = 0, true_extent = 0;
    int size = 0;
    if (types[i] == MPI_DATATYPE_NULL || PMPI_Type_get_extent(types[i], &lb, &extent) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent(types[i], &true_lb, &true_extent) != MPI_SUCCESS ||
        PMPI_Type_size(types[i], &size) != MPI_SUCCESS || extent < 0 || true_extent < 0)
      return {};
    // The block's first byte, and one past its last element's last byte.
    long long first = 0, step = 0, stop = 0, data = 0;
    if (__builtin_add_overflow(static_cast<long long>(displs[i]), static_cast<long long>(true_lb), &first) ||
        first < 0 ||
        __builtin_mul_overflow(static_cast<long long>(counts[i]) - 1, static_cast<long long>(extent),
                               &step) ||
        __builtin_add_overflow(first, step, &stop) ||
        __builtin_add_overflow(stop, static_cast<long long>(true_extent), &stop) ||
        __builtin_mul_overflow(static_cast<long long>(counts[i]), static_cast<long long>(size), &data) ||
        __builtin_add_overflow(covered, data, &covered))
      return {};
    end = std::max(end, stop);
  }
  Blocks b;
  b.span = static_cast<std::size_t>(end);
  b.gaps = covered != end;  // holes between or inside the blocks (a type's own gaps) are read first
  return b;
}

/// A neighbourhood collective's numbers of sources (`in`) and destinations (`out`) on `comm`'s
/// topology, and whether some may be MPI_PROC_NULL (a Cartesian topology with a dimension that is not
/// periodic), whose receive blocks the call leaves as they were. False where `comm` has no topology:
/// libmpi reports that.
struct Neighbours {
  int in = 0;
  int out = 0;
  bool null_sources = true;
};
bool neighbours(MPI_Comm comm, Neighbours& n) {
  int kind = MPI_UNDEFINED;
  if (comm == MPI_COMM_NULL || PMPI_Topo_test(comm, &kind) != MPI_SUCCESS) return false;
  if (kind == MPI_CART) {
    int dims = 0;
    if (PMPI_Cartdim_get(comm, &dims) != MPI_SUCCESS || dims < 0) return false;
    n.in = n.out = 2 * dims;
    std::vector<int> sizes(static_cast<std::size_t>(dims) + 1), periodic(sizes.size()), coords(sizes.size());
    if (PMPI_Cart_get(comm, dims, sizes.data(), periodic.data(), coords.data()) != MPI_SUCCESS) return false;
    n.null_sources = std::any_of(periodic.begin(), periodic.begin() + dims, [](int p) { return p == 0; });
    return true;
  }
  if (kind == MPI_GRAPH) {
    int rank = 0;
    if (PMPI_Comm_rank(comm, &rank) != MPI_SUCCESS ||
        PMPI_Graph_neighbors_count(comm, rank, &n.in) != MPI_SUCCESS)
      return false;
    n.out = n.in;
    n.null_sources = false;
    return true;
  }
  if (kind == MPI_DIST_GRAPH) {
    int weighted = 0;
    // MPI_PROC_NULL is no source of a distributed graph (libmpi refuses it), but reading the copy
    // first costs one bulk read, and a library that let one through would lose no data.
    return PMPI_Dist_graph_neighbors_count(comm, &n.in, &n.out, &weighted) == MPI_SUCCESS;
  }
  return false;
}

/// Stages a collective's send buffer (`send` elements of `sendtype`, which it reads), then its
/// receive buffer (`receive` elements of `recvtype`, which it writes, read first where
/// `read_receive`): the first error. A count of 0 stages nothing (the buffer is not significant on
/// this rank, or its blocks are libmpi's to refuse).
int stage_both(Staged (&b)[2], const char* call, const void* sendbuf, std::size_t send, MPI_Datatype sendtype,
               const void* recvbuf, std::size_t receive, MPI_Datatype recvtype, bool read_receive) {
  const int rc = b[0].stage(call, sendbuf, send, sendtype, true, false);
  return rc != MPI_SUCCESS ? rc : b[1].stage(call, recvbuf, receive, recvtype, read_receive, true);
}

/// MPI_Scan and MPI_Exscan and their nonblocking forms. MPI_Exscan leaves rank 0's receive buffer
/// undefined: the staged copy is read first there, so the object keeps what it held.
template <class Begin>
int scan(const char* call, MPI_Request* request, Begin begin, const void* sendbuf, void* recvbuf, int count,
         MPI_Datatype type, MPI_Op op, MPI_Comm comm, bool exclusive) {
  const Group g = group_of(comm);
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      call, comm, request, g.intra, b,
      [&] {
        return stage_both(b, call, sendbuf, times(count, 1), type, recvbuf, times(count, 1), type,
                          in_place || (exclusive && g.rank == 0));
      },
      [&](MPI_Request* r) { return begin(b[0].get(), b[1].get(), count, type, op, comm, r); });
}

// Each collective once, for its blocking form (`request` null) and its nonblocking one.

int bcast(MPI_Request* request, void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Bcast" : "MPI_Ibcast";
  const Group g = group_of(comm);
  Staged b[2]{Staged{buf}, Staged{}};
  const bool root_here = g.rank == root;
  return collective(
      call, comm, request, g.intra, b,
      [&] { return b[0].stage(call, buf, times(count, 1), type, root_here, !root_here); },
      [&](MPI_Request* r) { return PMPI_Ibcast(b[0].get(), count, type, root, comm, r); });
}

int reduce(MPI_Request* request, const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
           int root, MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Reduce" : "MPI_Ireduce";
  const Group g = group_of(comm);
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  const bool root_here = g.rank == root, in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      call, comm, request, g.intra, b,
      [&] {
        return stage_both(b, call, sendbuf, times(count, 1), type, recvbuf, root_here ? times(count, 1) : 0,
                          type, in_place);
      },
      [&](MPI_Request* r) { return PMPI_Ireduce(b[0].get(), b[1].get(), count, type, op, root, comm, r); });
}

int allreduce(MPI_Request* request, const void* sendbuf, void* recvbuf, int count, MPI_Datatype type,
              MPI_Op op, MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Allreduce" : "MPI_Iallreduce";
  const Group g = group_of(comm);
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      call, comm, request, g.intra, b,
      [&] {
        return stage_both(b, call, sendbuf, times(count, 1), type, recvbuf, times(count, 1), type, in_place);
      },
      [&](MPI_Request* r) { return PMPI_Iallreduce(b[0].get(), b[1].get(), count, type, op, comm, r); });
}

int gather(MPI_Request* request, const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
           int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Gather" : "MPI_Igather";
  const Group g = group_of(comm);
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  const bool root_here = g.rank == root, in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      call, comm, request, g.intra, b,
      [&] {
        return stage_both(b, call, sendbuf, times(sendcount, 1), sendtype, recvbuf,
                          root_here ? times(recvcount, g.size) : 0, recvtype, in_place);
      },
      [&](MPI_Request* r) {
        return PMPI_Igather(b[0].get(), sendcount, sendtype, b[1].get(), recvcount, recvtype, root, comm, r);
      });
}

int scatter(MPI_Request* request, const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
            int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Scatter" : "MPI_Iscatter";
  const Group g = group_of(comm);
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  const bool root_here = g.rank == root;
  return collective(
      call, comm, request, g.intra, b,
      [&] {
        return stage_both(b, call, sendbuf, root_here ? times(sendcount, g.size) : 0, sendtype, recvbuf,
                          times(recvcount, 1), recvtype, false);
      },
      [&](MPI_Request* r) {
        return PMPI_Iscatter(b[0].get(), sendcount, sendtype, b[1].get(), recvcount, recvtype, root, comm, r);
      });
}

int allgather(MPI_Request* request, const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
              int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Allgather" : "MPI_Iallgather";
  const Group g = group_of(comm);
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      call, comm, request, g.intra, b,
      [&] {
        return stage_both(b, call, sendbuf, times(sendcount, 1), sendtype, recvbuf, times(recvcount, g.size),
                          recvtype, in_place);
      },
      [&](MPI_Request* r) {
        return PMPI_Iallgather(b[0].get(), sendcount, sendtype, b[1].get(), recvcount, recvtype, comm, r);
      });
}

int alltoall(MPI_Request* request, const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
             int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Alltoall" : "MPI_Ialltoall";
  const Group g = group_of(comm);
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      call, comm, request, g.intra, b,
      [&] {
        return stage_both(b, call, sendbuf, times(sendcount, g.size), sendtype, recvbuf,
                          times(recvcount, g.size), recvtype, in_place);
      },
      [&](MPI_Request* r) {
        return PMPI_Ialltoall(b[0].get(), sendcount, sendtype, b[1].get(), recvcount, recvtype, comm, r);
      });
}

// The v forms stage each buffer from its start to the end of its last block (blocks()).

int gatherv(MPI_Request* request, const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
            const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Gatherv" : "MPI_Igatherv";
  const Group g = group_of(comm);
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  const bool root_here = g.rank == root, in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      call, comm, request, g.intra, b,
      [&] {
        const Blocks r = root_here ? blocks(recvcounts, displs, g.size) : Blocks{};
        return stage_both(b, call, sendbuf, times(sendcount, 1), sendtype, recvbuf, r.span, recvtype,
                          in_place || r.gaps);
      },
      [&](MPI_Request* r) {
        return PMPI_Igatherv(b[0].get(), sendcount, sendtype, b[1].get(), recvcounts, displs, recvtype, root,
                             comm, r);
      });
}

int scatterv(MPI_Request* request, const void* sendbuf, const int sendcounts[], const int displs[],
             MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
             MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Scatterv" : "MPI_Iscatterv";
  const Group g = group_of(comm);
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  const bool root_here = g.rank == root;
  return collective(
      call, comm, request, g.intra, b,
      [&] {
        return stage_both(b, call, sendbuf, root_here ? blocks(sendcounts, displs, g.size).span : 0, sendtype,
                          recvbuf, times(recvcount, 1), recvtype, false);
      },
      [&](MPI_Request* r) {
        return PMPI_Iscatterv(b[0].get(), sendcounts, displs, sendtype, b[1].get(), recvcount, recvtype, root,
                              comm, r);
      });
}

int allgatherv(MPI_Request* request, const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
               const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Allgatherv" : "MPI_Iallgatherv";
  const Group g = group_of(comm);
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      call, comm, request, g.intra, b,
      [&] {
        const Blocks r = blocks(recvcounts, displs, g.size);
        return stage_both(b, call, sendbuf, times(sendcount, 1), sendtype, recvbuf, r.span, recvtype,
                          in_place || r.gaps);
      },
      [&](MPI_Request* r) {
        return PMPI_Iallgatherv(b[0].get(), sendcount, sendtype, b[1].get(), recvcounts, displs, recvtype,
                                comm, r);
      });
}

int alltoallv(MPI_Request* request, const void* sendbuf, const int sendcounts[], const int sdispls[],
              MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
              MPI_Datatype recvtype, MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Alltoallv" : "MPI_Ialltoallv";
  const Group g = group_of(comm);
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      call, comm, request, g.intra, b,
      [&] {
        const Blocks r = blocks(recvcounts, rdispls, g.size);
        return stage_both(b, call, sendbuf, in_place ? 0 : blocks(sendcounts, sdispls, g.size).span, sendtype,
                          recvbuf, r.span, recvtype, in_place || r.gaps);
      },
      [&](MPI_Request* r) {
        return PMPI_Ialltoallv(b[0].get(), sendcounts, sdispls, sendtype, b[1].get(), recvcounts, rdispls,
                               recvtype, comm, r);
      });
}

int reduce_scatter(MPI_Request* request, const void* sendbuf, void* recvbuf, const int recvcounts[],
                   MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Reduce_scatter" : "MPI_Ireduce_scatter";
  const Group g = group_of(comm);
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      call, comm, request, g.intra && recvcounts != nullptr, b,
      [&] {
        const int all = sum(recvcounts, g.size), mine = recvcounts[g.rank];
        // In place, the input is the receive buffer's `all` elements; the result its first `mine`.
        return stage_both(b, call, sendbuf, times(all, 1), type, recvbuf, times(in_place ? all : mine, 1),
                          type, in_place);
      },
      [&](MPI_Request* r) {
        return PMPI_Ireduce_scatter(b[0].get(), b[1].get(), recvcounts, type, op, comm, r);
      });
}

int reduce_scatter_block(MPI_Request* request, const void* sendbuf, void* recvbuf, int recvcount,
                         MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Reduce_scatter_block" : "MPI_Ireduce_scatter_block";
  const Group g = group_of(comm);
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      call, comm, request, g.intra, b,
      [&] {
        return stage_both(b, call, sendbuf, times(recvcount, g.size), type, recvbuf,
                          times(recvcount, in_place ? g.size : 1), type, in_place);
      },
      [&](MPI_Request* r) {
        return PMPI_Ireduce_scatter_block(b[0].get(), b[1].get(), recvcount, type, op, comm, r);
      });
}

// The w forms stage each buffer as bytes, from its start to the end of its last block (byte_blocks()).

int alltoallw(MPI_Request* request, const void* sendbuf, const int sendcounts[], const int sdispls[],
              const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[], const int rdispls[],
              const MPI_Datatype recvtypes[], MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Alltoallw" : "MPI_Ialltoallw";
  const Group g = group_of(comm);
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      call, comm, request, g.intra, b,
      [&] {
        const Blocks r = byte_blocks(recvcounts, rdispls, recvtypes, g.size);
        return stage_both(b, call, sendbuf,
                          in_place ? 0 : byte_blocks(sendcounts, sdispls, sendtypes, g.size).span, MPI_BYTE,
                          recvbuf, r.span, MPI_BYTE, in_place || r.gaps);
      },
      [&](MPI_Request* r) {
        return PMPI_Ialltoallw(b[0].get(), sendcounts, sdispls, sendtypes, b[1].get(), recvcounts, rdispls,
                               recvtypes, comm, r);
      });
}

// The neighbourhood collectives: one block for each source (receive) and each destination (send) of
// the communicator's topology (neighbours()). A receive buffer where some source may be MPI_PROC_NULL
// is read first: that source's block keeps its bytes.

int neighbor_allgather(MPI_Request* request, const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                       void* recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Neighbor_allgather" : "MPI_Ineighbor_allgather";
  Neighbours n;
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  return collective(
      call, comm, request, neighbours(comm, n), b,
      [&] {
        return stage_both(b, call, sendbuf, times(sendcount, 1), sendtype, recvbuf, times(recvcount, n.in),
                          recvtype, n.null_sources);
      },
      [&](MPI_Request* r) {
        return PMPI_Ineighbor_allgather(b[0].get(), sendcount, sendtype, b[1].get(), recvcount, recvtype,
                                        comm, r);
      });
}

int neighbor_allgatherv(MPI_Request* request, const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                        void* recvbuf, const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                        MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Neighbor_allgatherv" : "MPI_Ineighbor_allgatherv";
  Neighbours n;
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  return collective(
      call, comm, request, neighbours(comm, n), b,
      [&] {
        const Blocks r = blocks(recvcounts, displs, n.in);
        return stage_both(b, call, sendbuf, times(sendcount, 1), sendtype, recvbuf, r.span, recvtype,
                          n.null_sources || r.gaps);
      },
      [&](MPI_Request* r) {
        return PMPI_Ineighbor_allgatherv(b[0].get(), sendcount, sendtype, b[1].get(), recvcounts, displs,
                                         recvtype, comm, r);
      });
}

int neighbor_alltoall(MPI_Request* request, const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                      void* recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Neighbor_alltoall" : "MPI_Ineighbor_alltoall";
  Neighbours n;
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  return collective(
      call, comm, request, neighbours(comm, n), b,
      [&] {
        return stage_both(b, call, sendbuf, times(sendcount, n.out), sendtype, recvbuf,
                          times(recvcount, n.in), recvtype, n.null_sources);
      },
      [&](MPI_Request* r) {
        return PMPI_Ineighbor_alltoall(b[0].get(), sendcount, sendtype, b[1].get(), recvcount, recvtype, comm,
                                       r);
      });
}

int neighbor_alltoallv(MPI_Request* request, const void* sendbuf, const int sendcounts[], const int sdispls[],
                       MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
                       MPI_Datatype recvtype, MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Neighbor_alltoallv" : "MPI_Ineighbor_alltoallv";
  Neighbours n;
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  return collective(
      call, comm, request, neighbours(comm, n), b,
      [&] {
        const Blocks r = blocks(recvcounts, rdispls, n.in);
        return stage_both(b, call, sendbuf, blocks(sendcounts, sdispls, n.out).span, sendtype, recvbuf,
                          r.span, recvtype, n.null_sources || r.gaps);
      },
      [&](MPI_Request* r) {
        return PMPI_Ineighbor_alltoallv(b[0].get(), sendcounts, sdispls, sendtype, b[1].get(), recvcounts,
                                        rdispls, recvtype, comm, r);
      });
}

int neighbor_alltoallw(MPI_Request* request, const void* sendbuf, const int sendcounts[],
                       const MPI_Aint sdispls[], const MPI_Datatype sendtypes[], void* recvbuf,
                       const int recvcounts[], const MPI_Aint rdispls[], const MPI_Datatype recvtypes[],
                       MPI_Comm comm) {
  const char* call = request == nullptr ? "MPI_Neighbor_alltoallw" : "MPI_Ineighbor_alltoallw";
  Neighbours n;
  Staged b[2]{Staged{sendbuf}, Staged{recvbuf}};
  return collective(
      call, comm, request, neighbours(comm, n), b,
      [&] {
        const Blocks r = byte_blocks(recvcounts, rdispls, recvtypes, n.in);
        return stage_both(b, call, sendbuf, byte_blocks(sendcounts, sdispls, sendtypes, n.out).span, MPI_BYTE,
                          recvbuf, r.span, MPI_BYTE, n.null_sources || r.gaps);
      },
      [&](MPI_Request* r) {
        return PMPI_Ineighbor_alltoallw(b[0].get(), sendcounts, sdispls, sendtypes, b[1].get(), recvcounts,
                                        rdispls, recvtypes, comm, r);
      });
}

/// A nonblocking file call (`begin`: libmpi's, given the buffer it gets and the request) on the
/// `count` elements of `type` at `buf`; `into`: the call writes the buffer (a read of the file).
/// libmpi's file layer moves a nonblocking call's bytes with POSIX AIO, whose threads call the
/// kernel directly, not through the interposed pread/pwrite, so a shared object's protected host
/// copy ended the process (EFAULT inside libmpi, then a crash in its error handler). A buffer in a
/// shared object is staged through host memory instead, as a nonblocking collective's: copied from
/// the object at the call (a read's too, so what a short read leaves comes back unchanged), written
/// back once libmpi's request completes, before the user's request does, whose status counts the
/// bytes libmpi's moved. A non-contiguous datatype on a shared object is refused (MPI_ERR_TYPE);
/// errors before the call go through the file's handler.
template <class Begin>
int file_call(const char* call, MPI_File fh, const void* buf, int count, MPI_Datatype type, bool into,
              MPI_Request* request, Begin begin) {
  const auto refuse_on_file = [&](int code) {
    PMPI_File_call_errhandler(fh, code);
    return code;
  };
  try {
    if (buf == nullptr || count <= 0 || request == nullptr || detail::shared_ranges.owner(buf) == nullptr)
      return begin(const_cast<void*>(buf), request);
    int size = 0;
    MPI_Aint extent = 0;
    bool contiguous = false;
    if (!type_layout(type, size, extent, contiguous))
      return begin(const_cast<void*>(buf), request);  // libmpi's error
    if (!contiguous)
      return refuse_on_file(report(call, MPI_ERR_TYPE,
                                   fmt::format("a nonblocking file call on the shared object at {} needs a "
                                               "contiguous datatype (or the blocking call)",
                                               buf)));
    Staged b[2];
    if (const int rc = b[0].stage(call, buf, static_cast<std::size_t>(count), type, true, into);
        rc != MPI_SUCCESS)
      return refuse_on_file(rc);
    if (!b[0].staged()) return begin(const_cast<void*>(buf), request);
    MPI_Request inner = MPI_REQUEST_NULL;
    if (const int rc = begin(b[0].get(), &inner); rc != MPI_SUCCESS) return rc;
    const auto op = std::make_shared<StagedCollective>(call, MPI_COMM_SELF, b, inner);
    const int rc = start(op, request);
    if (rc != MPI_SUCCESS)  // no request to give: libmpi's must end before the copy goes
      while (!op->progress()) drive();
    return rc;
  } catch (const std::exception& e) {
    return refuse_on_file(report(call, MPI_ERR_INTERN, fmt::format("internal error: {}", e.what())));
  }
}

}  // namespace
}  // namespace hdsm::mpi

using namespace hdsm::mpi;

extern "C" {
HDSM_VISIBLE_BEGIN

int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  return bcast(nullptr, buf, count, type, root, comm);
}
int MPI_Ibcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request* request) {
  return bcast(request, buf, count, type, root, comm);
}

int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
               MPI_Comm comm) {
  return reduce(nullptr, sendbuf, recvbuf, count, type, op, root, comm);
}
int MPI_Ireduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
                MPI_Comm comm, MPI_Request* request) {
  return reduce(request, sendbuf, recvbuf, count, type, op, root, comm);
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
  return allreduce(nullptr, sendbuf, recvbuf, count, type, op, comm);
}
int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   MPI_Request* request) {
  return allreduce(request, sendbuf, recvbuf, count, type, op, comm);
}

int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return gather(nullptr, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}
int MPI_Igather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* request) {
  return gather(request, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return scatter(nullptr, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}
int MPI_Iscatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                 MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* request) {
  return scatter(request, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
  return allgather(nullptr, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}
int MPI_Iallgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                   MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  return allgather(request, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm) {
  return alltoall(nullptr, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}
int MPI_Ialltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  return alltoall(request, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int MPI_Barrier(MPI_Comm comm) {
  Staged none[2];
  return collective("MPI_Barrier", comm, nullptr, false, none, nothing,
                    [&](MPI_Request* r) { return PMPI_Ibarrier(comm, r); });
}

int MPI_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return gatherv(nullptr, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm);
}
int MPI_Igatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                 const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm,
                 MPI_Request* request) {
  return gatherv(request, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm);
}

int MPI_Scatterv(const void* sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype,
                 void* recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return scatterv(nullptr, sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm);
}
int MPI_Iscatterv(const void* sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype,
                  void* recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                  MPI_Request* request) {
  return scatterv(request, sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
  return allgatherv(nullptr, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
}
int MPI_Iallgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                    const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm,
                    MPI_Request* request) {
  return allgatherv(request, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
}

int MPI_Alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                  void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype,
                  MPI_Comm comm) {
  return alltoallv(nullptr, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                   comm);
}
int MPI_Ialltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                   void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype,
                   MPI_Comm comm, MPI_Request* request) {
  return alltoallv(request, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                   comm);
}

int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype type,
                       MPI_Op op, MPI_Comm comm) {
  return reduce_scatter(nullptr, sendbuf, recvbuf, recvcounts, type, op, comm);
}
int MPI_Ireduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype type,
                        MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  return reduce_scatter(request, sendbuf, recvbuf, recvcounts, type, op, comm);
}

int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                             MPI_Comm comm) {
  return reduce_scatter_block(nullptr, sendbuf, recvbuf, recvcount, type, op, comm);
}
int MPI_Ireduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                              MPI_Comm comm, MPI_Request* request) {
  return reduce_scatter_block(request, sendbuf, recvbuf, recvcount, type, op, comm);
}

int MPI_Scan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  return scan("MPI_Scan", nullptr, PMPI_Iscan, sendbuf, recvbuf, count, type, op, comm, false);
}
int MPI_Iscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
              MPI_Request* request) {
  return scan("MPI_Iscan", request, PMPI_Iscan, sendbuf, recvbuf, count, type, op, comm, false);
}

int MPI_Exscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  return scan("MPI_Exscan", nullptr, PMPI_Iexscan, sendbuf, recvbuf, count, type, op, comm, true);
}
int MPI_Iexscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                MPI_Request* request) {
  return scan("MPI_Iexscan", request, PMPI_Iexscan, sendbuf, recvbuf, count, type, op, comm, true);
}

int MPI_Alltoallw(const void* sendbuf, const int sendcounts[], const int sdispls[],
                  const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[], const int rdispls[],
                  const MPI_Datatype recvtypes[], MPI_Comm comm) {
  return alltoallw(nullptr, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
                   comm);
}
int MPI_Ialltoallw(const void* sendbuf, const int sendcounts[], const int sdispls[],
                   const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[], const int rdispls[],
                   const MPI_Datatype recvtypes[], MPI_Comm comm, MPI_Request* request) {
  return alltoallw(request, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,
                   comm);
}

int MPI_Neighbor_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                           int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  return neighbor_allgather(nullptr, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}
int MPI_Ineighbor_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                            int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  return neighbor_allgather(request, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int MPI_Neighbor_allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                            const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                            MPI_Comm comm) {
  return neighbor_allgatherv(nullptr, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
                             comm);
}
int MPI_Ineighbor_allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                             const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm,
                             MPI_Request* request) {
  return neighbor_allgatherv(request, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
                             comm);
}

int MPI_Neighbor_alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                          int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  return neighbor_alltoall(nullptr, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}
int MPI_Ineighbor_alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                           int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  return neighbor_alltoall(request, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int MPI_Neighbor_alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                           MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
                           MPI_Datatype recvtype, MPI_Comm comm) {
  return neighbor_alltoallv(nullptr, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                            recvtype, comm);
}
int MPI_Ineighbor_alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                            MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
                            MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  return neighbor_alltoallv(request, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                            recvtype, comm);
}

int MPI_Neighbor_alltoallw(const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                           const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                           const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm) {
  return neighbor_alltoallw(nullptr, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls,
                            recvtypes, comm);
}
int MPI_Ineighbor_alltoallw(const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                            const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                            const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm,
                            MPI_Request* request) {
  return neighbor_alltoallw(request, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls,
                            recvtypes, comm);
}

/// For hdsm's runtimes that wait on MPI requests of their own (the cluster's and crc's collectives,
/// found with dlsym where libhdsm_mpi is loaded): one pass over the pending operations, so that a
/// receive the program posted before a cluster call matches while the rank waits in it.
void hdsm_mpi_progress() {
  try {
    drive();
  } catch (...) {  // NOLINT(bugprone-empty-catch): an operation keeps its own error; only bad_alloc gets here
  }
}

// Nonblocking file I/O on shared objects (file_call).

int MPI_File_iread(MPI_File fh, void* buf, int count, MPI_Datatype type, MPI_Request* request) {
  return file_call("MPI_File_iread", fh, buf, count, type, true, request,
                   [&](void* b, MPI_Request* r) { return PMPI_File_iread(fh, b, count, type, r); });
}

int MPI_File_iwrite(MPI_File fh, const void* buf, int count, MPI_Datatype type, MPI_Request* request) {
  return file_call("MPI_File_iwrite", fh, buf, count, type, false, request,
                   [&](void* b, MPI_Request* r) { return PMPI_File_iwrite(fh, b, count, type, r); });
}

int MPI_File_iread_at(MPI_File fh, MPI_Offset offset, void* buf, int count, MPI_Datatype type,
                      MPI_Request* request) {
  return file_call("MPI_File_iread_at", fh, buf, count, type, true, request, [&](void* b, MPI_Request* r) {
    return PMPI_File_iread_at(fh, offset, b, count, type, r);
  });
}

int MPI_File_iwrite_at(MPI_File fh, MPI_Offset offset, const void* buf, int count, MPI_Datatype type,
                       MPI_Request* request) {
  return file_call("MPI_File_iwrite_at", fh, buf, count, type, false, request, [&](void* b, MPI_Request* r) {
    return PMPI_File_iwrite_at(fh, offset, b, count, type, r);
  });
}

int MPI_File_iread_shared(MPI_File fh, void* buf, int count, MPI_Datatype type, MPI_Request* request) {
  return file_call("MPI_File_iread_shared", fh, buf, count, type, true, request,
                   [&](void* b, MPI_Request* r) { return PMPI_File_iread_shared(fh, b, count, type, r); });
}

int MPI_File_iwrite_shared(MPI_File fh, const void* buf, int count, MPI_Datatype type, MPI_Request* request) {
  return file_call("MPI_File_iwrite_shared", fh, buf, count, type, false, request,
                   [&](void* b, MPI_Request* r) { return PMPI_File_iwrite_shared(fh, b, count, type, r); });
}

int MPI_File_iread_all(MPI_File fh, void* buf, int count, MPI_Datatype type, MPI_Request* request) {
  return file_call("MPI_File_iread_all", fh, buf, count, type, true, request,
                   [&](void* b, MPI_Request* r) { return PMPI_File_iread_all(fh, b, count, type, r); });
}

int MPI_File_iwrite_all(MPI_File fh, const void* buf, int count, MPI_Datatype type, MPI_Request* request) {
  return file_call("MPI_File_iwrite_all", fh, buf, count, type, false, request,
                   [&](void* b, MPI_Request* r) { return PMPI_File_iwrite_all(fh, b, count, type, r); });
}

int MPI_File_iread_at_all(MPI_File fh, MPI_Offset offset, void* buf, int count, MPI_Datatype type,
                          MPI_Request* request) {
  return file_call(
      "MPI_File_iread_at_all", fh, buf, count, type, true, request,
      [&](void* b, MPI_Request* r) { return PMPI_File_iread_at_all(fh, offset, b, count, type, r); });
}

int MPI_File_iwrite_at_all(MPI_File fh, MPI_Offset offset, const void* buf, int count, MPI_Datatype type,
                           MPI_Request* request) {
  return file_call(
      "MPI_File_iwrite_at_all", fh, buf, count, type, false, request,
      [&](void* b, MPI_Request* r) { return PMPI_File_iwrite_at_all(fh, offset, b, count, type, r); });
}

HDSM_VISIBLE_END
}  // extern "C"
