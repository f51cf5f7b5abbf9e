// Collectives on shared objects: MPI_Bcast, MPI_Reduce, MPI_Allreduce, MPI_Gather, MPI_Scatter,
// MPI_Allgather and MPI_Alltoall, their v and w forms, the reduce-scatters, the scans and the
// neighbourhood collectives. libmpi reads and writes a collective's buffers itself, and on a
// shared object that would cost a page fault per block (a fetch for every block read, a dirty block
// for every block written). Instead a buffer in a shared object is staged through host memory: one
// bulk read of the bytes the call reads before it (device-resident blocks come straight from the
// device copy), one bulk write of the bytes it writes after it (which go to the device copy where
// the host's is invalid). The collective itself is libmpi's, on the host copies. Buffers in host
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
#include <type_traits>
#include <vector>

namespace hdsm::mpi {
namespace {

/// One buffer argument of a collective as the call passes it to libmpi.
class Staged {
 public:
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

/// The shape every staged collective shares: stage the buffers (`prepare` returns an MPI error code),
/// run libmpi's collective on what they give (`run`), write back what it wrote. Errors before the
/// collective go through `comm`'s handler; libmpi's own are returned as they are.
template <class Prepare, class Run>
int staged(const char* call, MPI_Comm comm, Staged (&buffers)[2], Prepare prepare, Run run) {
  try {
    if (const int rc = prepare(); rc != MPI_SUCCESS) return refuse(comm, rc);
    const int rc = run();
    if (rc != MPI_SUCCESS) return rc;
    for (const Staged& b : buffers) b.finish();
    return MPI_SUCCESS;
  } catch (const std::exception& e) {
    return internal(call, comm, e);
  }
}

/// A blocking collective as its nonblocking form `start`, driven to its end with the pending
/// operations: a receive posted before the collective must match a message another rank sent before
/// entering it (MPI's progress rule), and receives are matched only when something drives them (an
/// Irecv, a Barrier, then the Wait hung on any rendezvous-sized message). Always, not only while
/// operations are pending here: a nonblocking collective does not match a blocking one on another
/// rank. (`blocking` names libmpi's own call, for the reader and the types.)
template <class Blocking, class Start, class... A>
int driving(const char* call, MPI_Comm comm, [[maybe_unused]] Blocking blocking, Start start, A... args) {
  static_assert(std::is_invocable_r_v<int, Blocking, A...>, "the blocking call takes the same arguments");
  try {
    MPI_Request request = MPI_REQUEST_NULL;
    const int rc = start(args..., &request);
    return rc != MPI_SUCCESS ? rc : wait_driving(&request, MPI_STATUS_IGNORE);
  } catch (const std::exception& e) {
    return internal(call, comm, e);
  }
}

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

/// MPI_Scan and MPI_Exscan, staged. MPI_Exscan leaves rank 0's receive buffer undefined: the staged
/// copy is read first there, so the object keeps what it held.
template <class Blocking, class Start>
int scan(const char* call, Blocking blocking, Start start, const void* sendbuf, void* recvbuf, int count,
         MPI_Datatype type, MPI_Op op, MPI_Comm comm, bool exclusive) {
  const Group g = group_of(comm);
  if (!g.intra) return driving(call, comm, blocking, start, sendbuf, recvbuf, count, type, op, comm);
  Staged b[2];
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return staged(
      call, comm, b,
      [&] {
        const int rc = b[0].stage(call, sendbuf, times(count, 1), type, true, false);
        if (rc != MPI_SUCCESS) return rc;
        return b[1].stage(call, recvbuf, times(count, 1), type, in_place || (exclusive && g.rank == 0), true);
      },
      [&] { return driving(call, comm, blocking, start, b[0].get(), b[1].get(), count, type, op, comm); });
}

}  // namespace
}  // namespace hdsm::mpi

using namespace hdsm::mpi;

extern "C" {
HDSM_VISIBLE_BEGIN

int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  const Group g = group_of(comm);
  if (!g.intra) return driving("MPI_Bcast", comm, PMPI_Bcast, PMPI_Ibcast, buf, count, type, root, comm);
  Staged b[2];
  const bool root_here = g.rank == root;
  return staged(
      "MPI_Bcast", comm, b,
      [&] { return b[0].stage("MPI_Bcast", buf, times(count, 1), type, root_here, !root_here); },
      [&] {
        return driving("MPI_Bcast", comm, PMPI_Bcast, PMPI_Ibcast, b[0].get(), count, type, root, comm);
      });
}

int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
               MPI_Comm comm) {
  const Group g = group_of(comm);
  if (!g.intra)
    return driving("MPI_Reduce", comm, PMPI_Reduce, PMPI_Ireduce, sendbuf, recvbuf, count, type, op, root,
                   comm);
  Staged b[2];
  const bool root_here = g.rank == root, in_place = sendbuf == MPI_IN_PLACE;
  return staged(
      "MPI_Reduce", comm, b,
      [&] {
        const int rc = b[0].stage("MPI_Reduce", sendbuf, times(count, 1), type, true, false);
        if (rc != MPI_SUCCESS || !root_here) return rc;
        return b[1].stage("MPI_Reduce", recvbuf, times(count, 1), type, in_place, true);
      },
      [&] {
        return driving("MPI_Reduce", comm, PMPI_Reduce, PMPI_Ireduce, b[0].get(), b[1].get(), count, type, op,
                       root, comm);
      });
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
  const Group g = group_of(comm);
  if (!g.intra)
    return driving("MPI_Allreduce", comm, PMPI_Allreduce, PMPI_Iallreduce, sendbuf, recvbuf, count, type, op,
                   comm);
  Staged b[2];
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return staged(
      "MPI_Allreduce", comm, b,
      [&] {
        const int rc = b[0].stage("MPI_Allreduce", sendbuf, times(count, 1), type, true, false);
        return rc != MPI_SUCCESS
                   ? rc
                   : b[1].stage("MPI_Allreduce", recvbuf, times(count, 1), type, in_place, true);
      },
      [&] {
        return driving("MPI_Allreduce", comm, PMPI_Allreduce, PMPI_Iallreduce, b[0].get(), b[1].get(), count,
                       type, op, comm);
      });
}

