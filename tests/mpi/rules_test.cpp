// MPI's own rules, kept by libhdsm_mpi although every receive is its operation (mpi_fixture.hpp):
// what a status's error field holds, which error handler an error goes through, the checks of a
// receive's arguments, where a message of a header's size lands in a datatype, a communicator freed
// with a receive pending on it, and communicators made while a receive waits for its sender. An operation
// that throws fails its request.
#include "mpi_fixture.hpp"

#include "mpi/engine.hpp"

#include <mpi.h>

#include <array>
#include <chrono>
#include <cstdarg>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

namespace {

using namespace mpi_test;

// MPI sets a status's MPI_ERROR only where a call completes several requests and returns
// MPI_ERR_IN_STATUS; a receive, a probe, a wait and a sendrecv leave it as it was.
TEST_F(Mpi, ReceivesLeaveTheStatusErrorFieldAsItWas) {
  constexpr int kMark = 12345;
  const std::size_t sizes[] = {4, 40, 3 * kChunk};
  int tag = 0;
  for (const std::size_t n : sizes)
    for (const Where to : {Where::host, Where::shared_on_host}) {
      SCOPED_TRACE(std::to_string(n) + " B into " + name(to));
      ++tag;
      if (rank() == 0) {
        const unsigned char* p = buffer(Where::shared_on_host, n, tag);
        for (int k = 0; k < 3; ++k)
          ASSERT_EQ(MPI_Send(p, static_cast<int>(n), MPI_BYTE, 1, tag, comm_), MPI_SUCCESS);
        MPI_Status st;
        st.MPI_ERROR = kMark;
        ASSERT_EQ(MPI_Sendrecv(p, static_cast<int>(n), MPI_BYTE, 1, tag, buffer(to, n, -1),
                               static_cast<int>(n), MPI_BYTE, 1, tag, comm_, &st),
                  MPI_SUCCESS);
        EXPECT_EQ(st.MPI_ERROR, kMark) << "MPI_Sendrecv";
        continue;
      }
      unsigned char* p = buffer(to, n, -1);
      MPI_Status st;
      st.MPI_ERROR = kMark;
      ASSERT_EQ(MPI_Probe(0, tag, comm_, &st), MPI_SUCCESS);
      EXPECT_EQ(st.MPI_ERROR, kMark) << "MPI_Probe";
      ASSERT_EQ(MPI_Recv(p, static_cast<int>(n), MPI_BYTE, 0, tag, comm_, &st), MPI_SUCCESS);
      EXPECT_EQ(st.MPI_ERROR, kMark) << "MPI_Recv";
      expect_status(st, 0, tag, n);
      MPI_Request r;
      ASSERT_EQ(MPI_Irecv(p, static_cast<int>(n), MPI_BYTE, 0, tag, comm_, &r), MPI_SUCCESS);
      ASSERT_EQ(MPI_Wait(&r, &st), MPI_SUCCESS);
      EXPECT_EQ(st.MPI_ERROR, kMark) << "MPI_Wait";
      MPI_Message m;
      ASSERT_EQ(MPI_Mprobe(0, tag, comm_, &m, &st), MPI_SUCCESS);
      EXPECT_EQ(st.MPI_ERROR, kMark) << "MPI_Mprobe";
      ASSERT_EQ(MPI_Mrecv(p, static_cast<int>(n), MPI_BYTE, &m, &st), MPI_SUCCESS);
      EXPECT_EQ(st.MPI_ERROR, kMark) << "MPI_Mrecv";
      expect_pattern(p, n, tag, "the third message");
      ASSERT_EQ(MPI_Sendrecv(p, static_cast<int>(n), MPI_BYTE, 0, tag, buffer(to, n, -1), static_cast<int>(n),
                             MPI_BYTE, 0, tag, comm_, &st),
                MPI_SUCCESS);
      EXPECT_EQ(st.MPI_ERROR, kMark) << "MPI_Sendrecv";
    }
}

// A message of 40 B (a header's size, which hdsm_mpi receives to look at) lands in a receive
// buffer of any datatype as libmpi would place it: a datatype whose size does not divide 40 gets a
// partial last element, one with gaps keeps them.
TEST_F(Mpi, FortyBytesLandAsMpiPlacesThemInAnyDatatype) {
  std::array<int, 10> forty{};
  for (int i = 0; i < 10; ++i) forty[static_cast<std::size_t>(i)] = 100 + i;
  if (rank() == 0) {
    for (int tag = 0; tag < 2; ++tag)
      ASSERT_EQ(MPI_Send(forty.data(), 10, MPI_INT, 1, tag, comm_), MPI_SUCCESS);
    return;
  }
  // Three ints an element (12 B): 3 whole elements and a third of the fourth.
  MPI_Datatype three;
  MPI_Type_contiguous(3, MPI_INT, &three);
  MPI_Type_commit(&three);
  std::array<int, 12> got;
  got.fill(-1);
  MPI_Status st;
  ASSERT_EQ(MPI_Recv(got.data(), 4, three, 0, 0, comm_, &st), MPI_SUCCESS);
  for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(got[i], i < 10 ? forty[i] : -1) << "int " << i;
  int count = 0, elements = 0;
  MPI_Get_count(&st, three, &count);
  MPI_Get_elements(&st, three, &elements);
  EXPECT_EQ(count, MPI_UNDEFINED);
  EXPECT_EQ(elements, 10);
  MPI_Type_free(&three);

  // Three blocks of two ints, three ints apart (24 B an element, extent 8 ints): the ints go to
  // 0 1 3 4 6 7 | 8 9 11 12, the gaps and the rest of the second element stay.
  MPI_Datatype blocks;
  MPI_Type_vector(3, 2, 3, MPI_INT, &blocks);
  MPI_Type_commit(&blocks);
  std::array<int, 16> spread;
  spread.fill(-1);
  ASSERT_EQ(MPI_Recv(spread.data(), 2, blocks, 0, 1, comm_, &st), MPI_SUCCESS);
  const int where[] = {0, 1, 3, 4, 6, 7, 8, 9, 11, 12};
  std::array<int, 16> want;
  want.fill(-1);
  for (std::size_t i = 0; i < 10; ++i) want[static_cast<std::size_t>(where[i])] = forty[i];
  EXPECT_EQ(spread, want);
  MPI_Type_free(&blocks);
}

// A receive with a bad argument fails with MPI's error class before it matches anything: the
// message it could have taken stays for the next receive.
TEST_F(MpiErrors, AReceiveWithBadArgumentsFailsWithMpisClassAndLeavesTheMessage) {
  const int seven = 7;
  if (rank() == 0) {
    for (int tag = 0; tag < 2; ++tag) ASSERT_EQ(MPI_Send(&seven, 1, MPI_INT, 1, tag, comm_), MPI_SUCCESS);
    return;
  }
  ASSERT_EQ(MPI_Probe(0, 0, comm_, MPI_STATUS_IGNORE), MPI_SUCCESS);  // it is there to be taken
  int v = 0;
  MPI_Request r = MPI_REQUEST_NULL;
  EXPECT_EQ(error_class(MPI_Recv(&v, -1, MPI_INT, 0, 0, comm_, MPI_STATUS_IGNORE)), MPI_ERR_COUNT);
  EXPECT_EQ(error_class(MPI_Recv(&v, 1, MPI_DATATYPE_NULL, 0, 0, comm_, MPI_STATUS_IGNORE)), MPI_ERR_TYPE);
  EXPECT_EQ(error_class(MPI_Recv(nullptr, 1, MPI_INT, 0, 0, comm_, MPI_STATUS_IGNORE)), MPI_ERR_BUFFER);
  EXPECT_EQ(error_class(MPI_Recv(&v, 1, MPI_INT, 0, -5, comm_, MPI_STATUS_IGNORE)), MPI_ERR_TAG);
  EXPECT_EQ(error_class(MPI_Recv(&v, 1, MPI_INT, 2, 0, comm_, MPI_STATUS_IGNORE)), MPI_ERR_RANK);
  EXPECT_EQ(error_class(MPI_Recv(&v, 1, MPI_INT, 0, 0, MPI_COMM_NULL, MPI_STATUS_IGNORE)), MPI_ERR_COMM);
  EXPECT_EQ(error_class(MPI_Irecv(&v, -1, MPI_INT, 0, 0, comm_, &r)), MPI_ERR_COUNT);
  EXPECT_EQ(error_class(MPI_Recv_init(&v, 1, MPI_INT, -3, 0, comm_, &r)), MPI_ERR_RANK);
  EXPECT_EQ(r, MPI_REQUEST_NULL);
  ASSERT_EQ(MPI_Recv(&v, 1, MPI_INT, 0, 0, comm_, MPI_STATUS_IGNORE), MPI_SUCCESS);
  EXPECT_EQ(v, seven);
  // A matched message too stays the handle's after a bad MPI_Mrecv.
  MPI_Message m;
  ASSERT_EQ(MPI_Mprobe(0, 1, comm_, &m, MPI_STATUS_IGNORE), MPI_SUCCESS);
  EXPECT_EQ(error_class(MPI_Mrecv(&v, -2, MPI_INT, &m, MPI_STATUS_IGNORE)), MPI_ERR_COUNT);
  v = 0;
  ASSERT_EQ(MPI_Mrecv(&v, 1, MPI_INT, &m, MPI_STATUS_IGNORE), MPI_SUCCESS);
  EXPECT_EQ(v, seven);
}

// Error handlers that count their calls, on the pair's communicator and on MPI_COMM_WORLD.
int on_pair = 0;
int on_world = 0;
void count_on_pair(MPI_Comm*, int*, ...) { ++on_pair; }
void count_on_world(MPI_Comm*, int*, ...) { ++on_world; }

class MpiHandlers : public Mpi {
 protected:
  MpiHandlers() {
    on_pair = on_world = 0;
    MPI_Comm_create_errhandler(count_on_pair, &pair_);
    MPI_Comm_create_errhandler(count_on_world, &world_);
    MPI_Comm_set_errhandler(comm_, pair_);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, world_);
  }
  ~MpiHandlers() override {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Errhandler_free(&pair_);
    MPI_Errhandler_free(&world_);
  }
  MPI_Errhandler pair_ = MPI_ERRHANDLER_NULL, world_ = MPI_ERRHANDLER_NULL;
};

