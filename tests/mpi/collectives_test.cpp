// Collectives on shared objects (src/mpi/collectives.cpp): MPI_Bcast, MPI_Reduce, MPI_Allreduce,
// MPI_Gather, MPI_Scatter, MPI_Allgather, MPI_Alltoall, their v and w forms, the reduce-scatters, the
// scans and the neighbourhood collectives, and their nonblocking forms, on device-valid objects give libmpi's
// results and take no page fault (their buffers are staged through host memory by bulk copies),
// in place too; a host buffer beside a shared one still works, and a range that leaves its object
// is refused before anything moves.
#include "mpi_fixture.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

using hdsm::test::pattern;

using namespace mpi_test;

constexpr std::size_t kBytes = 5 * kChunk + 76;  // a multiple of 4: also read as unsigned ints

std::uint64_t faults(const hdsm::Runtime& rt) { return rt.stats().read_faults + rt.stats().write_faults; }

/// The element-wise unsigned sum of the patterns `first` .. `first` + ranks - 1 (n bytes each), as
/// bytes.
std::vector<unsigned char> summed(std::size_t n, int first, int ranks) {
  std::vector<unsigned char> out(n, 0);
  for (int r = 0; r < ranks; ++r) {
    const std::vector<unsigned char> x = pattern(n, first + r);
    for (std::size_t i = 0; i + sizeof(unsigned) <= n; i += sizeof(unsigned)) {
      unsigned u = 0, s = 0;
      std::memcpy(&u, x.data() + i, sizeof u);
      std::memcpy(&s, out.data() + i, sizeof s);
      s += u;
      std::memcpy(out.data() + i, &s, sizeof s);
    }
  }
  return out;
}

/// The patterns `first`, `first` + 1, ... of every rank (kBytes each, from index `from` on), one
/// after the other: what a gather of each rank's pattern gives.
std::vector<unsigned char> concatenated(int first, std::size_t from = 0) {
  std::vector<unsigned char> out;
  for (int r = 0; r < world_size(); ++r) {
    const std::vector<unsigned char> x = pattern(kBytes, first + r, from);
    out.insert(out.end(), x.begin(), x.end());
  }
  return out;
}

/// Every rank of MPI_COMM_WORLD takes part, however many there are.
class Collectives : public Mpi {
 protected:
  Collectives() { pairs_only_ = false; }
  int rank() const { return world_rank(); }

  /// The bytes of the shared object `p` (a bulk copy: no fault).
  std::vector<unsigned char> bytes(const unsigned char* p, std::size_t n) {
    std::vector<unsigned char> v(n);
    rt_.memcpy(v.data(), p, n);
    return v;
  }
  unsigned char* device_valid(std::size_t n, int salt) { return buffer(Where::shared_on_device, n, salt); }
  /// A shared object of `n` zero bytes whose host copy is invalid.
  unsigned char* empty(std::size_t n) {
    unsigned char* p = buffer(Where::shared_on_device, n, -1);
    rt_.call(fill_kernel(), hdsm::cover(n), hdsm::out(p), std::uint64_t{0}, 0);  // writes nothing
    rt_.sync();
    return p;
  }
};

