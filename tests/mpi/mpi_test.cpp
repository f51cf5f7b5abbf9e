// libhdsm_mpi's point-to-point calls (mpi_fixture.hpp): every placement and size, probes, matched
// probes, nonblocking calls and errors.
#include "mpi_fixture.hpp"

#include <mpi.h>

#include <cstdlib>
#include <string>

namespace {

using namespace mpi_test;

TEST_F(Mpi, BlockingSendRecvEveryPlacementAndSize) {
  const Where all[] = {Where::host, Where::shared_on_host, Where::shared_on_device};
  int salt = 1;
  for (Where from : all)
    for (Where to : {Where::host, Where::shared_on_host})
      for (std::size_t n : kSizes)
        for (int sender = 0; sender < 2; ++sender, ++salt) {
          const std::string what = std::string(name(from)) + " -> " + name(to) + ", " + std::to_string(n) +
                                   " B from rank " + std::to_string(sender);
          SCOPED_TRACE(what);
          unsigned char* received = nullptr;
          if (rank() == sender) {
            const unsigned char* p = buffer(from, n, salt);
            rt_.reset_stats();
            ASSERT_EQ(MPI_Send(p, static_cast<int>(n), MPI_BYTE, 1 - sender, salt, comm_), MPI_SUCCESS);
          } else {
            unsigned char* p = buffer(to, n, -1);
            MPI_Status st;
            rt_.reset_stats();
            ASSERT_EQ(MPI_Recv(p, static_cast<int>(n), MPI_BYTE, sender, salt, comm_, &st), MPI_SUCCESS);
            expect_status(st, sender, salt, n);
            received = p;
          }
          EXPECT_EQ(rt_.stats().read_faults + rt_.stats().write_faults, 0u) << "an MPI transfer faulted";
          if (received != nullptr) expect_pattern(received, n, salt, what);
        }
}

// Every rank, also one without a partner (mpirun -np 1): messages to itself on MPI_COMM_SELF, both
// halves nonblocking and driven by one MPI_Waitall, for every placement and size.
class SelfMessages : public Mpi {
 protected:
  SelfMessages() { pairs_only_ = false; }
};

TEST_F(SelfMessages, EveryPlacementAndSizeArrivesWithoutFaults) {
  const Where all[] = {Where::host, Where::shared_on_host, Where::shared_on_device};
  int salt = 200;
  for (Where from : all)
    for (Where to : all)
      for (std::size_t n : kSizes) {
        ++salt;
        const std::string what =
            std::string(name(from)) + " -> " + name(to) + ", " + std::to_string(n) + " B";
        SCOPED_TRACE(what);
        const unsigned char* out = buffer(from, n, salt);
        unsigned char* in = buffer(to, n, -1);
        if (to == Where::shared_on_device) fill_on_device(in, n, 0);  // the host copy invalid
        rt_.reset_stats();
        MPI_Request r[2];
        ASSERT_EQ(MPI_Irecv(in, static_cast<int>(n), MPI_BYTE, 0, salt, MPI_COMM_SELF, &r[0]), MPI_SUCCESS);
        ASSERT_EQ(MPI_Isend(out, static_cast<int>(n), MPI_BYTE, 0, salt, MPI_COMM_SELF, &r[1]), MPI_SUCCESS);
        MPI_Status st[2];
        ASSERT_EQ(MPI_Waitall(2, r, st), MPI_SUCCESS);
        expect_status(st[0], 0, salt, n);
        EXPECT_EQ(rt_.stats().read_faults + rt_.stats().write_faults, 0u) << "an MPI transfer faulted";
        expect_pattern(in, n, salt, what);
      }
}

// A plain message (from host memory) above the chunk size arrives whole in pageable memory before
// it goes to the device; that memory is kept (HDSM_MPI_RECV_CACHE) so the next such message does
// not page-fault a fresh buffer in.
TEST_F(Mpi, PlainMessagesIntoSharedObjectsReuseOneKeptBuffer) {
  const std::size_t n = 5 * kChunk + 77;
  hdsm::BufferCache& kept = hdsm::mpi::receive_buffers(rt_);
  for (int salt = 20; salt < 23; ++salt) {
    SCOPED_TRACE("message " + std::to_string(salt - 19));
    if (rank() == 0) {
      const unsigned char* p = buffer(Where::host, n, salt);
      ASSERT_EQ(MPI_Send(p, static_cast<int>(n), MPI_BYTE, 1, salt, comm_), MPI_SUCCESS);
    } else {
      unsigned char* p = buffer(salt % 2 == 0 ? Where::shared_on_host : Where::shared_on_device, n, 0);
      MPI_Status st;
      ASSERT_EQ(MPI_Recv(p, static_cast<int>(n), MPI_BYTE, 0, salt, comm_, &st), MPI_SUCCESS);
      expect_status(st, 0, salt, n);
      expect_pattern(p, n, salt, "received");
      EXPECT_EQ(kept.kept_bytes(), n) << "the receive buffer was not kept, or a second one was made";
    }
  }
}

TEST_F(Mpi, ReceiveIntoALargerBufferReportsTheMessageSize) {
  const std::size_t n = 3 * kChunk + 5;
  if (rank() == 0) {
    const unsigned char* p = buffer(Where::shared_on_device, n, 9);
    ASSERT_EQ(MPI_Send(p, static_cast<int>(n), MPI_BYTE, 1, 3, comm_), MPI_SUCCESS);
  } else {
    unsigned char* p = buffer(Where::shared_on_host, 2 * n, -1);
    MPI_Status st;
    ASSERT_EQ(MPI_Recv(p, static_cast<int>(2 * n), MPI_BYTE, 0, 3, comm_, &st), MPI_SUCCESS);
    expect_status(st, 0, 3, n);
    expect_pattern(p, n, 9, "received part");
  }
}

TEST_F(Mpi, FloatsCountInElements) {
  const int count = static_cast<int>(2 * kChunk / sizeof(float)) + 3;
  auto* f = rt_.alloc<float>(static_cast<std::size_t>(count));
  shared_.push_back(f);
  if (rank() == 0) {
    for (int i = 0; i < count; ++i) f[i] = static_cast<float>(i) * 0.5f;
    ASSERT_EQ(MPI_Send(f, count, MPI_FLOAT, 1, 0, comm_), MPI_SUCCESS);
  } else {
    MPI_Status st;
    ASSERT_EQ(MPI_Recv(f, count, MPI_FLOAT, 0, 0, comm_, &st), MPI_SUCCESS);
    int got = 0;
    MPI_Get_count(&st, MPI_FLOAT, &got);
    EXPECT_EQ(got, count);
    for (int i = 0; i < count; ++i) ASSERT_EQ(f[i], static_cast<float>(i) * 0.5f) << i;
  }
}

// Seed 003 Listing 4: the boundary of `out` goes to the neighbour's halo in `in`, both on the
// device, with MPI_Sendrecv and no explicit copies.
TEST_F(Mpi, HaloExchangeWithSendrecvAsListing4) {
  const std::size_t halo = 3 * kChunk + 100;  // bytes of one boundary
  const std::size_t n = 4 * halo;             // [left halo | left boundary | right boundary | right halo]
  unsigned char* out = buffer(Where::shared_on_device, n, 20 + rank());
  unsigned char* in = buffer(Where::shared_on_device, n, 50);
  const int left = rank() == 0 ? MPI_PROC_NULL : 0;
  const int right = rank() == 1 ? MPI_PROC_NULL : 1;
  MPI_Status st;
  // Send right, receive left.
  ASSERT_EQ(MPI_Sendrecv(out + 2 * halo, static_cast<int>(halo), MPI_BYTE, right, 0, in,
                         static_cast<int>(halo), MPI_BYTE, left, 0, comm_, &st),
            MPI_SUCCESS);
  // Send left, receive right.
  ASSERT_EQ(MPI_Sendrecv(out + halo, static_cast<int>(halo), MPI_BYTE, left, 0, in + 3 * halo,
                         static_cast<int>(halo), MPI_BYTE, right, 0, comm_, &st),
            MPI_SUCCESS);
  std::vector<unsigned char> got(n);
  rt_.memcpy(got.data(), in, n);
  const int peer_salt = 20 + (1 - rank());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < halo; ++i) {
    if (rank() == 1) bad += got[i] != expected(2 * halo + i, peer_salt);         // left halo from rank 0
    if (rank() == 0) bad += got[3 * halo + i] != expected(halo + i, peer_salt);  // right halo from rank 1
    bad += got[halo + i] != expected(halo + i, 50);                              // untouched
  }
  EXPECT_EQ(bad, 0u);
}