// A nonblocking receive's error goes through its communicator's handler, once, whichever call
// completes it (libmpi raises a generalized request's errors on MPI_COMM_WORLD's); a call that
// completes several requests returns MPI_ERR_IN_STATUS with every status's error field set.
TEST_F(MpiHandlers, ANonblockingReceivesErrorGoesThroughItsCommunicatorsHandlerOnce) {
  const int four[4] = {1, 2, 3, 4};
  if (rank() == 0) {
    for (int k = 0; k < 5; ++k) {
      ASSERT_EQ(MPI_Send(four, 4, MPI_INT, 1, 0, comm_), MPI_SUCCESS);  // 16 B into 8: truncated
      ASSERT_EQ(MPI_Send(four, 1, MPI_INT, 1, 1, comm_), MPI_SUCCESS);  // fits
    }
    return;
  }
  int two[2], one = 0, calls = 0;
  MPI_Request r[2];
  MPI_Status st[2];
  const auto post = [&] {
    ASSERT_EQ(MPI_Irecv(two, 2, MPI_INT, 0, 0, comm_, &r[0]), MPI_SUCCESS);
    ASSERT_EQ(MPI_Irecv(&one, 1, MPI_INT, 0, 1, comm_, &r[1]), MPI_SUCCESS);
  };
  const auto after = [&](const char* call) {
    EXPECT_EQ(on_pair, ++calls) << call << ": the communicator's handler";
    EXPECT_EQ(on_world, 0) << call << ": MPI_COMM_WORLD's handler";
    EXPECT_EQ(one, 1);
    one = 0;
  };

  post();
  EXPECT_EQ(error_class(MPI_Wait(&r[0], &st[0])), MPI_ERR_TRUNCATE);
  ASSERT_EQ(MPI_Wait(&r[1], MPI_STATUS_IGNORE), MPI_SUCCESS);
  after("MPI_Wait");

  post();
  int rc = MPI_SUCCESS;
  for (int flag = 0; flag == 0;) rc = MPI_Test(&r[0], &flag, MPI_STATUS_IGNORE);
  EXPECT_EQ(error_class(rc), MPI_ERR_TRUNCATE);
  ASSERT_EQ(MPI_Wait(&r[1], MPI_STATUS_IGNORE), MPI_SUCCESS);
  after("MPI_Test");

  post();
  st[0].MPI_ERROR = st[1].MPI_ERROR = -1;
  EXPECT_EQ(error_class(MPI_Waitall(2, r, st)), MPI_ERR_IN_STATUS);
  EXPECT_EQ(error_class(st[0].MPI_ERROR), MPI_ERR_TRUNCATE);
  EXPECT_EQ(st[1].MPI_ERROR, MPI_SUCCESS);
  after("MPI_Waitall");

  post();
  ASSERT_EQ(MPI_Wait(&r[1], MPI_STATUS_IGNORE), MPI_SUCCESS);  // the second one first
  int index = -1;
  EXPECT_EQ(error_class(MPI_Waitany(2, r, &index, &st[0])), MPI_ERR_TRUNCATE);
  EXPECT_EQ(index, 0);
  after("MPI_Waitany");

  post();
  ASSERT_EQ(MPI_Wait(&r[1], MPI_STATUS_IGNORE), MPI_SUCCESS);
  int done = 0, indices[2] = {-1, -1};
  EXPECT_EQ(error_class(MPI_Waitsome(2, r, &done, indices, st)), MPI_ERR_IN_STATUS);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(indices[0], 0);
  EXPECT_EQ(error_class(st[0].MPI_ERROR), MPI_ERR_TRUNCATE);
  after("MPI_Waitsome");
}