TEST_F(Collectives, EachCollectiveOnDeviceValidObjectsGivesLibmpisResultWithoutFaults) {
  const int me = rank(), ranks = world_size(), last = ranks - 1;
  const std::size_t all_bytes = kBytes * static_cast<std::size_t>(ranks);
  const int count = static_cast<int>(kBytes), ints = static_cast<int>(kBytes / sizeof(unsigned));
  unsigned char* bcast = me == 0 ? device_valid(kBytes, 40) : empty(kBytes);
  unsigned char* mine = device_valid(kBytes, 41 + me);
  unsigned char* sum = empty(kBytes);
  unsigned char* reduced = empty(kBytes);
  unsigned char* in_place = device_valid(kBytes, 41 + me);
  unsigned char* gathered = empty(all_bytes);
  unsigned char* scatter_from = device_valid(all_bytes, 43);
  unsigned char* scattered = empty(kBytes);
  unsigned char* all = empty(all_bytes);
  unsigned char* to_all = device_valid(all_bytes, 100 + me);
  unsigned char* from_all = empty(all_bytes);
  rt_.reset_stats();

  ASSERT_EQ(MPI_Bcast(bcast, count, MPI_BYTE, 0, MPI_COMM_WORLD), MPI_SUCCESS);
  ASSERT_EQ(MPI_Allreduce(mine, sum, ints, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ASSERT_EQ(MPI_Reduce(mine, reduced, ints, MPI_UNSIGNED, MPI_SUM, last, MPI_COMM_WORLD), MPI_SUCCESS);
  ASSERT_EQ(MPI_Allreduce(MPI_IN_PLACE, in_place, ints, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ASSERT_EQ(MPI_Gather(mine, count, MPI_BYTE, gathered, count, MPI_BYTE, 0, MPI_COMM_WORLD), MPI_SUCCESS);
  ASSERT_EQ(MPI_Scatter(scatter_from, count, MPI_BYTE, scattered, count, MPI_BYTE, last, MPI_COMM_WORLD),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Allgather(mine, count, MPI_BYTE, all, count, MPI_BYTE, MPI_COMM_WORLD), MPI_SUCCESS);
  ASSERT_EQ(MPI_Alltoall(to_all, count, MPI_BYTE, from_all, count, MPI_BYTE, MPI_COMM_WORLD), MPI_SUCCESS);
  EXPECT_EQ(faults(rt_), 0u) << "a collective touched a shared object through its user view";

  EXPECT_EQ(bytes(bcast, kBytes), pattern(kBytes, 40)) << "MPI_Bcast";
  EXPECT_EQ(bytes(sum, kBytes), summed(kBytes, 41, world_size())) << "MPI_Allreduce";
  EXPECT_EQ(bytes(in_place, kBytes), summed(kBytes, 41, world_size())) << "MPI_Allreduce in place";
  EXPECT_EQ(bytes(reduced, kBytes),
            me == last ? summed(kBytes, 41, world_size()) : std::vector<unsigned char>(kBytes, 0))
      << "MPI_Reduce: the root's buffer only";
  EXPECT_EQ(bytes(gathered, all_bytes), me == 0 ? concatenated(41) : std::vector<unsigned char>(all_bytes, 0))
      << "MPI_Gather";
  EXPECT_EQ(bytes(scattered, kBytes), pattern(kBytes, 43, static_cast<std::size_t>(me) * kBytes))
      << "MPI_Scatter";
  EXPECT_EQ(bytes(all, all_bytes), concatenated(41)) << "MPI_Allgather";
  // Rank s's segment r of its pattern 100 + s goes to rank r, at segment s.
  EXPECT_EQ(bytes(from_all, all_bytes), concatenated(100, static_cast<std::size_t>(me) * kBytes))
      << "MPI_Alltoall";
}

/// `into` with `n` bytes of `from` copied to `at`.
std::vector<unsigned char> with(std::vector<unsigned char> into, std::size_t at,
                                const std::vector<unsigned char>& from, std::size_t n) {
  std::copy_n(from.begin(), n, into.begin() + static_cast<std::ptrdiff_t>(at));
  return into;
}

// The v forms, the reduce-scatters and the scans are staged too: libmpi sees host memory (with the
// single-copy transport it reads other ranks' buffers from outside their process, where a shared
// object's pages fault nothing in: it failed with EFAULT), and a receive buffer whose blocks leave
// gaps keeps the bytes between them.
TEST_F(Collectives, VFormsReduceScattersAndScansOnDeviceValidObjectsGiveLibmpisResultWithoutFaults) {
  const int me = rank(), ranks = world_size(), last = ranks - 1;
  const auto n = static_cast<std::size_t>(ranks);
  // Rank r's block: 1000 (r + 1) bytes at the sum of the blocks before it plus a gap of 16 (r + 1).
  std::vector<int> counts(n), displs(n);
  std::size_t span = 0;
  for (std::size_t r = 0; r < n; ++r) {
    counts[r] = 1000 * static_cast<int>(r + 1);
    displs[r] = static_cast<int>(span + 16 * (r + 1));
    span = static_cast<std::size_t>(displs[r] + counts[r]);
  }
  const int mine = counts[static_cast<std::size_t>(me)];
  unsigned char* own = device_valid(static_cast<std::size_t>(mine), 41 + me);
  unsigned char* gathered = device_valid(span, 60);
  unsigned char* all = device_valid(span, 61);
  unsigned char* scatter_from = device_valid(span, 43);
  unsigned char* scattered = empty(static_cast<std::size_t>(mine));
  // Alltoallv: rank s sends 300 + 10 r bytes from s's pattern at 1000 r to rank r, which puts them
  // at 1000 s + 8.
  std::vector<int> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
  for (std::size_t r = 0; r < n; ++r) {
    send_counts[r] = 300 + 10 * static_cast<int>(r);
    send_displs[r] = 1000 * static_cast<int>(r);
    recv_counts[r] = 300 + 10 * me;
    recv_displs[r] = 1000 * static_cast<int>(r) + 8;
  }
  unsigned char* to_all = device_valid(1000 * n, 100 + me);
  unsigned char* from_all = device_valid(1000 * n, 70 + me);
  // Reduce-scatter of unsigned ints: every rank's kBytes / 4 ints per rank.
  const std::size_t block = kBytes, total = block * n;
  const int ints = static_cast<int>(block / sizeof(unsigned));
  unsigned char* reduce_from = device_valid(total, 80 + me);
  unsigned char* reduced = empty(block);
  unsigned char* reduced_block = empty(block);
  std::vector<int> reduce_counts(n, ints);
  unsigned char* scan_from = device_valid(block, 90 + me);
  unsigned char* scanned = empty(block);
  unsigned char* exscanned = device_valid(block, 95);
  rt_.reset_stats();

  ASSERT_EQ(MPI_Gatherv(own, mine, MPI_BYTE, gathered, counts.data(), displs.data(), MPI_BYTE, last,
                        MPI_COMM_WORLD),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Allgatherv(own, mine, MPI_BYTE, all, counts.data(), displs.data(), MPI_BYTE, MPI_COMM_WORLD),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Scatterv(scatter_from, counts.data(), displs.data(), MPI_BYTE, scattered, mine, MPI_BYTE, 0,
                         MPI_COMM_WORLD),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Alltoallv(to_all, send_counts.data(), send_displs.data(), MPI_BYTE, from_all,
                          recv_counts.data(), recv_displs.data(), MPI_BYTE, MPI_COMM_WORLD),
            MPI_SUCCESS);
  ASSERT_EQ(
      MPI_Reduce_scatter(reduce_from, reduced, reduce_counts.data(), MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD),
      MPI_SUCCESS);
  ASSERT_EQ(MPI_Reduce_scatter_block(reduce_from, reduced_block, ints, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Scan(scan_from, scanned, ints, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  ASSERT_EQ(MPI_Exscan(scan_from, exscanned, ints, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  EXPECT_EQ(faults(rt_), 0u) << "a collective touched a shared object through its user view";

  std::vector<unsigned char> blocks = pattern(span, 61);
  for (std::size_t r = 0; r < n; ++r)
    blocks = with(blocks, static_cast<std::size_t>(displs[r]),
                  pattern(static_cast<std::size_t>(counts[r]), 41 + static_cast<int>(r)),
                  static_cast<std::size_t>(counts[r]));
  EXPECT_EQ(bytes(all, span), blocks) << "MPI_Allgatherv";
  std::vector<unsigned char> at_root = pattern(span, 60);
  if (me == last)
    for (std::size_t r = 0; r < n; ++r)
      at_root = with(at_root, static_cast<std::size_t>(displs[r]),
                     pattern(static_cast<std::size_t>(counts[r]), 41 + static_cast<int>(r)),
                     static_cast<std::size_t>(counts[r]));
  EXPECT_EQ(bytes(gathered, span), at_root) << "MPI_Gatherv: the root's blocks, the gaps kept";
  EXPECT_EQ(bytes(scattered, static_cast<std::size_t>(mine)),
            pattern(static_cast<std::size_t>(mine), 43,
                    static_cast<std::size_t>(displs[static_cast<std::size_t>(me)])))
      << "MPI_Scatterv";
  std::vector<unsigned char> exchanged = pattern(1000 * n, 70 + me);
  for (std::size_t s = 0; s < n; ++s)
    exchanged = with(exchanged, 1000 * s + 8,
                     pattern(static_cast<std::size_t>(recv_counts[s]), 100 + static_cast<int>(s),
                             1000 * static_cast<std::size_t>(me)),
                     static_cast<std::size_t>(recv_counts[s]));
  EXPECT_EQ(bytes(from_all, 1000 * n), exchanged) << "MPI_Alltoallv";
  const std::vector<unsigned char> sums = summed(total, 80, ranks);
  const std::vector<unsigned char> my_sum(sums.begin() + static_cast<std::ptrdiff_t>(block) * me,
                                          sums.begin() + static_cast<std::ptrdiff_t>(block) * (me + 1));
  EXPECT_EQ(bytes(reduced, block), my_sum) << "MPI_Reduce_scatter";
  EXPECT_EQ(bytes(reduced_block, block), my_sum) << "MPI_Reduce_scatter_block";
  EXPECT_EQ(bytes(scanned, block), summed(block, 90, me + 1)) << "MPI_Scan";
  EXPECT_EQ(bytes(exscanned, block), me == 0 ? pattern(block, 95) : summed(block, 90, me))
      << "MPI_Exscan: rank 0's buffer kept";
}

// MPI_Alltoallw and the neighbourhood collectives are staged too, as bytes where each block has a
// datatype of its own; a receive block whose source is MPI_PROC_NULL (a Cartesian line's ends) keeps
// its bytes, as do the gaps between blocks. Not staged, each failed with EFAULT at 2 and 3 ranks
// (the single-copy transport) and faulted at 1.
TEST_F(Collectives, AlltoallwAndNeighbourhoodCollectivesOnDeviceValidObjectsGiveLibmpisResultWithoutFaults) {
  const int me = rank(), ranks = world_size();
  const auto n = static_cast<std::size_t>(ranks);
  const int left = (me + ranks - 1) % ranks, right = (me + 1) % ranks;
  const std::size_t b = kBytes;  // a multiple of 4
  const int count = static_cast<int>(b), ints = static_cast<int>(b / sizeof(unsigned));
  // Alltoallw: rank s sends rank r 4000 bytes from 5000 r, as bytes to even ranks and as unsigned
  // ints to odd ones; r puts them at 5000 s + 8.
  const auto type_for = [](std::size_t r) { return r % 2 == 0 ? MPI_BYTE : MPI_UNSIGNED; };
  const auto count_for = [](std::size_t r) { return r % 2 == 0 ? 4000 : 1000; };
  std::vector<int> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
  std::vector<MPI_Datatype> send_types(n), recv_types(n);
  const auto mine = static_cast<std::size_t>(me);
  for (std::size_t r = 0; r < n; ++r) {
    send_counts[r] = count_for(r);
    send_displs[r] = 5000 * static_cast<int>(r);
    send_types[r] = type_for(r);
    recv_counts[r] = count_for(mine);
    recv_displs[r] = 5000 * static_cast<int>(r) + 8;
    recv_types[r] = type_for(mine);
  }
  unsigned char* to_all = device_valid(5000 * n, 100 + me);
  unsigned char* from_all = device_valid(5000 * n, 70 + me);
  // A periodic ring (a Cartesian topology: two neighbours), a line (its ends have MPI_PROC_NULL
  // neighbours) and a directed ring (a distributed graph: one source, one destination).
  MPI_Comm ring = MPI_COMM_NULL, line = MPI_COMM_NULL, directed = MPI_COMM_NULL;
  const int periodic = 1, open = 0;
  ASSERT_EQ(MPI_Cart_create(MPI_COMM_WORLD, 1, &ranks, &periodic, 0, &ring), MPI_SUCCESS);
  ASSERT_EQ(MPI_Cart_create(MPI_COMM_WORLD, 1, &ranks, &open, 0, &line), MPI_SUCCESS);
  ASSERT_EQ(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &left, MPI_UNWEIGHTED, 1, &right,
                                           MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &directed),
            MPI_SUCCESS);
  unsigned char* own = device_valid(b, 41 + me);
  unsigned char* from_ring = empty(2 * b);
  unsigned char* from_line = device_valid(2 * b, 140);
  unsigned char* gathered = device_valid(b + 24, 141);
  unsigned char* two = device_valid(2 * b, 110 + me);
  unsigned char* from_left = empty(b);
  unsigned char* from_left_v = device_valid(b + 24, 142);
  unsigned char* from_left_w = device_valid(b + 16, 143);
  const int at_8 = 8, at_16 = 16;
  const MPI_Aint bytes_at_0 = 0, bytes_at_16 = 16;
  const MPI_Datatype as_ints = MPI_UNSIGNED;
  rt_.reset_stats();

  ASSERT_EQ(MPI_Alltoallw(to_all, send_counts.data(), send_displs.data(), send_types.data(), from_all,
                          recv_counts.data(), recv_displs.data(), recv_types.data(), MPI_COMM_WORLD),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Neighbor_allgather(own, count, MPI_BYTE, from_ring, count, MPI_BYTE, ring), MPI_SUCCESS);
  ASSERT_EQ(MPI_Neighbor_allgather(own, count, MPI_BYTE, from_line, count, MPI_BYTE, line), MPI_SUCCESS);
  ASSERT_EQ(MPI_Neighbor_allgatherv(own, count, MPI_BYTE, gathered, &count, &at_16, MPI_BYTE, directed),
            MPI_SUCCESS);
  // The second block of `two` goes to the right; the first comes back from the left's second.
  ASSERT_EQ(MPI_Neighbor_alltoall(two + b, count, MPI_BYTE, from_left, count, MPI_BYTE, directed),
            MPI_SUCCESS);
  ASSERT_EQ(
      MPI_Neighbor_alltoallv(two, &count, &at_8, MPI_BYTE, from_left_v, &count, &at_8, MPI_BYTE, directed),
      MPI_SUCCESS);
  ASSERT_EQ(MPI_Neighbor_alltoallw(two, &ints, &bytes_at_0, &as_ints, from_left_w, &ints, &bytes_at_16,
                                   &as_ints, directed),
            MPI_SUCCESS);
  EXPECT_EQ(faults(rt_), 0u) << "a collective touched a shared object through its user view";

  std::vector<unsigned char> exchanged = pattern(5000 * n, 70 + me);
  for (std::size_t s = 0; s < n; ++s)
    exchanged = with(exchanged, 5000 * s + 8, pattern(4000, 100 + static_cast<int>(s), 5000 * mine), 4000);
  EXPECT_EQ(bytes(from_all, 5000 * n), exchanged) << "MPI_Alltoallw";
  std::vector<unsigned char> around = pattern(b, 41 + left);
  const std::vector<unsigned char> right_own = pattern(b, 41 + right);
  around.insert(around.end(), right_own.begin(), right_own.end());
  EXPECT_EQ(bytes(from_ring, 2 * b), around) << "MPI_Neighbor_allgather on a ring";
  std::vector<unsigned char> ends = pattern(2 * b, 140);
  if (me > 0) ends = with(ends, 0, pattern(b, 41 + me - 1), b);
  if (me < ranks - 1) ends = with(ends, b, pattern(b, 41 + me + 1), b);
  EXPECT_EQ(bytes(from_line, 2 * b), ends) << "MPI_Neighbor_allgather on a line: no neighbour, bytes kept";
  EXPECT_EQ(bytes(gathered, b + 24), with(pattern(b + 24, 141), 16, pattern(b, 41 + left), b))
      << "MPI_Neighbor_allgatherv";
  EXPECT_EQ(bytes(from_left, b), pattern(b, 110 + left, b)) << "MPI_Neighbor_alltoall";
  EXPECT_EQ(bytes(from_left_v, b + 24), with(pattern(b + 24, 142), 8, pattern(b, 110 + left, 8), b))
      << "MPI_Neighbor_alltoallv";
  EXPECT_EQ(bytes(from_left_w, b + 16), with(pattern(b + 16, 143), 16, pattern(b, 110 + left), b))
      << "MPI_Neighbor_alltoallw";
  for (MPI_Comm* c : {&ring, &line, &directed}) MPI_Comm_free(c);
}

// The nonblocking forms stage as the blocking ones do: what they read at the call, what they wrote
// before their request completes (MPI_Test or MPI_Wait). Not staged, they touched the objects through
// their user views (120 to 180 faults a rank here).
TEST_F(Collectives, NonblockingCollectivesOnDeviceValidObjectsCompleteWithLibmpisResultWithoutFaults) {
  const int me = rank(), ranks = world_size(), last = ranks - 1;
  const auto n = static_cast<std::size_t>(ranks);
  const int left = (me + ranks - 1) % ranks, right = (me + 1) % ranks;
  const std::size_t b = kBytes;
  const int count = static_cast<int>(b), ints = static_cast<int>(b / sizeof(unsigned));
  unsigned char* broadcast = device_valid(b, me == 0 ? 200 : 201);
  unsigned char* to_sum = device_valid(b, 41 + me);
  unsigned char* sum = empty(b);
  unsigned char* own = device_valid(b, 50 + me);
  unsigned char* gathered = empty(b * n);
  std::vector<int> counts(n, count), displs(n);
  for (std::size_t r = 0; r < n; ++r) displs[r] = static_cast<int>(r * b + 8 * (r + 1));
  const std::size_t span = n * b + 8 * n;
  unsigned char* gathered_v = device_valid(span, 202);
  unsigned char* scanned = empty(b);
  MPI_Comm directed = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &left, MPI_UNWEIGHTED, 1, &right,
                                           MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &directed),
            MPI_SUCCESS);
  unsigned char* from_left = empty(b);
  rt_.reset_stats();

  std::vector<MPI_Request> requests(7, MPI_REQUEST_NULL);
  ASSERT_EQ(MPI_Ibcast(broadcast, count, MPI_BYTE, 0, MPI_COMM_WORLD, &requests[0]), MPI_SUCCESS);
  ASSERT_EQ(MPI_Iallreduce(to_sum, sum, ints, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD, &requests[1]),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Igather(own, count, MPI_BYTE, gathered, count, MPI_BYTE, last, MPI_COMM_WORLD, &requests[2]),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Iallgatherv(own, count, MPI_BYTE, gathered_v, counts.data(), displs.data(), MPI_BYTE,
                            MPI_COMM_WORLD, &requests[3]),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Iscan(to_sum, scanned, ints, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD, &requests[4]),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Ineighbor_alltoall(own, count, MPI_BYTE, from_left, count, MPI_BYTE, directed, &requests[5]),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Ibarrier(MPI_COMM_WORLD, &requests[6]), MPI_SUCCESS);
  // One completes by MPI_Test, the others by MPI_Waitall.
  for (int flag = 0; flag == 0;) ASSERT_EQ(MPI_Test(&requests[1], &flag, MPI_STATUS_IGNORE), MPI_SUCCESS);
  EXPECT_EQ(bytes(sum, b), summed(kBytes, 41, world_size())) << "MPI_Iallreduce, once its request completed";
  ASSERT_EQ(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
            MPI_SUCCESS);
  EXPECT_EQ(faults(rt_), 0u) << "a collective touched a shared object through its user view";

  EXPECT_EQ(bytes(broadcast, b), pattern(b, 200)) << "MPI_Ibcast";
  EXPECT_EQ(bytes(gathered, b * n), me == last ? concatenated(50) : std::vector<unsigned char>(b * n, 0))
      << "MPI_Igather: the root's buffer, no other";
  std::vector<unsigned char> blocks = pattern(span, 202);
  for (std::size_t r = 0; r < n; ++r)
    blocks = with(blocks, static_cast<std::size_t>(displs[r]), pattern(b, 50 + static_cast<int>(r)), b);
  EXPECT_EQ(bytes(gathered_v, span), blocks) << "MPI_Iallgatherv: the gaps kept";
  EXPECT_EQ(bytes(scanned, b), summed(b, 41, me + 1)) << "MPI_Iscan";
  EXPECT_EQ(bytes(from_left, b), pattern(b, 50 + left)) << "MPI_Ineighbor_alltoall";
  MPI_Comm_free(&directed);
}

// On an intercommunicator nothing is staged: libmpi gets the program's buffers as they are, in the
// blocking and the nonblocking forms. (Written once for both forms, the collectives passed it null
// buffers there.)
TEST_F(Collectives, IntercommunicatorCollectivesGetTheProgramsBuffers) {
  const int me = rank(), ranks = world_size();
  if (ranks < 2) GTEST_SKIP() << "needs two ranks";
  const int side = me == 0 ? 0 : 1;  // rank 0 alone, the others together
  MPI_Comm half = MPI_COMM_NULL, inter = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, side, me, &half), MPI_SUCCESS);
  ASSERT_EQ(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, side == 0 ? 1 : 0, 5, &inter), MPI_SUCCESS);
  const int mine = me + 1;
  int other = 0;  // the sum over the other side
  ASSERT_EQ(MPI_Allreduce(&mine, &other, 1, MPI_INT, MPI_SUM, inter), MPI_SUCCESS);
  EXPECT_EQ(other, side == 0 ? ranks * (ranks + 1) / 2 - 1 : 1);
  int again = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Iallreduce(&mine, &again, 1, MPI_INT, MPI_SUM, inter, &request), MPI_SUCCESS);
  ASSERT_EQ(MPI_Wait(&request, MPI_STATUS_IGNORE), MPI_SUCCESS);
  EXPECT_EQ(again, other) << "MPI_Iallreduce";
  // A broadcast from rank 0's side: rank 0 passes MPI_ROOT, the other side receives from its rank 0.
  int value = side == 0 ? 42 : 0;
  ASSERT_EQ(MPI_Bcast(&value, 1, MPI_INT, side == 0 ? MPI_ROOT : 0, inter), MPI_SUCCESS);
  EXPECT_EQ(value, 42);
  MPI_Comm_free(&inter);
  MPI_Comm_free(&half);
}

TEST_F(Collectives, HostBuffersBesideSharedOnesPassThrough) {
  const int me = rank();
  const int ints = static_cast<int>(kBytes / sizeof(unsigned));
  unsigned char* host = buffer(Where::host, kBytes, 41 + me);
  unsigned char* sum = empty(kBytes);
  ASSERT_EQ(MPI_Allreduce(host, sum, ints, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  EXPECT_EQ(bytes(sum, kBytes), summed(kBytes, 41, world_size()));
  unsigned char* shared = device_valid(kBytes, 41 + me);
  unsigned char* host_sum = buffer(Where::host, kBytes, -1);
  ASSERT_EQ(MPI_Allreduce(shared, host_sum, ints, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  EXPECT_EQ(std::vector<unsigned char>(host_sum, host_sum + kBytes), summed(kBytes, 41, world_size()));
}

// A receive posted before a collective matches while the rank waits in it (MPI's progress rule): rank
// 0 sends synchronously to the last rank, which posted its receive, then both enter the collective.
// Receives are matched only when libhdsm_mpi drives them, and the collectives did not: each of these
// hung (the last rank in the collective, rank 0 in its MPI_Ssend), host memory only; the window calls
// hung until they drove too, MPI_Win_wait included.
TEST_F(Collectives, AReceivePostedBeforeACollectiveMatchesWhileTheRankWaitsInIt) {
  const int me = rank(), last = world_size() - 1;
  if (last == 0) GTEST_SKIP() << "needs two ranks";
  const std::size_t n = 1 << 20;  // past the eager limit, as a 1-byte MPI_Ssend is
  std::vector<unsigned char> buf(n, 0);
  int value = me + 1, sum = 0;
  std::vector<int> counts(static_cast<std::size_t>(world_size()), 1), displs(counts.size());
  for (std::size_t r = 0; r < displs.size(); ++r) displs[r] = static_cast<int>(r);
  std::vector<int> everyone(counts.size(), 0), two(2, 0);
  // A ring for a neighbourhood collective.
  MPI_Comm ring = MPI_COMM_NULL;
  const int ranks = world_size(), periodic = 1;
  ASSERT_EQ(MPI_Cart_create(MPI_COMM_WORLD, 1, &ranks, &periodic, 0, &ring), MPI_SUCCESS);
  // (MPI_Win_allocate: MPI_Win_create needs a transport with one-sided copies, which the tests turn off.)
  void* exposed = nullptr;
  MPI_Win window = MPI_WIN_NULL;
  ASSERT_EQ(MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &exposed, &window),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Win_fence(0, window), MPI_SUCCESS);
  const std::vector<std::function<int()>> collectives = {
      [] { return MPI_Barrier(MPI_COMM_WORLD); },
      [&] { return MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD); },
      [&] { return MPI_Bcast(&value, 1, MPI_INT, 0, MPI_COMM_WORLD); },
      [&] {
        return MPI_Allgatherv(&value, 1, MPI_INT, everyone.data(), counts.data(), displs.data(), MPI_INT,
                              MPI_COMM_WORLD);
      },
      [&] { return MPI_Neighbor_allgather(&value, 1, MPI_INT, two.data(), 1, MPI_INT, ring); },
      // One-sided communication: the calls that make and free a window and the fence are collective.
      [&] { return MPI_Win_fence(0, window); },
      [&] {
        void* base = nullptr;
        MPI_Win made = MPI_WIN_NULL;
        const int rc = MPI_Win_allocate(64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &made);
        return rc != MPI_SUCCESS ? rc : MPI_Win_free(&made);
      },
      [&] {
        void* base = nullptr;
        MPI_Win made = MPI_WIN_NULL;
        const int rc = MPI_Win_allocate_shared(64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &made);
        return rc != MPI_SUCCESS ? rc : MPI_Win_free(&made);
      }};
  for (std::size_t c = 0; c < collectives.size(); ++c) {
    SCOPED_TRACE("collective " + std::to_string(c));
    MPI_Request request = MPI_REQUEST_NULL;
    if (me == last) {
      std::fill(buf.begin(), buf.end(), 0);
      ASSERT_EQ(MPI_Irecv(buf.data(), static_cast<int>(n), MPI_BYTE, 0, 7, MPI_COMM_WORLD, &request),
                MPI_SUCCESS);
    } else if (me == 0) {
      const std::vector<unsigned char> data = pattern(n, static_cast<int>(c));
      ASSERT_EQ(MPI_Ssend(data.data(), static_cast<int>(n), MPI_BYTE, last, 7, MPI_COMM_WORLD), MPI_SUCCESS);
    }
    ASSERT_EQ(collectives[c](), MPI_SUCCESS);
    if (me == last) {
      ASSERT_EQ(MPI_Wait(&request, MPI_STATUS_IGNORE), MPI_SUCCESS);
      EXPECT_EQ(buf, pattern(n, static_cast<int>(c)));
    }
  }
  // Active-target synchronization (post, start, complete, wait): the last rank waits in MPI_Win_wait
  // for rank 0's MPI_Win_complete, which comes after rank 0's MPI_Ssend to the receive the last rank
  // posted before MPI_Win_post.
  {
    MPI_Group world_group = MPI_GROUP_NULL, peer = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    const int other = me == last ? 0 : last;
    MPI_Group_incl(world_group, 1, &other, &peer);
    const std::vector<unsigned char> data = pattern(n, 99);
    ASSERT_EQ(MPI_Win_fence(MPI_MODE_NOSUCCEED, window), MPI_SUCCESS);  // no fence epoch open
    *static_cast<int*>(exposed) = 0;
    if (me == last) {
      MPI_Request request = MPI_REQUEST_NULL;
      std::fill(buf.begin(), buf.end(), 0);
      ASSERT_EQ(MPI_Irecv(buf.data(), static_cast<int>(n), MPI_BYTE, 0, 8, MPI_COMM_WORLD, &request),
                MPI_SUCCESS);
      ASSERT_EQ(MPI_Win_post(peer, 0, window), MPI_SUCCESS);
      ASSERT_EQ(MPI_Win_wait(window), MPI_SUCCESS);
      ASSERT_EQ(MPI_Wait(&request, MPI_STATUS_IGNORE), MPI_SUCCESS);
      EXPECT_EQ(buf, data);
      EXPECT_EQ(*static_cast<int*>(exposed), 4242) << "rank 0's MPI_Put";
    } else if (me == 0) {
      ASSERT_EQ(MPI_Ssend(data.data(), static_cast<int>(n), MPI_BYTE, last, 8, MPI_COMM_WORLD), MPI_SUCCESS);
      const int put = 4242;
      ASSERT_EQ(MPI_Win_start(peer, 0, window), MPI_SUCCESS);
      ASSERT_EQ(MPI_Put(&put, 1, MPI_INT, last, 0, 1, MPI_INT, window), MPI_SUCCESS);
      ASSERT_EQ(MPI_Win_complete(window), MPI_SUCCESS);
    }
    MPI_Group_free(&peer);
    MPI_Group_free(&world_group);
  }
  EXPECT_EQ(sum, (last + 1) * (last + 2) / 2);
  EXPECT_EQ(everyone, std::vector<int>(counts.size(), 1)) << "every rank's value, 1 after the broadcast";
  EXPECT_EQ(two, std::vector<int>(2, 1)) << "both neighbours' values";
  MPI_Win_free(&window);
  MPI_Comm_free(&ring);
}

// The one-sided synchronization calls with no nonblocking form, under MPI_THREAD_MULTIPLE (ctest's
// mpi.np2.multiple): the origin waits in MPI_Win_start/MPI_Win_complete for the target's
// MPI_Win_post, which comes after the target's MPI_Ssend to a receive the origin posted before; a
// helper thread drives that receive meanwhile. Then a passive-target epoch (lock, put, unlock) with
// a receive pending the same way. Without the helper the origin hangs.
TEST_F(Collectives, OneSidedEpochsWhileAReceiveWaitsForItsSender) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided != MPI_THREAD_MULTIPLE)
    GTEST_SKIP() << "needs MPI_THREAD_MULTIPLE (HDSM_MPI_TEST_THREADS=multiple, ctest's mpi.np2.multiple)";
  const int me = rank(), last = world_size() - 1;
  if (last == 0) GTEST_SKIP() << "needs two ranks";
  const std::size_t n = 1 << 20;  // past the eager limit, as a 1-byte MPI_Ssend is
  void* exposed = nullptr;
  MPI_Win window = MPI_WIN_NULL;
  ASSERT_EQ(MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &exposed, &window),
            MPI_SUCCESS);
  *static_cast<int*>(exposed) = 0;
  MPI_Group world_group = MPI_GROUP_NULL, peer = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  const int other = me == last ? 0 : last;
  MPI_Group_incl(world_group, 1, &other, &peer);
  ASSERT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
  for (int epoch = 0; epoch < 2; ++epoch) {
    SCOPED_TRACE(epoch == 0 ? "post, start, complete, wait" : "lock, unlock");
    const std::vector<unsigned char> data = pattern(n, 60 + epoch);
    if (me == last) {
      std::vector<unsigned char> buf(n, 0);
      MPI_Request request = MPI_REQUEST_NULL;
      ASSERT_EQ(MPI_Irecv(buf.data(), static_cast<int>(n), MPI_BYTE, 0, 9, MPI_COMM_WORLD, &request),
                MPI_SUCCESS);
      const int put = 100 + epoch;
      if (epoch == 0) {
        ASSERT_EQ(MPI_Win_start(peer, 0, window), MPI_SUCCESS);
        ASSERT_EQ(MPI_Put(&put, 1, MPI_INT, 0, 0, 1, MPI_INT, window), MPI_SUCCESS);
        ASSERT_EQ(MPI_Win_complete(window), MPI_SUCCESS);
      } else {
        ASSERT_EQ(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, window), MPI_SUCCESS);
        ASSERT_EQ(MPI_Put(&put, 1, MPI_INT, 0, 0, 1, MPI_INT, window), MPI_SUCCESS);
        ASSERT_EQ(MPI_Win_flush(0, window), MPI_SUCCESS);
        ASSERT_EQ(MPI_Win_unlock(0, window), MPI_SUCCESS);
      }
      ASSERT_EQ(MPI_Wait(&request, MPI_STATUS_IGNORE), MPI_SUCCESS);
      EXPECT_EQ(buf, data);
    } else if (me == 0) {
      ASSERT_EQ(MPI_Ssend(data.data(), static_cast<int>(n), MPI_BYTE, last, 9, MPI_COMM_WORLD), MPI_SUCCESS);
      if (epoch == 0) {
        ASSERT_EQ(MPI_Win_post(peer, 0, window), MPI_SUCCESS);
        ASSERT_EQ(MPI_Win_wait(window), MPI_SUCCESS);
      }
    }
    ASSERT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
    if (me == 0) {
      ASSERT_EQ(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, window), MPI_SUCCESS);  // the target's own view
      EXPECT_EQ(*static_cast<int*>(exposed), 100 + epoch) << "the last rank's MPI_Put";
      ASSERT_EQ(MPI_Win_unlock(0, window), MPI_SUCCESS);
    }
  }
  MPI_Group_free(&peer);
  MPI_Group_free(&world_group);
  MPI_Win_free(&window);
}

class CollectiveErrors : public MpiErrors {
 protected:
  CollectiveErrors() { pairs_only_ = false; }
};

TEST_F(CollectiveErrors, ACollectiveBufferLeavingItsObjectIsRefused) {
  unsigned char* p = buffer(Where::shared_on_device, 1000, 46);
  unsigned char* out = buffer(Where::shared_on_device, 1000, -1);
  EXPECT_EQ(error_class(MPI_Allreduce(p, out, 1001, MPI_BYTE, MPI_BOR, MPI_COMM_WORLD)), MPI_ERR_BUFFER);
  EXPECT_EQ(error_class(MPI_Bcast(p + 1, 1000, MPI_BYTE, 0, MPI_COMM_WORLD)), MPI_ERR_BUFFER);
  expect_pattern(p, 1000, 46, "the send buffer");
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