int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm) {
  const Group g = group_of(comm);
  if (!g.intra)
    return driving("MPI_Gather", comm, PMPI_Gather, PMPI_Igather, sendbuf, sendcount, sendtype, recvbuf,
                   recvcount, recvtype, root, comm);
  Staged b[2];
  const bool root_here = g.rank == root, in_place = sendbuf == MPI_IN_PLACE;
  return staged(
      "MPI_Gather", comm, b,
      [&] {
        const int rc = b[0].stage("MPI_Gather", sendbuf, times(sendcount, 1), sendtype, true, false);
        if (rc != MPI_SUCCESS || !root_here) return rc;
        return b[1].stage("MPI_Gather", recvbuf, times(recvcount, g.size), recvtype, in_place, true);
      },
      [&] {
        return driving("MPI_Gather", comm, PMPI_Gather, PMPI_Igather, b[0].get(), sendcount, sendtype,
                       b[1].get(), recvcount, recvtype, root, comm);
      });
}

int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                MPI_Datatype recvtype, int root, MPI_Comm comm) {
  const Group g = group_of(comm);
  if (!g.intra)
    return driving("MPI_Scatter", comm, PMPI_Scatter, PMPI_Iscatter, sendbuf, sendcount, sendtype, recvbuf,
                   recvcount, recvtype, root, comm);
  Staged b[2];
  const bool root_here = g.rank == root;
  return staged(
      "MPI_Scatter", comm, b,
      [&] {
        if (root_here) {
          const int rc = b[0].stage("MPI_Scatter", sendbuf, times(sendcount, g.size), sendtype, true, false);
          if (rc != MPI_SUCCESS) return rc;
        }
        return b[1].stage("MPI_Scatter", recvbuf, times(recvcount, 1), recvtype, false, true);
      },
      [&] {
        return driving("MPI_Scatter", comm, PMPI_Scatter, PMPI_Iscatter, b[0].get(), sendcount, sendtype,
                       b[1].get(), recvcount, recvtype, root, comm);
      });
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
  const Group g = group_of(comm);
  if (!g.intra)
    return driving("MPI_Allgather", comm, PMPI_Allgather, PMPI_Iallgather, sendbuf, sendcount, sendtype,
                   recvbuf, recvcount, recvtype, comm);
  Staged b[2];
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return staged(
      "MPI_Allgather", comm, b,
      [&] {
        const int rc = b[0].stage("MPI_Allgather", sendbuf, times(sendcount, 1), sendtype, true, false);
        if (rc != MPI_SUCCESS) return rc;
        return b[1].stage("MPI_Allgather", recvbuf, times(recvcount, g.size), recvtype, in_place, true);
      },
      [&] {
        return driving("MPI_Allgather", comm, PMPI_Allgather, PMPI_Iallgather, b[0].get(), sendcount,
                       sendtype, b[1].get(), recvcount, recvtype, comm);
      });
}