// An operation whose progress throws (a bug in hdsm_mpi, an allocation that failed) fails its
// request with MPI_ERR_INTERN through its communicator's handler, nonblocking or blocking, instead
// of completing it as if the transfer had happened. Runs on every rank: it needs no partner.
class Throws final : public hdsm::mpi::Operation {
 public:
  explicit Throws(MPI_Comm comm) : Operation("MPI_Irecv", comm) {}
  bool progress() override { throw std::runtime_error("injected by the test"); }
};

class MpiHandlersOnEveryRank : public MpiHandlers {
 protected:
  MpiHandlersOnEveryRank() { pairs_only_ = false; }
};

TEST_F(MpiHandlersOnEveryRank, AnOperationThatThrowsFailsItsRequest) {
  MPI_Request r = MPI_REQUEST_NULL;
  ASSERT_EQ(hdsm::mpi::start(std::make_shared<Throws>(comm_), &r), MPI_SUCCESS);
  MPI_Status st;
  EXPECT_EQ(error_class(MPI_Wait(&r, &st)), MPI_ERR_INTERN);
  EXPECT_EQ(r, MPI_REQUEST_NULL);
  EXPECT_EQ(on_pair, 1);
  EXPECT_EQ(on_world, 0);
  EXPECT_EQ(error_class(hdsm::mpi::finish(std::make_shared<Throws>(comm_), MPI_STATUS_IGNORE)),
            MPI_ERR_INTERN);
  EXPECT_EQ(on_pair, 2);
  EXPECT_EQ(on_world, 0);
}

