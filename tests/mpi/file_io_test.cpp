// MPI-IO on shared objects: libmpi's file calls read into and write from shared objects through the
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

}  // namespace
