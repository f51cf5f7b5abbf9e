// libhdsm_mpi's send modes (synchronous, ready, buffered), persistent requests and cancelled
// receives (mpi_fixture.hpp): the data arrives whole, the sends take no page fault, and each
// completes when its MPI mode says.
#include "mpi_fixture.hpp"

#include <mpi.h>

#include <chrono>
#include <thread>

namespace {

using namespace mpi_test;

/// Tests `request` for about `ms` milliseconds; true once it completed.
bool completes_within(MPI_Request& request, int ms, MPI_Status* status = MPI_STATUS_IGNORE) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (int flag = 0;;) {
    EXPECT_EQ(MPI_Test(&request, &flag, status), MPI_SUCCESS);
    if (flag != 0) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST_F(Mpi, EverySendModeFromADeviceValidObjectArrivesWithoutFaults) {
  std::vector<unsigned char> attached(2 * (5 * kChunk + 77) + 4 * MPI_BSEND_OVERHEAD);
  ASSERT_EQ(MPI_Buffer_attach(attached.data(), static_cast<int>(attached.size())), MPI_SUCCESS);
  const char* modes[] = {"Ssend", "Rsend", "Bsend", "Issend", "Irsend", "Ibsend"};
  int salt = 110;
  for (std::size_t n : {std::size_t{1000}, 5 * kChunk + 77})
    for (int mode = 0; mode < 6; ++mode, ++salt) {
      SCOPED_TRACE(std::string(modes[mode]) + ", " + std::to_string(n) + " B");
      const int count = static_cast<int>(n);
      if (rank() == 0) {
        const unsigned char* p = buffer(Where::shared_on_device, n, salt);
        rt_.reset_stats();
        MPI_Barrier(comm_);  // a ready send needs the receive posted
        MPI_Request r = MPI_REQUEST_NULL;
        switch (mode) {
          case 0:
            ASSERT_EQ(MPI_Ssend(p, count, MPI_BYTE, 1, salt, comm_), MPI_SUCCESS);
            break;
          case 1:
            ASSERT_EQ(MPI_Rsend(p, count, MPI_BYTE, 1, salt, comm_), MPI_SUCCESS);
            break;
          case 2:
            ASSERT_EQ(MPI_Bsend(p, count, MPI_BYTE, 1, salt, comm_), MPI_SUCCESS);
            break;
          case 3:
            ASSERT_EQ(MPI_Issend(p, count, MPI_BYTE, 1, salt, comm_, &r), MPI_SUCCESS);
            break;
          case 4:
            ASSERT_EQ(MPI_Irsend(p, count, MPI_BYTE, 1, salt, comm_, &r), MPI_SUCCESS);
            break;
          default:
            ASSERT_EQ(MPI_Ibsend(p, count, MPI_BYTE, 1, salt, comm_, &r), MPI_SUCCESS);
            break;
        }
        ASSERT_EQ(MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
        EXPECT_EQ(rt_.stats().read_faults + rt_.stats().write_faults, 0u) << "the send faulted";
      } else {
        unsigned char* p = buffer(Where::shared_on_host, n, -1);
        MPI_Request r;
        ASSERT_EQ(MPI_Irecv(p, count, MPI_BYTE, 0, salt, comm_, &r), MPI_SUCCESS);
        MPI_Barrier(comm_);
        MPI_Status st;
        ASSERT_EQ(MPI_Wait(&r, &st), MPI_SUCCESS);
        expect_status(st, 0, salt, n);
        expect_pattern(p, n, salt, modes[mode]);
      }
    }
  void* detached = nullptr;
  int size = 0;
  MPI_Buffer_detach(&detached, &size);
}

// A synchronous send completes only once the receiver matched it; a buffered one at once, before
// any receive, even when it is larger than a chunk (it goes out whole through the attached buffer).
TEST_F(Mpi, SynchronousSendsWaitForTheReceiveAndBufferedOnesDoNot) {
  const std::size_t n = 5 * kChunk + 77;
  std::vector<unsigned char> attached(n + 2 * MPI_BSEND_OVERHEAD);
  ASSERT_EQ(MPI_Buffer_attach(attached.data(), static_cast<int>(attached.size())), MPI_SUCCESS);
  for (std::size_t bytes : {std::size_t{1000}, n}) {
    SCOPED_TRACE(std::to_string(bytes) + " B");
    const int count = static_cast<int>(bytes);
    if (rank() == 0) {
      const unsigned char* s = buffer(Where::shared_on_device, bytes, 120);
      const unsigned char* b = buffer(Where::shared_on_device, bytes, 121);
      MPI_Request sync, buffered;
      ASSERT_EQ(MPI_Issend(s, count, MPI_BYTE, 1, 120, comm_, &sync), MPI_SUCCESS);
      ASSERT_EQ(MPI_Ibsend(b, count, MPI_BYTE, 1, 121, comm_, &buffered), MPI_SUCCESS);
      EXPECT_TRUE(completes_within(buffered, 2000)) << "a buffered send waited for its receive";
      EXPECT_FALSE(completes_within(sync, 50)) << "a synchronous send completed before its receive";
      MPI_Barrier(comm_);
      ASSERT_EQ(MPI_Wait(&sync, MPI_STATUS_IGNORE), MPI_SUCCESS);
    } else {
      MPI_Barrier(comm_);  // nothing is received before rank 0 has looked
      unsigned char* p = buffer(Where::shared_on_host, bytes, -1);
      ASSERT_EQ(MPI_Recv(p, count, MPI_BYTE, 0, 120, comm_, MPI_STATUS_IGNORE), MPI_SUCCESS);
      expect_pattern(p, bytes, 120, "synchronous");
      ASSERT_EQ(MPI_Recv(p, count, MPI_BYTE, 0, 121, comm_, MPI_STATUS_IGNORE), MPI_SUCCESS);
      expect_pattern(p, bytes, 121, "buffered");
    }
  }
  void* detached = nullptr;
  int size = 0;
  MPI_Buffer_detach(&detached, &size);
}

// Both ranks exchange a chunked message with persistent requests, started again every round with
// new data on the device, completed by a different call each round; the handles survive every
// completion and become null only when freed.
TEST_F(Mpi, PersistentRequestsCarryEveryStartWhole) {
  const std::size_t n = 5 * kChunk + 77;
  const int peer = 1 - rank();
  for (Where to : {Where::host, Where::shared_on_host}) {
    SCOPED_TRACE(name(to));
    unsigned char* in = buffer(to, n, -1);
    unsigned char* out = buffer(Where::shared_on_device, n, -1);
    MPI_Request r[2];
    ASSERT_EQ(MPI_Recv_init(in, static_cast<int>(n), MPI_BYTE, peer, 20, comm_, &r[0]), MPI_SUCCESS);
    ASSERT_EQ(MPI_Send_init(out, static_cast<int>(n), MPI_BYTE, peer, 20, comm_, &r[1]), MPI_SUCCESS);
    const MPI_Request handles[2] = {r[0], r[1]};
    for (int round = 0; round < 4; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      const int salt = 130 + 2 * round;
      fill_on_device(out, n, salt + rank());
      rt_.reset_stats();
      ASSERT_EQ(MPI_Startall(2, r), MPI_SUCCESS);
      MPI_Status st[2];
      if (round == 0) {
        ASSERT_EQ(MPI_Waitall(2, r, st), MPI_SUCCESS);
      } else if (round == 1) {
        for (int k = 0; k < 2; ++k) {
          int index = -1;
          MPI_Status s;
          ASSERT_EQ(MPI_Waitany(2, r, &index, &s), MPI_SUCCESS);
          ASSERT_TRUE(index == 0 || index == 1);
          st[index] = s;
        }
        int index = 0;
        ASSERT_EQ(MPI_Waitany(2, r, &index, MPI_STATUS_IGNORE), MPI_SUCCESS);
        EXPECT_EQ(index, MPI_UNDEFINED) << "both requests are inactive now";
      } else if (round == 2) {
        for (int flag = 0; flag == 0;) ASSERT_EQ(MPI_Testall(2, r, &flag, st), MPI_SUCCESS);
      } else {
        ASSERT_EQ(MPI_Wait(&r[1], MPI_STATUS_IGNORE), MPI_SUCCESS);
        for (int flag = 0; flag == 0;) ASSERT_EQ(MPI_Request_get_status(r[0], &flag, &st[0]), MPI_SUCCESS);
        ASSERT_EQ(MPI_Wait(&r[0], &st[0]), MPI_SUCCESS);
      }
      EXPECT_EQ(r[0], handles[0]);
      EXPECT_EQ(r[1], handles[1]);
      expect_status(st[0], peer, 20, n);
      expect_pattern(in, n, salt + peer, "received");
      EXPECT_EQ(rt_.stats().read_faults + rt_.stats().write_faults, 0u) << "a transfer faulted";
    }
    ASSERT_EQ(MPI_Request_free(&r[0]), MPI_SUCCESS);
    ASSERT_EQ(MPI_Request_free(&r[1]), MPI_SUCCESS);
    EXPECT_EQ(r[0], MPI_REQUEST_NULL);
    EXPECT_EQ(r[1], MPI_REQUEST_NULL);
  }
}

TEST_F(Mpi, AnInactivePersistentRequestCompletesAtOnceWithAnEmptyStatus) {
  unsigned char* in = buffer(Where::shared_on_host, 100, -1);
  MPI_Request r;
  ASSERT_EQ(MPI_Recv_init(in, 100, MPI_BYTE, 1 - rank(), 21, comm_, &r), MPI_SUCCESS);
  const MPI_Request handle = r;
  MPI_Status st;
  st.MPI_SOURCE = st.MPI_TAG = 12345;
  ASSERT_EQ(MPI_Wait(&r, &st), MPI_SUCCESS);
  EXPECT_EQ(r, handle);
  expect_status(st, MPI_ANY_SOURCE, MPI_ANY_TAG, 0);
  int flag = 0;
  ASSERT_EQ(MPI_Test(&r, &flag, MPI_STATUS_IGNORE), MPI_SUCCESS);
  EXPECT_EQ(flag, 1);
  ASSERT_EQ(MPI_Request_free(&r), MPI_SUCCESS);
  EXPECT_EQ(r, MPI_REQUEST_NULL);
}

// A persistent request freed while its transfer runs: the transfer still ends, whole.
TEST_F(Mpi, AFreedActivePersistentSendStillDelivers) {
  const std::size_t n = 3 * kChunk + 5;
  if (rank() == 0) {
    unsigned char* out = buffer(Where::shared_on_device, n, 140);
    MPI_Request r;
    ASSERT_EQ(MPI_Send_init(out, static_cast<int>(n), MPI_BYTE, 1, 22, comm_, &r), MPI_SUCCESS);
    ASSERT_EQ(MPI_Start(&r), MPI_SUCCESS);
    ASSERT_EQ(MPI_Request_free(&r), MPI_SUCCESS);
    EXPECT_EQ(r, MPI_REQUEST_NULL);
    MPI_Barrier(comm_);  // blocks without driving: the receive drives the pair
    ASSERT_EQ(MPI_Recv(nullptr, 0, MPI_BYTE, 1, 23, comm_, MPI_STATUS_IGNORE), MPI_SUCCESS);
  } else {
    MPI_Barrier(comm_);
    unsigned char* in = buffer(Where::shared_on_host, n, -1);
    ASSERT_EQ(MPI_Recv(in, static_cast<int>(n), MPI_BYTE, 0, 22, comm_, MPI_STATUS_IGNORE), MPI_SUCCESS);
    expect_pattern(in, n, 140, "received");
    ASSERT_EQ(MPI_Send(nullptr, 0, MPI_BYTE, 0, 23, comm_), MPI_SUCCESS);
  }
}

// A receive nothing matches ends when cancelled, its status cancelled, for a host and a shared
// buffer and for a persistent receive, which can then start again and take a message.
TEST_F(Mpi, CancelledReceivesEndWithoutAMessage) {
  const int peer = 1 - rank();
  for (Where into : {Where::host, Where::shared_on_host}) {
    SCOPED_TRACE(name(into));
    unsigned char* p = buffer(into, 1000, -1);
    MPI_Request r;
    ASSERT_EQ(MPI_Irecv(p, 1000, MPI_BYTE, peer, 99, comm_, &r), MPI_SUCCESS);
    ASSERT_EQ(MPI_Cancel(&r), MPI_SUCCESS);
    MPI_Status st;
    ASSERT_TRUE(completes_within(r, 2000, &st)) << "a cancelled receive did not end";
    int cancelled = 0;
    MPI_Test_cancelled(&st, &cancelled);
    EXPECT_EQ(cancelled, 1);
  }
  unsigned char* p = buffer(Where::shared_on_host, kChunk * 3, -1);
  MPI_Request r;
  ASSERT_EQ(MPI_Recv_init(p, static_cast<int>(kChunk * 3), MPI_BYTE, peer, 26, comm_, &r), MPI_SUCCESS);
  ASSERT_EQ(MPI_Start(&r), MPI_SUCCESS);
  ASSERT_EQ(MPI_Cancel(&r), MPI_SUCCESS);
  MPI_Status st;
  ASSERT_TRUE(completes_within(r, 2000, &st)) << "a cancelled persistent receive did not end";
  int cancelled = 0;
  MPI_Test_cancelled(&st, &cancelled);
  EXPECT_EQ(cancelled, 1);
  MPI_Barrier(comm_);  // both cancelled before any message of tag 26 is sent
  ASSERT_EQ(MPI_Start(&r), MPI_SUCCESS);
  const unsigned char* out = buffer(Where::shared_on_device, kChunk * 3, 160 + rank());
  ASSERT_EQ(MPI_Send(out, static_cast<int>(kChunk * 3), MPI_BYTE, peer, 26, comm_), MPI_SUCCESS);
  ASSERT_EQ(MPI_Wait(&r, &st), MPI_SUCCESS);
  MPI_Test_cancelled(&st, &cancelled);
  EXPECT_EQ(cancelled, 0);
  expect_status(st, peer, 26, kChunk * 3);
  expect_pattern(p, kChunk * 3, 160 + peer, "after the cancelled start");
  ASSERT_EQ(MPI_Request_free(&r), MPI_SUCCESS);
}

TEST_F(MpiErrors, StartingAnActivePersistentRequestIsRefused) {
  unsigned char* in = buffer(Where::host, 100, -1);
  MPI_Request r;
  ASSERT_EQ(MPI_Recv_init(in, 100, MPI_BYTE, 1 - rank(), 24, comm_, &r), MPI_SUCCESS);
  ASSERT_EQ(MPI_Start(&r), MPI_SUCCESS);
  EXPECT_EQ(error_class(MPI_Start(&r)), MPI_ERR_REQUEST);
  const unsigned char* out = buffer(Where::host, 100, 150 + rank());
  ASSERT_EQ(MPI_Send(out, 100, MPI_BYTE, 1 - rank(), 24, comm_), MPI_SUCCESS);
  ASSERT_EQ(MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
  expect_pattern(in, 100, 150 + 1 - rank(), "received");
  ASSERT_EQ(MPI_Request_free(&r), MPI_SUCCESS);
}

TEST_F(MpiErrors, APersistentRequestOnAFreedObjectFailsAtStart) {
  auto* p = static_cast<unsigned char*>(rt_.alloc(1000));
  MPI_Request r;
  ASSERT_EQ(MPI_Send_init(p, 1000, MPI_BYTE, 1 - rank(), 25, comm_, &r), MPI_SUCCESS);
  rt_.free(p);
  EXPECT_EQ(error_class(MPI_Start(&r)), MPI_ERR_BUFFER);
  ASSERT_EQ(MPI_Request_free(&r), MPI_SUCCESS);
}

}  // namespace