// An operation that posts a receive of its own into its staging chunk and then throws (an
// allocation failure half way): it fails its request, and lives on, with the chunk, until that
// receive completed. Before, it died with the user's request and libmpi wrote the message into
// freed memory.
struct Orphan {
  bool destroyed = false;
  bool destroyed_in_flight = false;
  bool message_arrived = false;
};

class ThrowsAfterPosting final : public hdsm::mpi::Operation {
 public:
  ThrowsAfterPosting(MPI_Comm comm, Orphan& orphan) : Operation("MPI_Irecv", comm), orphan_(orphan) {}
  ~ThrowsAfterPosting() override {
    orphan_.destroyed = true;
    orphan_.destroyed_in_flight = chunk_.request != MPI_REQUEST_NULL;
    orphan_.message_arrived = std::memcmp(chunk_.data(), "hdsm orphan", 12) == 0;
  }
  bool progress() override {
    if (posted_) throw std::runtime_error("injected after posting a receive");
    chunk_.acquire(nullptr, 64);
    std::memset(chunk_.data(), 0, 64);
    posted_ = PMPI_Irecv(chunk_.data(), 64, MPI_BYTE, 0, 31, comm_, &chunk_.request) == MPI_SUCCESS;
    return !posted_;
  }
  std::vector<MPI_Request*> requests() override { return {&chunk_.request}; }