TEST_F(Mpi, NonblockingBothDirectionsAtOnce) {
  const std::size_t sizes[] = {500, 5 * kChunk + 77, 2 * kChunk};
  const int peer = 1 - rank();
  std::vector<MPI_Request> requests;
  std::vector<unsigned char*> into;
  // Every message with the same tag: they must arrive in the order they were sent.
  for (std::size_t k = 0; k < 3; ++k) {
    into.push_back(buffer(k == 2 ? Where::host : Where::shared_on_host, sizes[k], -1));
    requests.emplace_back();
    ASSERT_EQ(MPI_Irecv(into[k], static_cast<int>(sizes[k]), MPI_BYTE, peer, 4, comm_, &requests.back()),
              MPI_SUCCESS);
  }
  for (std::size_t k = 0; k < 3; ++k) {
    const unsigned char* p =
        buffer(k == 1 ? Where::host : Where::shared_on_device, sizes[k], 60 + 10 * rank() + int(k));
    requests.emplace_back();
    ASSERT_EQ(MPI_Isend(p, static_cast<int>(sizes[k]), MPI_BYTE, peer, 4, comm_, &requests.back()),
              MPI_SUCCESS);
  }
  std::vector<MPI_Status> st(requests.size());
  ASSERT_EQ(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), st.data()), MPI_SUCCESS);
  for (std::size_t k = 0; k < 3; ++k) {
    expect_status(st[k], peer, 4, sizes[k]);
    expect_pattern(into[k], sizes[k], 60 + 10 * peer + int(k), "message " + std::to_string(k));
  }
}