int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm) {
  const Group g = group_of(comm);
  if (!g.intra)
    return driving("MPI_Alltoall", comm, PMPI_Alltoall, PMPI_Ialltoall, sendbuf, sendcount, sendtype, recvbuf,
                   recvcount, recvtype, comm);
  Staged b[2];
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return staged(
      "MPI_Alltoall", comm, b,
      [&] {
        const int rc = b[0].stage("MPI_Alltoall", sendbuf, times(sendcount, g.size), sendtype, true, false);
        if (rc != MPI_SUCCESS) return rc;
        return b[1].stage("MPI_Alltoall", recvbuf, times(recvcount, g.size), recvtype, in_place, true);
      },
      [&] {
        return driving("MPI_Alltoall", comm, PMPI_Alltoall, PMPI_Ialltoall, b[0].get(), sendcount, sendtype,
                       b[1].get(), recvcount, recvtype, comm);
      });
}

int MPI_Barrier(MPI_Comm comm) { return driving("MPI_Barrier", comm, PMPI_Barrier, PMPI_Ibarrier, comm); }

// The v forms stage each buffer from its start to the end of its last block (blocks()).

int MPI_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm) {
  const Group g = group_of(comm);
  if (!g.intra)
    return driving("MPI_Gatherv", comm, PMPI_Gatherv, PMPI_Igatherv, sendbuf, sendcount, sendtype, recvbuf,
                   recvcounts, displs, recvtype, root, comm);
  Staged b[2];
  const bool root_here = g.rank == root, in_place = sendbuf == MPI_IN_PLACE;
  return staged(
      "MPI_Gatherv", comm, b,
      [&] {
        const int rc = b[0].stage("MPI_Gatherv", sendbuf, times(sendcount, 1), sendtype, true, false);
        if (rc != MPI_SUCCESS || !root_here) return rc;
        const Blocks r = blocks(recvcounts, displs, g.size);
        return b[1].stage("MPI_Gatherv", recvbuf, r.span, recvtype, in_place || r.gaps, true);
      },
      [&] {
        return driving("MPI_Gatherv", comm, PMPI_Gatherv, PMPI_Igatherv, b[0].get(), sendcount, sendtype,
                       b[1].get(), recvcounts, displs, recvtype, root, comm);
      });
}

int MPI_Scatterv(const void* sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype,
                 void* recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  const Group g = group_of(comm);
  if (!g.intra)
    return driving("MPI_Scatterv", comm, PMPI_Scatterv, PMPI_Iscatterv, sendbuf, sendcounts, displs, sendtype,
                   recvbuf, recvcount, recvtype, root, comm);
  Staged b[2];
  const bool root_here = g.rank == root;
  return staged(
      "MPI_Scatterv", comm, b,
      [&] {
        if (root_here) {
          const int rc = b[0].stage("MPI_Scatterv", sendbuf, blocks(sendcounts, displs, g.size).span,
                                    sendtype, true, false);
          if (rc != MPI_SUCCESS) return rc;
        }
        return b[1].stage("MPI_Scatterv", recvbuf, times(recvcount, 1), recvtype, false, true);
      },
      [&] {
        return driving("MPI_Scatterv", comm, PMPI_Scatterv, PMPI_Iscatterv, b[0].get(), sendcounts, displs,
                       sendtype, b[1].get(), recvcount, recvtype, root, comm);
      });
}

