// MPI-IO on shared objects: libmpi's blocking file calls read into and write from shared objects through the
// I/O calls libhdsm interposes (pread, pwrite, preadv, pwritev), so the kernel never meets a
// protected host copy: before preadv and pwritev were interposed, a strided write lost its data with
// EFAULT inside libmpi, which still returned MPI_SUCCESS. Where libmpi hands the user's buffer to
// the kernel (independent calls), nothing faults; where it copies it itself (the two-phase
// collective calls' packing, the read's data sieving), its memcpy faults the pages in as any host
// access does, and the data is right all the same.
#include "mpi_fixture.hpp"

#include <mpi.h>

#include <unistd.h>
#include <string>
#include <vector>

namespace {

using namespace mpi_test;

class MpiFiles : public Mpi {
 protected:
  MpiFiles() { pairs_only_ = false; }

  /// A file name every rank agrees on, in the working directory (the build tree under ctest; never a
  /// world-writable directory), named after rank 0's process.
  static std::string file_name(const char* what) {
    long id = static_cast<long>(::getpid());
    MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    return std::string("hdsm_mpi_") + what + "_" + std::to_string(id) + ".bin";
  }
};

TEST_F(MpiFiles, SharedObjectsAreWrittenAndReadWithoutFaults) {
  const int ranks = world_size(), me = world_rank();
  const std::string path = file_name("file_io");
  int salt = 300;
  for (const Where from : {Where::shared_on_host, Where::shared_on_device})
    for (const std::size_t n : kSizes)
      for (const bool collective : {true, false}) {
        ++salt;
        const std::string what = std::string(name(from)) + ", " + std::to_string(n) + " B a rank, " +
                                 (collective ? "collective" : "independent");
        SCOPED_TRACE(what);
        MPI_File f = MPI_FILE_NULL;
        ASSERT_EQ(
            MPI_File_open(MPI_COMM_WORLD, path.c_str(), MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &f),
            MPI_SUCCESS);
        MPI_File_set_errhandler(f, MPI_ERRORS_RETURN);
        const unsigned char* mine = buffer(from, n, salt + me * 1000);
        const auto at = static_cast<MPI_Offset>(n) * me;
        const int count = static_cast<int>(n);
        rt_.reset_stats();
        MPI_Status st;
        ASSERT_EQ(collective ? MPI_File_write_at_all(f, at, mine, count, MPI_BYTE, &st)
                             : MPI_File_write_at(f, at, mine, count, MPI_BYTE, &st),
                  MPI_SUCCESS);
        int moved = -1;
        MPI_Get_count(&st, MPI_BYTE, &moved);
        EXPECT_EQ(moved, count);
        ASSERT_EQ(MPI_File_sync(f), MPI_SUCCESS);
        ASSERT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
        ASSERT_EQ(MPI_File_sync(f), MPI_SUCCESS);  // MPI's sync-barrier-sync: the others' blocks are seen
        const std::size_t whole = n * static_cast<std::size_t>(ranks);
        unsigned char* all = buffer(Where::shared_on_device, whole, -1);
        fill_on_device(all, whole, 0);  // the host copy invalid, and protected under lazy models
        ASSERT_EQ(collective ? MPI_File_read_at_all(f, 0, all, static_cast<int>(whole), MPI_BYTE, &st)
                             : MPI_File_read_at(f, 0, all, static_cast<int>(whole), MPI_BYTE, &st),
                  MPI_SUCCESS);
        MPI_Get_count(&st, MPI_BYTE, &moved);
        EXPECT_EQ(moved, static_cast<int>(whole));
        if (!collective) {
          EXPECT_EQ(rt_.stats().read_faults + rt_.stats().write_faults, 0u) << "MPI-IO faulted";
        }
        for (int r = 0; r < ranks; ++r)
          expect_pattern(all + n * static_cast<std::size_t>(r), n, salt + r * 1000,
                         what + ", block of rank " + std::to_string(r));
        ASSERT_EQ(MPI_File_close(&f), MPI_SUCCESS);
        if (me == 0) MPI_File_delete(path.c_str(), MPI_INFO_NULL);
        ASSERT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
      }
}

// A memory datatype with holes: libmpi gives the kernel one vector per block (pwritev; its preadv
// reads the whole range and copies the blocks out itself).
// Every rank writes the even 4-byte blocks of its shared object to its part of the file, then reads
// the file's part back into the odd blocks of another.
TEST_F(MpiFiles, StridedSharedBuffersMoveAsVectors) {
  const int me = world_rank();
  const std::string path = file_name("strided");
  const std::size_t blocks = 3 * kChunk / 8 + 5, n = blocks * 8;
  MPI_Datatype even = MPI_DATATYPE_NULL;
  MPI_Type_vector(static_cast<int>(blocks), 4, 8, MPI_BYTE, &even);
  MPI_Type_commit(&even);
  MPI_File f = MPI_FILE_NULL;
  ASSERT_EQ(MPI_File_open(MPI_COMM_WORLD, path.c_str(), MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &f),
            MPI_SUCCESS);
  MPI_File_set_errhandler(f, MPI_ERRORS_RETURN);
  const unsigned char* from = buffer(Where::shared_on_device, n, 40 + me);
  unsigned char* to = buffer(Where::shared_on_device, n + 4, -1);
  fill_on_device(to, n + 4, 0);
  const auto at = static_cast<MPI_Offset>(blocks * 4) * me;
  rt_.reset_stats();
  MPI_Status st;
  ASSERT_EQ(MPI_File_write_at(f, at, from, 1, even, &st), MPI_SUCCESS);
  EXPECT_EQ(rt_.stats().read_faults + rt_.stats().write_faults, 0u) << "the write faulted";
  ASSERT_EQ(MPI_File_sync(f), MPI_SUCCESS);
  ASSERT_EQ(MPI_File_read_at(f, at, to + 4, 1, even, &st), MPI_SUCCESS);
  std::vector<unsigned char> got(n + 4);
  rt_.memcpy(got.data(), to, n + 4);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool moved = i % 8 < 4;
    bad += got[i + 4] != (moved ? expected(i, 40 + me) : expected(i + 4, 0)) ? 1 : 0;
  }
  EXPECT_EQ(bad, 0u) << bad << " of " << n << " bytes wrong";
  ASSERT_EQ(MPI_File_close(&f), MPI_SUCCESS);
  MPI_Type_free(&even);
  ASSERT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
  if (me == 0) MPI_File_delete(path.c_str(), MPI_INFO_NULL);
}