TEST_F(Mpi, WaitTestAndWaitanyDriveTheTransfers) {
  const std::size_t n = 4 * kChunk + 1;
  const int peer = 1 - rank();
  unsigned char* in = buffer(Where::shared_on_host, n, -1);
  const unsigned char* out = buffer(Where::shared_on_device, n, 70 + rank());
  MPI_Request r[2];
  ASSERT_EQ(MPI_Irecv(in, static_cast<int>(n), MPI_BYTE, peer, 1, comm_, &r[0]), MPI_SUCCESS);
  ASSERT_EQ(MPI_Isend(out, static_cast<int>(n), MPI_BYTE, peer, 1, comm_, &r[1]), MPI_SUCCESS);
  int index = -1;
  MPI_Status st;
  ASSERT_EQ(MPI_Waitany(2, r, &index, &st), MPI_SUCCESS);
  ASSERT_TRUE(index == 0 || index == 1);
  int flag = 0;
  while (flag == 0)
    ASSERT_EQ(MPI_Test(&r[1 - index], &flag, index == 1 ? &st : MPI_STATUS_IGNORE), MPI_SUCCESS);
  expect_status(st, peer, 1, n);
  expect_pattern(in, n, 70 + peer, "received");
  // Wait on a null request returns at once.
  MPI_Request null = MPI_REQUEST_NULL;
  EXPECT_EQ(MPI_Wait(&null, MPI_STATUS_IGNORE), MPI_SUCCESS);
}

TEST_F(Mpi, AnySourceAnyTagSeeTheUsersMessage) {
  const std::size_t n = 2 * kChunk + 9;
  if (rank() == 0) {
    const unsigned char* p = buffer(Where::shared_on_device, n, 80);
    ASSERT_EQ(MPI_Send(p, static_cast<int>(n), MPI_BYTE, 1, 77, comm_), MPI_SUCCESS);
    const unsigned char* q = buffer(Where::host, 40, 81);  // as long as a header, but not one
    ASSERT_EQ(MPI_Send(q, 40, MPI_BYTE, 1, 78, comm_), MPI_SUCCESS);
  } else {
    unsigned char* p = buffer(Where::shared_on_host, n, -1);
    MPI_Status st;
    ASSERT_EQ(MPI_Recv(p, static_cast<int>(n), MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &st),
              MPI_SUCCESS);
    expect_status(st, 0, 77, n);
    expect_pattern(p, n, 80, "chunked");
    MPI_Request r;
    unsigned char* q = buffer(Where::shared_on_host, 64, -1);
    ASSERT_EQ(MPI_Irecv(q, 64, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &r), MPI_SUCCESS);
    ASSERT_EQ(MPI_Wait(&r, &st), MPI_SUCCESS);
    expect_status(st, 0, 78, 40);
    expect_pattern(q, 40, 81, "40-byte plain message");
  }
}