int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
  const Group g = group_of(comm);
  if (!g.intra)
    return driving("MPI_Allgatherv", comm, PMPI_Allgatherv, PMPI_Iallgatherv, sendbuf, sendcount, sendtype,
                   recvbuf, recvcounts, displs, recvtype, comm);
  Staged b[2];
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return staged(
      "MPI_Allgatherv", comm, b,
      [&] {
        const int rc = b[0].stage("MPI_Allgatherv", sendbuf, times(sendcount, 1), sendtype, true, false);
        if (rc != MPI_SUCCESS) return rc;
        const Blocks r = blocks(recvcounts, displs, g.size);
        return b[1].stage("MPI_Allgatherv", recvbuf, r.span, recvtype, in_place || r.gaps, true);
      },
      [&] {
        return driving("MPI_Allgatherv", comm, PMPI_Allgatherv, PMPI_Iallgatherv, b[0].get(), sendcount,
                       sendtype, b[1].get(), recvcounts, displs, recvtype, comm);
      });
}

int MPI_Alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                  void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype,
                  MPI_Comm comm) {
  const Group g = group_of(comm);
  if (!g.intra)
    return driving("MPI_Alltoallv", comm, PMPI_Alltoallv, PMPI_Ialltoallv, sendbuf, sendcounts, sdispls,
                   sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
  Staged b[2];
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return staged(
      "MPI_Alltoallv", comm, b,
      [&] {
        if (!in_place) {
          const int rc = b[0].stage("MPI_Alltoallv", sendbuf, blocks(sendcounts, sdispls, g.size).span,
                                    sendtype, true, false);
          if (rc != MPI_SUCCESS) return rc;
        }
        const Blocks r = blocks(recvcounts, rdispls, g.size);
        return b[1].stage("MPI_Alltoallv", recvbuf, r.span, recvtype, in_place || r.gaps, true);
      },
      [&] {
        return driving("MPI_Alltoallv", comm, PMPI_Alltoallv, PMPI_Ialltoallv, b[0].get(), sendcounts,
                       sdispls, sendtype, b[1].get(), recvcounts, rdispls, recvtype, comm);
      });
}

int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype type,
                       MPI_Op op, MPI_Comm comm) {
  const Group g = group_of(comm);
  if (!g.intra || recvcounts == nullptr)
    return driving("MPI_Reduce_scatter", comm, PMPI_Reduce_scatter, PMPI_Ireduce_scatter, sendbuf, recvbuf,
                   recvcounts, type, op, comm);
  Staged b[2];
  const bool in_place = sendbuf == MPI_IN_PLACE;
  const int all = sum(recvcounts, g.size), mine = recvcounts[g.rank];
  return staged(
      "MPI_Reduce_scatter", comm, b,
      [&] {
        const int rc = b[0].stage("MPI_Reduce_scatter", sendbuf, times(all, 1), type, true, false);
        if (rc != MPI_SUCCESS) return rc;
        // In place, the input is the receive buffer's `all` elements; the result its first `mine`.
        return b[1].stage("MPI_Reduce_scatter", recvbuf, times(in_place ? all : mine, 1), type, in_place,
                          true);
      },
      [&] {
        return driving("MPI_Reduce_scatter", comm, PMPI_Reduce_scatter, PMPI_Ireduce_scatter, b[0].get(),
                       b[1].get(), recvcounts, type, op, comm);
      });
}