 private:
  Orphan& orphan_;
  hdsm::mpi::ChunkBuffer chunk_;
  bool posted_ = false;
};

class Nothing final : public hdsm::mpi::Operation {
 public:
  explicit Nothing(MPI_Comm comm) : Operation("MPI_Irecv", comm) {}
  bool progress() override { return true; }
};

TEST_F(MpiHandlers, AnOperationThatThrowsWithAReceiveInFlightLivesUntilItCompletes) {
  char message[64] = "hdsm orphan";
  if (rank() == 0) {
    ASSERT_EQ(MPI_Barrier(comm_), MPI_SUCCESS);  // the receive failed on rank 1
    ASSERT_EQ(MPI_Send(message, 64, MPI_BYTE, 1, 31, comm_), MPI_SUCCESS);
    return;
  }
  Orphan orphan;
  MPI_Request r = MPI_REQUEST_NULL;
  ASSERT_EQ(hdsm::mpi::start(std::make_shared<ThrowsAfterPosting>(comm_, orphan), &r), MPI_SUCCESS);
  EXPECT_EQ(error_class(MPI_Wait(&r, MPI_STATUS_IGNORE)), MPI_ERR_INTERN);
  EXPECT_EQ(on_pair, 1);
  EXPECT_FALSE(orphan.destroyed) << "gone while its receive was still posted";
  ASSERT_EQ(MPI_Barrier(comm_), MPI_SUCCESS);
  // Calls that drive the pending operations test the orphan's receive until the message is in.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!orphan.destroyed && std::chrono::steady_clock::now() < deadline)
    hdsm::mpi::finish(std::make_shared<Nothing>(comm_), MPI_STATUS_IGNORE);
  EXPECT_TRUE(orphan.destroyed) << "kept after its receive completed";
  EXPECT_FALSE(orphan.destroyed_in_flight);
  EXPECT_TRUE(orphan.message_arrived) << "the message landed in the chunk while it lived";
}