// A receive waiting for a message that has not come (a control channel, tag 99) does not hold back a
// later receive of another tag: rank 1 sends tag 99 only after rank 0 received tag 0 and replied.
// The engine held every later receive on the communicator behind an unmatched one, and this hung;
// receives whose patterns can take the same message (wildcards) still match in posting order.
TEST_F(Mpi, AnUnmatchedReceiveHoldsBackOnlyReceivesThatCouldTakeItsMessage) {
  int control = 0, data = 0, reply = 0;
  if (rank() == 0) {
    MPI_Request r;
    ASSERT_EQ(MPI_Irecv(&control, 1, MPI_INT, 1, 99, comm_, &r), MPI_SUCCESS);
    ASSERT_EQ(MPI_Recv(&data, 1, MPI_INT, 1, 0, comm_, MPI_STATUS_IGNORE), MPI_SUCCESS);
    reply = data + 1;
    ASSERT_EQ(MPI_Send(&reply, 1, MPI_INT, 1, 1, comm_), MPI_SUCCESS);
    ASSERT_EQ(MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
    EXPECT_EQ(control, 7);
    // Wildcards: the first posted receive takes the first message, whatever its tag.
    int first = 0, second = 0;
    MPI_Request any;
    MPI_Status st;
    ASSERT_EQ(MPI_Irecv(&first, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &any), MPI_SUCCESS);
    ASSERT_EQ(MPI_Recv(&second, 1, MPI_INT, 1, 5, comm_, &st), MPI_SUCCESS);
    ASSERT_EQ(MPI_Wait(&any, MPI_STATUS_IGNORE), MPI_SUCCESS);
    EXPECT_EQ(first, 50);
    EXPECT_EQ(second, 51);
  } else {
    data = 41;
    ASSERT_EQ(MPI_Send(&data, 1, MPI_INT, 0, 0, comm_), MPI_SUCCESS);
    ASSERT_EQ(MPI_Recv(&reply, 1, MPI_INT, 0, 1, comm_, MPI_STATUS_IGNORE), MPI_SUCCESS);
    EXPECT_EQ(reply, 42);
    const int seven = 7, fifty = 50, fifty_one = 51;
    ASSERT_EQ(MPI_Send(&seven, 1, MPI_INT, 0, 99, comm_), MPI_SUCCESS);
    ASSERT_EQ(MPI_Send(&fifty, 1, MPI_INT, 0, 5, comm_), MPI_SUCCESS);
    ASSERT_EQ(MPI_Send(&fifty_one, 1, MPI_INT, 0, 5, comm_), MPI_SUCCESS);
  }
}

// MPI_Probe and MPI_Iprobe see the user's message: a chunked one with its whole size, not its
// 40-byte header, and a plain 40-byte message as 40 bytes. A message probed (and so held by
// hdsm_mpi) stays probe-able and is received whole, in any order of tags.
TEST_F(Mpi, ProbeReportsTheUsersMessageNotTheHeader) {
  const std::size_t n = 3 * kChunk + 5;
  if (rank() == 0) {
    send_four_kinds(n, 90);
  } else {
    MPI_Status st;
    int flag = 1;
    ASSERT_EQ(MPI_Iprobe(0, 99, comm_, &flag, &st), MPI_SUCCESS);
    EXPECT_EQ(flag, 0) << "no message has tag 99";
    ASSERT_EQ(MPI_Probe(0, MPI_ANY_TAG, comm_, &st), MPI_SUCCESS);  // rank 0's first message
    expect_status(st, 0, 90, n);
    ASSERT_EQ(MPI_Probe(MPI_ANY_SOURCE, 90, comm_, &st), MPI_SUCCESS);  // held, still there
    expect_status(st, 0, 90, n);
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    for (flag = 0; flag == 0;) ASSERT_EQ(MPI_Iprobe(MPI_ANY_SOURCE, 91, comm_, &flag, &st), MPI_SUCCESS);
    expect_status(st, 0, 91, 40);
    ASSERT_EQ(MPI_Probe(0, 92, comm_, &st), MPI_SUCCESS);
    expect_status(st, 0, 92, 1000);

    // Received against the order of arrival; the chunked one with the size its probe gave.
    unsigned char* plain = buffer(Where::host, 1000, -1);
    ASSERT_EQ(MPI_Recv(plain, 1000, MPI_BYTE, 0, 92, comm_, &st), MPI_SUCCESS);
    expect_status(st, 0, 92, 1000);
    expect_pattern(plain, 1000, 92, "plain");
    unsigned char* forty = buffer(Where::shared_on_host, 40, -1);
    ASSERT_EQ(MPI_Recv(forty, 40, MPI_BYTE, 0, 91, comm_, &st), MPI_SUCCESS);
    expect_status(st, 0, 91, 40);
    expect_pattern(forty, 40, 91, "40-byte plain message");
    unsigned char* chunked = buffer(Where::shared_on_host, static_cast<std::size_t>(count), -1);
    ASSERT_EQ(MPI_Recv(chunked, count, MPI_BYTE, 0, MPI_ANY_TAG, comm_, &st), MPI_SUCCESS);
    expect_status(st, 0, 90, n);
    expect_pattern(chunked, n, 90, "chunked");

    ASSERT_EQ(MPI_Probe(0, 93, comm_, &st), MPI_SUCCESS);
    expect_status(st, 0, 93, n);
    unsigned char* again = buffer(Where::host, n, -1);
    MPI_Request r;
    ASSERT_EQ(MPI_Irecv(again, static_cast<int>(n), MPI_BYTE, 0, 93, comm_, &r), MPI_SUCCESS);
    ASSERT_EQ(MPI_Wait(&r, &st), MPI_SUCCESS);
    expect_status(st, 0, 93, n);
    expect_pattern(again, n, 93, "chunked into host memory");
  }
}

// MPI_Mprobe/MPI_Improbe take the user's message out of the queues, a chunked one whole, and
// MPI_Mrecv/MPI_Imrecv receive exactly that message, in any order.
TEST_F(Mpi, MatchedProbeAndReceiveTakeChunkedMessagesWhole) {
  const std::size_t n = 3 * kChunk + 5;
  if (rank() == 0) {
    send_four_kinds(n, 80);
  } else {
    MPI_Status st;
    MPI_Message m[4] = {MPI_MESSAGE_NULL, MPI_MESSAGE_NULL, MPI_MESSAGE_NULL, MPI_MESSAGE_NULL};
    ASSERT_EQ(MPI_Mprobe(0, 80, comm_, &m[0], &st), MPI_SUCCESS);
    expect_status(st, 0, 80, n);
    int flag = 0;
    while (flag == 0) ASSERT_EQ(MPI_Improbe(0, 81, comm_, &flag, &m[1], &st), MPI_SUCCESS);
    expect_status(st, 0, 81, 40);
    // Both are out of the queues: the next message from rank 0 is the plain one.
    ASSERT_EQ(MPI_Mprobe(0, MPI_ANY_TAG, comm_, &m[2], &st), MPI_SUCCESS);
    expect_status(st, 0, 82, 1000);
    // A message MPI_Probe held is taken by the matched probe that follows.
    ASSERT_EQ(MPI_Probe(0, 83, comm_, &st), MPI_SUCCESS);
    expect_status(st, 0, 83, n);
    ASSERT_EQ(MPI_Mprobe(0, 83, comm_, &m[3], &st), MPI_SUCCESS);
    expect_status(st, 0, 83, n);
    ASSERT_EQ(MPI_Iprobe(0, MPI_ANY_TAG, comm_, &flag, &st), MPI_SUCCESS);
    EXPECT_EQ(flag, 0) << "every message was taken by a matched probe";

    unsigned char* plain = buffer(Where::host, 1000, -1);
    ASSERT_EQ(MPI_Mrecv(plain, 1000, MPI_BYTE, &m[2], &st), MPI_SUCCESS);
    expect_status(st, 0, 82, 1000);
    expect_pattern(plain, 1000, 82, "plain");
    unsigned char* chunked = buffer(Where::shared_on_host, n, -1);
    MPI_Request r = MPI_REQUEST_NULL;
    ASSERT_EQ(MPI_Imrecv(chunked, static_cast<int>(n), MPI_BYTE, &m[0], &r), MPI_SUCCESS);
    ASSERT_EQ(MPI_Wait(&r, &st), MPI_SUCCESS);
    expect_status(st, 0, 80, n);
    expect_pattern(chunked, n, 80, "chunked into a shared object");
    unsigned char* forty = buffer(Where::shared_on_host, 40, -1);
    ASSERT_EQ(MPI_Mrecv(forty, 40, MPI_BYTE, &m[1], &st), MPI_SUCCESS);
    expect_status(st, 0, 81, 40);
    expect_pattern(forty, 40, 81, "40-byte plain message");
    unsigned char* again = buffer(Where::host, n, -1);
    ASSERT_EQ(MPI_Mrecv(again, static_cast<int>(n), MPI_BYTE, &m[3], &st), MPI_SUCCESS);
    expect_status(st, 0, 83, n);
    expect_pattern(again, n, 83, "chunked into host memory");
    for (const MPI_Message& message : m) EXPECT_EQ(message, MPI_MESSAGE_NULL);
  }
}

// MPI_Sendrecv_replace sends the buffer's old contents and leaves the received message in it, on
// shared objects (chunked both ways) and on host memory receiving a chunked message.
TEST_F(Mpi, SendrecvReplaceOnSharedAndHostBuffers) {
  const std::size_t n = 5 * kChunk + 77;
  const int me = rank(), peer = 1 - me;
  MPI_Status st;
  unsigned char* both = buffer(Where::shared_on_device, n, 60 + me);
  ASSERT_EQ(
      MPI_Sendrecv_replace(both, static_cast<int>(n), MPI_BYTE, peer, 60 + me, peer, 60 + peer, comm_, &st),
      MPI_SUCCESS);
  expect_status(st, peer, 60 + peer, n);
  expect_pattern(both, n, 60 + peer, "shared, device-valid");

  unsigned char* mixed = buffer(me == 0 ? Where::shared_on_host : Where::host, n, 70 + me);
  ASSERT_EQ(
      MPI_Sendrecv_replace(mixed, static_cast<int>(n), MPI_BYTE, peer, 70 + me, peer, 70 + peer, comm_, &st),
      MPI_SUCCESS);
  expect_status(st, peer, 70 + peer, n);
  expect_pattern(mixed, n, 70 + peer, me == 0 ? "shared, host-valid" : "host, from a chunked message");
}

TEST_F(MpiErrors, TruncationNeverWritesPastTheBufferAndTheNextMessageArrives) {
  const std::size_t n = 3 * kChunk + 11;
  for (Where from : {Where::shared_on_device, Where::host})
    for (Where to : {Where::shared_on_host, Where::host}) {
      SCOPED_TRACE(std::string(name(from)) + " -> " + name(to));
      if (rank() == 0) {
        const unsigned char* p = buffer(from, n, 90);
        MPI_Send(p, static_cast<int>(n), MPI_BYTE, 1, 5, comm_);  // the receiver's error, not ours
        ASSERT_EQ(MPI_Send(p, 100, MPI_BYTE, 1, 6, comm_), MPI_SUCCESS);
      } else {
        unsigned char* p = buffer(to, n, 91);  // only the first half is the receive buffer
        MPI_Status st;
        const int rc = MPI_Recv(p, static_cast<int>(n / 2), MPI_BYTE, 0, 5, comm_, &st);
        EXPECT_EQ(error_class(rc), MPI_ERR_TRUNCATE);
        std::vector<unsigned char> got(n);
        rt_.memcpy(got.data(), p, n);
        std::size_t changed = 0;
        for (std::size_t i = n / 2; i < n; ++i) changed += got[i] != expected(i, 91);
        EXPECT_EQ(changed, 0u) << "bytes past the receive buffer changed";
        unsigned char* q = buffer(to, 100, -1);
        ASSERT_EQ(MPI_Recv(q, 100, MPI_BYTE, 0, 6, comm_, &st), MPI_SUCCESS);
        expect_pattern(q, 100, 90, "the message after the truncated one");
      }
    }
}

TEST_F(MpiErrors, NonblockingTruncationFailsTheWait) {
  const std::size_t n = 2 * kChunk + 1;
  if (rank() == 0) {
    const unsigned char* p = buffer(Where::shared_on_device, n, 95);
    MPI_Request r;
    ASSERT_EQ(MPI_Isend(p, static_cast<int>(n), MPI_BYTE, 1, 8, comm_, &r), MPI_SUCCESS);
    EXPECT_EQ(MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
  } else {
    unsigned char* p = buffer(Where::shared_on_host, n, -1);
    MPI_Request r;
    ASSERT_EQ(MPI_Irecv(p, static_cast<int>(kChunk), MPI_BYTE, 0, 8, comm_, &r), MPI_SUCCESS);
    MPI_Status st;
    const int rc = MPI_Waitall(1, &r, &st);
    EXPECT_NE(rc, MPI_SUCCESS);
    EXPECT_EQ(error_class(rc == MPI_ERR_IN_STATUS ? st.MPI_ERROR : rc), MPI_ERR_TRUNCATE);
  }
  MPI_Barrier(comm_);
}

TEST_F(MpiErrors, NonContiguousDatatypeOnASharedBufferIsRefused) {
  MPI_Datatype every_other;
  MPI_Type_vector(64, 1, 2, MPI_INT, &every_other);
  MPI_Type_commit(&every_other);
  auto* p = static_cast<int*>(rt_.alloc(128 * sizeof(int)));
  shared_.push_back(p);
  MPI_Request r;
  EXPECT_EQ(error_class(MPI_Send(p, 1, every_other, 1 - rank(), 0, comm_)), MPI_ERR_TYPE);
  EXPECT_EQ(error_class(MPI_Irecv(p, 1, every_other, 1 - rank(), 0, comm_, &r)), MPI_ERR_TYPE);
  MPI_Type_free(&every_other);
}

TEST_F(MpiErrors, ABufferPastTheEndOfItsObjectIsRefused) {
  auto* p = static_cast<unsigned char*>(rt_.alloc(1000));
  shared_.push_back(p);
  EXPECT_EQ(error_class(MPI_Send(p, 2000, MPI_BYTE, 1 - rank(), 0, comm_)), MPI_ERR_BUFFER);
  EXPECT_EQ(error_class(MPI_Recv(p + 500, 501, MPI_BYTE, 1 - rank(), 0, comm_, MPI_STATUS_IGNORE)),
            MPI_ERR_BUFFER);
}

// Host-mapped objects (HDSM_PROTOCOL=host-mapped; what auto gives a device that shares host memory)
// are host memory to MPI: a kernel's result goes out as it is after the sync, and a received message
// is what the next kernel reads, with no copy and no fault of hdsm.
TEST(MpiHostMapped, ObjectsTravelAsHostMemory) {
  const MPI_Comm comm = mpi_test::pair_comm();
  int size = 0, rank = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  if (size != 2) GTEST_SKIP() << "a point-to-point test needs a partner rank";
  hdsm::Runtime rt(hdsm::test::fast_sim_config("host-mapped"));
  const std::size_t n = 5 * mpi_test::kChunk + 77;
  auto* p = static_cast<unsigned char*>(rt.alloc(n));
  const int salt = 77;
  if (rank == 0) {
    rt.call(mpi_test::fill_kernel(), hdsm::cover(n), hdsm::out(p), std::uint64_t{n}, salt);
    rt.sync();
    ASSERT_EQ(MPI_Send(p, static_cast<int>(n), MPI_BYTE, 1, salt, comm), MPI_SUCCESS);
  } else {
    MPI_Status st;
    ASSERT_EQ(MPI_Recv(p, static_cast<int>(n), MPI_BYTE, 0, salt, comm, &st), MPI_SUCCESS);
    mpi_test::expect_status(st, 0, salt, n);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += p[i] != mpi_test::expected(i, salt) ? 1 : 0;
    EXPECT_EQ(bad, 0u);
  }
  const hdsm::Stats s = rt.stats();
  for (int r = 0; r < hdsm::kRouteCount; ++r) EXPECT_EQ(s.routes[r].bytes, 0u) << "route " << r;
  EXPECT_EQ(s.read_faults + s.write_faults, 0u);
  rt.free(p);
}

}  // namespace

// HDSM_MPI_TEST_THREADS=multiple: MPI_THREAD_MULTIPLE, for the tests of what libhdsm_mpi does only
// at that level (ctest's mpi.np2.multiple); else MPI_Init, as most programs start.
int main(int argc, char** argv) {
  const char* threads = std::getenv("HDSM_MPI_TEST_THREADS");
  if (threads != nullptr && std::string(threads) == "multiple") {
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  } else {
    MPI_Init(&argc, &argv);
  }
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