int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                             MPI_Comm comm) {
  const Group g = group_of(comm);
  if (!g.intra)
    return driving("MPI_Reduce_scatter_block", comm, PMPI_Reduce_scatter_block, PMPI_Ireduce_scatter_block,
                   sendbuf, recvbuf, recvcount, type, op, comm);
  Staged b[2];
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return staged(
      "MPI_Reduce_scatter_block", comm, b,
      [&] {
        const int rc =
            b[0].stage("MPI_Reduce_scatter_block", sendbuf, times(recvcount, g.size), type, true, false);
        if (rc != MPI_SUCCESS) return rc;
        return b[1].stage("MPI_Reduce_scatter_block", recvbuf, times(recvcount, in_place ? g.size : 1), type,
                          in_place, true);
      },
      [&] {
        return driving("MPI_Reduce_scatter_block", comm, PMPI_Reduce_scatter_block,
                       PMPI_Ireduce_scatter_block, b[0].get(), b[1].get(), recvcount, type, op, comm);
      });
}

int MPI_Scan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  return scan("MPI_Scan", PMPI_Scan, PMPI_Iscan, sendbuf, recvbuf, count, type, op, comm, false);
}

int MPI_Exscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  return scan("MPI_Exscan", PMPI_Exscan, PMPI_Iexscan, sendbuf, recvbuf, count, type, op, comm, true);
}

// The w forms stage each buffer as bytes, from its start to the end of its last block (byte_blocks()).