// MPI_Comm_free with a receive pending on the communicator: the receive completes normally (MPI's
// rule), into host memory and into a shared object, and a persistent receive made on it still
// starts.
TEST_F(Mpi, ACommunicatorFreedWithReceivesPendingLivesUntilTheyComplete) {
  const std::size_t n = 3 * kChunk + 7;
  MPI_Comm dup = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_dup(comm_, &dup), MPI_SUCCESS);
  if (rank() == 0) {
    ASSERT_EQ(MPI_Barrier(comm_), MPI_SUCCESS);
    const unsigned char* p = buffer(Where::shared_on_device, n, 5);
    for (int tag = 0; tag < 3; ++tag)
      ASSERT_EQ(MPI_Send(p, static_cast<int>(n), MPI_BYTE, 1, tag, dup), MPI_SUCCESS);
    ASSERT_EQ(MPI_Comm_free(&dup), MPI_SUCCESS);
    return;
  }
  unsigned char* host = buffer(Where::host, n, -1);
  unsigned char* shared = buffer(Where::shared_on_host, n, -1);
  unsigned char* later = buffer(Where::host, n, -1);
  MPI_Request r[3];
  ASSERT_EQ(MPI_Irecv(host, static_cast<int>(n), MPI_BYTE, 0, 0, dup, &r[0]), MPI_SUCCESS);
  ASSERT_EQ(MPI_Irecv(shared, static_cast<int>(n), MPI_BYTE, 0, 1, dup, &r[1]), MPI_SUCCESS);
  ASSERT_EQ(MPI_Recv_init(later, static_cast<int>(n), MPI_BYTE, 0, 2, dup, &r[2]), MPI_SUCCESS);
  ASSERT_EQ(MPI_Comm_free(&dup), MPI_SUCCESS);
  EXPECT_EQ(dup, MPI_COMM_NULL);
  ASSERT_EQ(MPI_Barrier(comm_), MPI_SUCCESS);  // the sends start after the free
  ASSERT_EQ(MPI_Start(&r[2]), MPI_SUCCESS);
  ASSERT_EQ(MPI_Waitall(3, r, MPI_STATUSES_IGNORE), MPI_SUCCESS);
  ASSERT_EQ(MPI_Request_free(&r[2]), MPI_SUCCESS);
  expect_pattern(host, n, 5, "into host memory");
  expect_pattern(shared, n, 5, "into a shared object");
  expect_pattern(later, n, 5, "a persistent receive");
}

// A communicator is made (a collective) while a receive posted before it waits for a message whose
// sender cannot enter the collective until that receive matched it (a synchronous send): the rank
// that waits in the collective drives the receive.
TEST_F(Mpi, CommunicatorsAreMadeWhileAReceiveWaitsForItsSender) {
  const char* calls[] = {"MPI_Comm_dup",        "MPI_Comm_dup_with_info", "MPI_Comm_split",
                         "MPI_Comm_split_type", "MPI_Comm_create",        "MPI_Cart_create",
                         "MPI_Intercomm_create"};
  MPI_Comm alone = MPI_COMM_NULL;  // each rank of the pair alone: the two groups of an intercommunicator
  ASSERT_EQ(MPI_Comm_split(comm_, rank(), 0, &alone), MPI_SUCCESS);
  for (int which = 0; which < 7; ++which) {
    SCOPED_TRACE(calls[which]);
    int v = which, got = -1;
    MPI_Request r = MPI_REQUEST_NULL;
    if (rank() == 0) {
      ASSERT_EQ(MPI_Ssend(&v, 1, MPI_INT, 1, 0, comm_), MPI_SUCCESS);
    } else {
      ASSERT_EQ(MPI_Irecv(&got, 1, MPI_INT, 0, 0, comm_, &r), MPI_SUCCESS);
    }
    MPI_Comm made = MPI_COMM_NULL;
    MPI_Group group = MPI_GROUP_NULL;
    const int dims[1] = {2}, periods[1] = {0};
    switch (which) {
      case 0:
        ASSERT_EQ(MPI_Comm_dup(comm_, &made), MPI_SUCCESS);
        break;
      case 1:
        ASSERT_EQ(MPI_Comm_dup_with_info(comm_, MPI_INFO_NULL, &made), MPI_SUCCESS);
        break;
      case 2:
        ASSERT_EQ(MPI_Comm_split(comm_, 0, rank(), &made), MPI_SUCCESS);
        break;
      case 3:
        ASSERT_EQ(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &made), MPI_SUCCESS);
        break;
      case 4:
        MPI_Comm_group(comm_, &group);
        ASSERT_EQ(MPI_Comm_create(comm_, group, &made), MPI_SUCCESS);
        MPI_Group_free(&group);
        break;
      case 5:
        ASSERT_EQ(MPI_Cart_create(comm_, 1, dims, periods, 0, &made), MPI_SUCCESS);
        break;
      default:
        ASSERT_EQ(MPI_Intercomm_create(alone, 0, comm_, 1 - rank(), 77, &made), MPI_SUCCESS);
        break;
    }
    int size = 0;
    if (which == 6) {
      MPI_Comm_remote_size(made, &size);
      ++size;  // and this rank, the local group
    } else {
      MPI_Comm_size(made, &size);
    }
    EXPECT_EQ(size, 2);
    ASSERT_EQ(MPI_Comm_free(&made), MPI_SUCCESS);
    if (rank() == 1) {
      ASSERT_EQ(MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
      EXPECT_EQ(got, which);
    }
  }
  MPI_Comm_free(&alone);
}