// The nonblocking file calls: libmpi moves their bytes with POSIX AIO, which calls the kernel
// straight (no interposition), so a shared object's buffer ended the process under lazy models (a
// crash in libmpi's error handler after EFAULT). Now it is staged through host memory: independent
// and collective, explicit offsets and the individual file pointer; a datatype with holes refused.
TEST_F(MpiFiles, NonblockingCallsStageSharedObjects) {
  const int ranks = world_size(), me = world_rank();
  const std::string path = file_name("nonblocking");
  const std::size_t n = 3 * kChunk + 13;
  MPI_File f = MPI_FILE_NULL;
  ASSERT_EQ(MPI_File_open(MPI_COMM_WORLD, path.c_str(), MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &f),
            MPI_SUCCESS);
  MPI_File_set_errhandler(f, MPI_ERRORS_RETURN);
  const auto at = static_cast<MPI_Offset>(n) * me;
  const int count = static_cast<int>(n);
  const unsigned char* mine = buffer(Where::shared_on_device, n, 70 + me);
  MPI_Request r[2];
  MPI_Status st[2];
  int moved = -1;
  ASSERT_EQ(MPI_File_iwrite_at(f, at, mine, count, MPI_BYTE, &r[0]), MPI_SUCCESS);
  ASSERT_EQ(MPI_Wait(&r[0], &st[0]), MPI_SUCCESS);
  MPI_Get_count(&st[0], MPI_BYTE, &moved);
  EXPECT_EQ(moved, count);
  ASSERT_EQ(MPI_File_sync(f), MPI_SUCCESS);
  ASSERT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
  ASSERT_EQ(MPI_File_sync(f), MPI_SUCCESS);

  // Every rank's block back, the next rank's by an independent read, its own by a collective one.
  const int next = (me + 1) % ranks;
  unsigned char* theirs = buffer(Where::shared_on_device, n, -1);
  unsigned char* own = buffer(Where::shared_on_device, n, -1);
  fill_on_device(theirs, n, 0);
  fill_on_device(own, n, 0);
  ASSERT_EQ(MPI_File_iread_at(f, static_cast<MPI_Offset>(n) * next, theirs, count, MPI_BYTE, &r[0]),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_File_iread_at_all(f, at, own, count, MPI_BYTE, &r[1]), MPI_SUCCESS);
  ASSERT_EQ(MPI_Waitall(2, r, st), MPI_SUCCESS);
  expect_pattern(theirs, n, 70 + next, "MPI_File_iread_at of the next rank's block");
  expect_pattern(own, n, 70 + me, "MPI_File_iread_at_all of its own block");
  // Every rank has read the next one's block before any rewrites its own below (a nonblocking
  // collective write need not wait for the other ranks).
  ASSERT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);

  // Through the individual file pointer. (Not past the end of the file: Open MPI 4.1's nonblocking
  // read that ends short never completes, into host memory as well.)
  unsigned char* tail = buffer(Where::shared_on_device, n + 7, -1);
  fill_on_device(tail, n + 7, 1);
  ASSERT_EQ(MPI_File_seek(f, at, MPI_SEEK_SET), MPI_SUCCESS);
  ASSERT_EQ(MPI_File_iread(f, tail, count, MPI_BYTE, &r[0]), MPI_SUCCESS);
  ASSERT_EQ(MPI_Wait(&r[0], &st[0]), MPI_SUCCESS);
  MPI_Get_count(&st[0], MPI_BYTE, &moved);
  EXPECT_EQ(moved, count);
  std::vector<unsigned char> got(n + 7);
  rt_.memcpy(got.data(), tail, n + 7);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += got[i] != expected(i, 70 + me) ? 1 : 0;
  for (std::size_t i = n; i < n + 7; ++i) bad += got[i] != expected(i, 1) ? 1 : 0;
  EXPECT_EQ(bad, 0u) << "the block read, and the object's bytes after it as they were";

  // A collective write through the individual file pointers.
  unsigned char* again = buffer(Where::shared_on_device, n, 90 + me);
  ASSERT_EQ(MPI_File_seek(f, at, MPI_SEEK_SET), MPI_SUCCESS);
  ASSERT_EQ(MPI_File_iwrite_all(f, again, count, MPI_BYTE, &r[0]), MPI_SUCCESS);
  ASSERT_EQ(MPI_Wait(&r[0], MPI_STATUS_IGNORE), MPI_SUCCESS);
  ASSERT_EQ(MPI_File_sync(f), MPI_SUCCESS);
  ASSERT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
  ASSERT_EQ(MPI_File_sync(f), MPI_SUCCESS);
  fill_on_device(own, n, 0);
  ASSERT_EQ(MPI_File_read_at(f, at, own, count, MPI_BYTE, MPI_STATUS_IGNORE), MPI_SUCCESS);
  expect_pattern(own, n, 90 + me, "MPI_File_iwrite_all");

  // A datatype with holes on a shared object: refused, nothing started.
  MPI_Datatype holes = MPI_DATATYPE_NULL;
  MPI_Type_vector(4, 1, 2, MPI_BYTE, &holes);
  MPI_Type_commit(&holes);
  r[0] = MPI_REQUEST_NULL;
  int rc = MPI_File_iread_at(f, 0, own, 1, holes, &r[0]);
  int error_class = -1;
  MPI_Error_class(rc, &error_class);
  EXPECT_EQ(error_class, MPI_ERR_TYPE);
  EXPECT_EQ(r[0], MPI_REQUEST_NULL);
  MPI_Type_free(&holes);
  ASSERT_EQ(MPI_File_close(&f), MPI_SUCCESS);
  ASSERT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
  if (me == 0) MPI_File_delete(path.c_str(), MPI_INFO_NULL);
}

}  // namespace