int MPI_Alltoallw(const void* sendbuf, const int sendcounts[], const int sdispls[],
                  const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[], const int rdispls[],
                  const MPI_Datatype recvtypes[], MPI_Comm comm) {
  const Group g = group_of(comm);
  if (!g.intra)
    return driving("MPI_Alltoallw", comm, PMPI_Alltoallw, PMPI_Ialltoallw, sendbuf, sendcounts, sdispls,
                   sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
  Staged b[2];
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return staged(
      "MPI_Alltoallw", comm, b,
      [&] {
        if (!in_place) {
          const int rc =
              b[0].stage("MPI_Alltoallw", sendbuf, byte_blocks(sendcounts, sdispls, sendtypes, g.size).span,
                         MPI_BYTE, true, false);
          if (rc != MPI_SUCCESS) return rc;
        }
        const Blocks r = byte_blocks(recvcounts, rdispls, recvtypes, g.size);
        return b[1].stage("MPI_Alltoallw", recvbuf, r.span, MPI_BYTE, in_place || r.gaps, true);
      },
      [&] {
        return driving("MPI_Alltoallw", comm, PMPI_Alltoallw, PMPI_Ialltoallw, b[0].get(), sendcounts,
                       sdispls, sendtypes, b[1].get(), recvcounts, rdispls, recvtypes, comm);
      });
}

// The neighbourhood collectives: one block for each source (receive) and each destination (send) of
// the communicator's topology (neighbours()). A receive buffer where some source may be MPI_PROC_NULL
// is read first: that source's block keeps its bytes.

int MPI_Neighbor_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                           int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  Neighbours n;
  if (!neighbours(comm, n))
    return driving("MPI_Neighbor_allgather", comm, PMPI_Neighbor_allgather, PMPI_Ineighbor_allgather, sendbuf,
                   sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  Staged b[2];
  return staged(
      "MPI_Neighbor_allgather", comm, b,
      [&] {
        const int rc =
            b[0].stage("MPI_Neighbor_allgather", sendbuf, times(sendcount, 1), sendtype, true, false);
        if (rc != MPI_SUCCESS) return rc;
        return b[1].stage("MPI_Neighbor_allgather", recvbuf, times(recvcount, n.in), recvtype, n.null_sources,
                          true);
      },
      [&] {
        return driving("MPI_Neighbor_allgather", comm, PMPI_Neighbor_allgather, PMPI_Ineighbor_allgather,
                       b[0].get(), sendcount, sendtype, b[1].get(), recvcount, recvtype, comm);
      });
}

int MPI_Neighbor_allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                            const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                            MPI_Comm comm) {
  Neighbours n;
  if (!neighbours(comm, n))
    return driving("MPI_Neighbor_allgatherv", comm, PMPI_Neighbor_allgatherv, PMPI_Ineighbor_allgatherv,
                   sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
  Staged b[2];
  return staged(
      "MPI_Neighbor_allgatherv", comm, b,
      [&] {
        const int rc =
            b[0].stage("MPI_Neighbor_allgatherv", sendbuf, times(sendcount, 1), sendtype, true, false);
        if (rc != MPI_SUCCESS) return rc;
        const Blocks r = blocks(recvcounts, displs, n.in);
        return b[1].stage("MPI_Neighbor_allgatherv", recvbuf, r.span, recvtype, n.null_sources || r.gaps,
                          true);
      },
      [&] {
        return driving("MPI_Neighbor_allgatherv", comm, PMPI_Neighbor_allgatherv, PMPI_Ineighbor_allgatherv,
                       b[0].get(), sendcount, sendtype, b[1].get(), recvcounts, displs, recvtype, comm);
      });
}

int MPI_Neighbor_alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                          int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  Neighbours n;
  if (!neighbours(comm, n))
    return driving("MPI_Neighbor_alltoall", comm, PMPI_Neighbor_alltoall, PMPI_Ineighbor_alltoall, sendbuf,
                   sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  Staged b[2];
  return staged(
      "MPI_Neighbor_alltoall", comm, b,
      [&] {
        const int rc =
            b[0].stage("MPI_Neighbor_alltoall", sendbuf, times(sendcount, n.out), sendtype, true, false);
        if (rc != MPI_SUCCESS) return rc;
        return b[1].stage("MPI_Neighbor_alltoall", recvbuf, times(recvcount, n.in), recvtype, n.null_sources,
                          true);
      },
      [&] {
        return driving("MPI_Neighbor_alltoall", comm, PMPI_Neighbor_alltoall, PMPI_Ineighbor_alltoall,
                       b[0].get(), sendcount, sendtype, b[1].get(), recvcount, recvtype, comm);
      });
}

int MPI_Neighbor_alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                           MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
                           MPI_Datatype recvtype, MPI_Comm comm) {
  Neighbours n;
  if (!neighbours(comm, n))
    return driving("MPI_Neighbor_alltoallv", comm, PMPI_Neighbor_alltoallv, PMPI_Ineighbor_alltoallv, sendbuf,
                   sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
  Staged b[2];
  return staged(
      "MPI_Neighbor_alltoallv", comm, b,
      [&] {
        const int rc = b[0].stage("MPI_Neighbor_alltoallv", sendbuf, blocks(sendcounts, sdispls, n.out).span,
                                  sendtype, true, false);
        if (rc != MPI_SUCCESS) return rc;
        const Blocks r = blocks(recvcounts, rdispls, n.in);
        return b[1].stage("MPI_Neighbor_alltoallv", recvbuf, r.span, recvtype, n.null_sources || r.gaps,
                          true);
      },
      [&] {
        return driving("MPI_Neighbor_alltoallv", comm, PMPI_Neighbor_alltoallv, PMPI_Ineighbor_alltoallv,
                       b[0].get(), sendcounts, sdispls, sendtype, b[1].get(), recvcounts, rdispls, recvtype,
                       comm);
      });
}

int MPI_Neighbor_alltoallw(const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                           const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                           const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm) {
  Neighbours n;
  if (!neighbours(comm, n))
    return driving("MPI_Neighbor_alltoallw", comm, PMPI_Neighbor_alltoallw, PMPI_Ineighbor_alltoallw, sendbuf,
                   sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
  Staged b[2];
  return staged(
      "MPI_Neighbor_alltoallw", comm, b,
      [&] {
        const int rc =
            b[0].stage("MPI_Neighbor_alltoallw", sendbuf,
                       byte_blocks(sendcounts, sdispls, sendtypes, n.out).span, MPI_BYTE, true, false);
        if (rc != MPI_SUCCESS) return rc;
        const Blocks r = byte_blocks(recvcounts, rdispls, recvtypes, n.in);
        return b[1].stage("MPI_Neighbor_alltoallw", recvbuf, r.span, MPI_BYTE, n.null_sources || r.gaps,
                          true);
      },
      [&] {
        return driving("MPI_Neighbor_alltoallw", comm, PMPI_Neighbor_alltoallw, PMPI_Ineighbor_alltoallw,
                       b[0].get(), sendcounts, sdispls, sendtypes, b[1].get(), recvcounts, rdispls, recvtypes,
                       comm);
      });
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

HDSM_VISIBLE_END
}  // extern "C"