// The collective file calls while a receive posted before them waits for a synchronous send of the
// other rank (which enters only once that receive matched): the rank waiting in the call drives the
// receive. Each call in turn on a file the pair opened (the open and the close as calls too).
TEST_F(Mpi, FilesAreUsedWhileAReceiveWaitsForItsSender) {
  long id = static_cast<long>(::getpid());
  MPI_Bcast(&id, 1, MPI_LONG, 0, comm_);
  const std::string path = "hdsm_mpi_collective_" + std::to_string(id) + ".bin";
  MPI_File f = MPI_FILE_NULL;
  char data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const MPI_Offset at = 8 * rank();
  MPI_Status* const none = MPI_STATUS_IGNORE;
  const auto then = [](int rc, const std::function<int()>& next) { return rc != MPI_SUCCESS ? rc : next(); };
  const std::pair<const char*, std::function<int()>> calls[] = {
      {"MPI_File_open",
       [&] {
         return MPI_File_open(comm_, path.c_str(), MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &f);
       }},
      {"MPI_File_set_view",
       [&] { return MPI_File_set_view(f, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL); }},
      {"MPI_File_set_size", [&] { return MPI_File_set_size(f, 64); }},
      {"MPI_File_preallocate", [&] { return MPI_File_preallocate(f, 128); }},
      {"MPI_File_set_info",
       [&] {
         MPI_Info info = MPI_INFO_NULL;
         MPI_Info_create(&info);
         const int rc = MPI_File_set_info(f, info);
         MPI_Info_free(&info);
         return rc;
       }},
      {"MPI_File_set_atomicity", [&] { return MPI_File_set_atomicity(f, 0); }},
      {"MPI_File_sync", [&] { return MPI_File_sync(f); }},
      {"MPI_File_seek_shared", [&] { return MPI_File_seek_shared(f, 0, MPI_SEEK_SET); }},
      {"MPI_File_write_all", [&] { return MPI_File_write_all(f, data, 8, MPI_BYTE, none); }},
      {"MPI_File_read_all", [&] { return MPI_File_read_all(f, data, 8, MPI_BYTE, none); }},
      {"MPI_File_write_at_all", [&] { return MPI_File_write_at_all(f, at, data, 8, MPI_BYTE, none); }},
      {"MPI_File_read_at_all", [&] { return MPI_File_read_at_all(f, at, data, 8, MPI_BYTE, none); }},
      {"MPI_File_write_ordered", [&] { return MPI_File_write_ordered(f, data, 8, MPI_BYTE, none); }},
      {"MPI_File_read_ordered", [&] { return MPI_File_read_ordered(f, data, 8, MPI_BYTE, none); }},
      {"MPI_File_write_all_begin/end",
       [&] {
         return then(MPI_File_write_all_begin(f, data, 8, MPI_BYTE),
                     [&] { return MPI_File_write_all_end(f, data, none); });
       }},
      {"MPI_File_read_all_begin/end",
       [&] {
         return then(MPI_File_read_all_begin(f, data, 8, MPI_BYTE),
                     [&] { return MPI_File_read_all_end(f, data, none); });
       }},
      {"MPI_File_write_at_all_begin/end",
       [&] {
         return then(MPI_File_write_at_all_begin(f, at, data, 8, MPI_BYTE),
                     [&] { return MPI_File_write_at_all_end(f, data, none); });
       }},
      {"MPI_File_read_at_all_begin/end",
       [&] {
         return then(MPI_File_read_at_all_begin(f, at, data, 8, MPI_BYTE),
                     [&] { return MPI_File_read_at_all_end(f, data, none); });
       }},
      {"MPI_File_write_ordered_begin/end",
       [&] {
         return then(MPI_File_write_ordered_begin(f, data, 8, MPI_BYTE),
                     [&] { return MPI_File_write_ordered_end(f, data, none); });
       }},
      {"MPI_File_read_ordered_begin/end",
       [&] {
         return then(MPI_File_read_ordered_begin(f, data, 8, MPI_BYTE),
                     [&] { return MPI_File_read_ordered_end(f, data, none); });
       }},
      {"MPI_File_close", [&] { return MPI_File_close(&f); }},
  };
  int which = 0;
  for (const auto& [call, run] : calls) {
    SCOPED_TRACE(call);
    int v = ++which, got = -1;
    MPI_Request r = MPI_REQUEST_NULL;
    if (rank() == 0) {
      ASSERT_EQ(MPI_Ssend(&v, 1, MPI_INT, 1, 0, comm_), MPI_SUCCESS);
    } else {
      ASSERT_EQ(MPI_Irecv(&got, 1, MPI_INT, 0, 0, comm_, &r), MPI_SUCCESS);
    }
    EXPECT_EQ(run(), MPI_SUCCESS);
    if (rank() == 1) {
      ASSERT_EQ(MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
      EXPECT_EQ(got, which);
    }
  }
  EXPECT_EQ(f, MPI_FILE_NULL);
  if (rank() == 0) MPI_File_delete(path.c_str(), MPI_INFO_NULL);
}

// MPI_Comm_create_group, collective over a group that is not a communicator's: a member waits in it
// while a receive posted before it waits for a synchronous send of another member (which enters only
// once that receive matched). The group is two ranks of a communicator whose ranks run the other way
// from MPI_COMM_WORLD's; with 3 ranks the one in the middle is no member and never calls. Two calls
// in a row with the same tag, and one with another tag.
class MpiOnEveryRank : public Mpi {
 protected:
  MpiOnEveryRank() { pairs_only_ = false; }
};

TEST_F(MpiOnEveryRank, AGroupIsMadeWhileAReceiveWaitsForItsSender) {
  const int n = world_size(), me = world_rank();
  if (n < 2) GTEST_SKIP() << "a group of two needs two ranks";
  MPI_Comm reversed = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, 0, n - me, &reversed), MPI_SUCCESS);
  MPI_Group all = MPI_GROUP_NULL, two = MPI_GROUP_NULL;
  MPI_Comm_group(reversed, &all);
  const int members[2] = {0, n - 1};  // world ranks n - 1 and 0, in that order
  MPI_Group_incl(all, 2, members, &two);
  MPI_Group_free(&all);
  const int sender = 0, receiver = n - 1;  // world ranks
  for (const int tag : {5, 5, 6}) {
    SCOPED_TRACE(tag);
    int v = tag, got = -1;
    MPI_Request r = MPI_REQUEST_NULL;
    if (me == sender) {
      ASSERT_EQ(MPI_Ssend(&v, 1, MPI_INT, receiver, tag, MPI_COMM_WORLD), MPI_SUCCESS);
    } else if (me == receiver) {
      ASSERT_EQ(MPI_Irecv(&got, 1, MPI_INT, sender, tag, MPI_COMM_WORLD, &r), MPI_SUCCESS);
    }
    if (me == sender || me == receiver) {
      MPI_Comm made = MPI_COMM_NULL;
      ASSERT_EQ(MPI_Comm_create_group(reversed, two, tag, &made), MPI_SUCCESS);
      ASSERT_NE(made, MPI_COMM_NULL);
      int size = 0, rank = -1;
      MPI_Comm_size(made, &size);
      MPI_Comm_rank(made, &rank);
      EXPECT_EQ(size, 2);
      EXPECT_EQ(rank, me == receiver ? 0 : 1);
      ASSERT_EQ(MPI_Comm_free(&made), MPI_SUCCESS);
    }
    if (me == receiver) {
      ASSERT_EQ(MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
      EXPECT_EQ(got, tag);
    }
  }
  MPI_Group_free(&two);
  MPI_Comm_free(&reversed);
}

}  // namespace
