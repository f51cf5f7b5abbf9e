// The fixture of the libhdsm_mpi tests under `mpirun -np N` (ctest runs them with 1, 2 and 3 ranks).
// Point-to-point tests run on pairs: ranks 2k and 2k + 1 of MPI_COMM_WORLD share a communicator of
// their own (pair_comm), each playing its part; a rank without a partner (the only one, or the last
// of an odd number) skips them. Collectives run on MPI_COMM_WORLD with every rank. Sim devices with
// poisoning, so a chunk that was never moved from the device shows up as wrong data, and a chunk
// size of 16 KiB, so small messages already take the chunked path.
#pragma once

#include <hdsm/hdsm.hpp>

#include "mpi/operations.hpp"
#include "runtime/runtime_impl.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace mpi_test {

inline constexpr std::size_t kChunk = 16 * 1024;
inline const std::size_t kSizes[] = {1000, 40, kChunk, 4 * kChunk, 5 * kChunk + 77};

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

/// Ranks 2k and 2k + 1 of MPI_COMM_WORLD (the last rank of an odd number alone). Made by the first
/// fixture, which every rank constructs at the same point of the run (MPI_Comm_split is collective).
inline MPI_Comm pair_comm() {
  static const MPI_Comm comm = [] {
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank() / 2, world_rank(), &c);
    return c;
  }();
  return comm;
}

inline unsigned char expected(std::size_t i, int salt) {
  return hdsm::test::pattern_byte(i, static_cast<std::uint64_t>(salt));
}

inline const hdsm::Kernel& fill_kernel() {
  static const hdsm::Kernel k =
      hdsm::per_thread("mpi_fill", [](const hdsm::Thread& t, unsigned char* p, std::uint64_t n, int salt) {
        if (const auto i = t.global_x(); i < n) p[i] = expected(i, salt);
      });
  return k;
}

/// Where a test's buffer is and where its data is valid.
enum class Where { host, shared_on_host, shared_on_device };
inline const char* name(Where w) {
  return w == Where::host             ? "host"
         : w == Where::shared_on_host ? "shared (host valid)"
                                      : "shared (device valid)";
}

class Mpi : public ::testing::Test {
 protected:
  Mpi()
      : rt_(hdsm::test::fast_sim_config("rolling", "4KiB")
                .set("HDSM_MPI_CHUNK", "16KiB")
                .set("HDSM_MPI_STAGING_BYTES", "64KiB")),
        comm_(pair_comm()) {}

  void SetUp() override {
    int size = 0;
    MPI_Comm_size(comm_, &size);
    if (pairs_only_ && size != 2)
      GTEST_SKIP() << "a point-to-point test needs a partner rank; world rank " << world_rank() << " of "
                   << world_size() << " has none";
  }

  /// This rank in the test's pair (0 or 1).
  int rank() const {
    int r = 0;
    MPI_Comm_rank(comm_, &r);
    return r;
  }

  /// A buffer of `n` bytes at `where` holding the pattern `salt` (or zeros with salt < 0).
  unsigned char* buffer(Where where, std::size_t n, int salt) {
    if (where == Where::host) {
      host_.emplace_back(n, 0);
      if (salt >= 0)
        for (std::size_t i = 0; i < n; ++i) host_.back()[i] = expected(i, salt);
      return host_.back().data();
    }
    auto* p = static_cast<unsigned char*>(rt_.alloc(n));
    shared_.push_back(p);
    if (salt >= 0 && where == Where::shared_on_device) {
      fill_on_device(p, n, salt);
    } else if (salt >= 0) {
      for (std::size_t i = 0; i < n; ++i) p[i] = expected(i, salt);
    }
    return p;
  }

  /// Writes the pattern `salt` into the shared object at `p` with a kernel: the host copy is then
  /// invalid, only the device has the data.
  void fill_on_device(unsigned char* p, std::size_t n, int salt) {
    rt_.call(fill_kernel(), hdsm::cover(n), hdsm::out(p), std::uint64_t{n}, salt);
    rt_.sync();
  }

  /// Checks `n` bytes at `p` against the pattern without faulting shared objects in.
  void expect_pattern(const unsigned char* p, std::size_t n, int salt, const std::string& what) {
    std::vector<unsigned char> got(n);
    rt_.memcpy(got.data(), p, n);
    std::size_t bad = 0, first = n;
    for (std::size_t i = 0; i < n; ++i) {
      if (got[i] == expected(i, salt)) continue;
      if (bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " bytes wrong, the first at " << first
                       << (first < n ? ": " + std::to_string(got[first]) + " for " +
                                           std::to_string(expected(first, salt))
                                     : std::string());
  }

  /// Rank 0's side of the probe tests: to rank 1, with tags tag..tag+3, a chunked message from a
  /// device-valid object, 40 host bytes (a header's size, not a header), 1000 host bytes and a
  /// chunked message from a host-valid object, each holding the pattern of its tag.
  void send_four_kinds(std::size_t n, int tag) {
    MPI_Request r[4];
    const unsigned char* chunked = buffer(Where::shared_on_device, n, tag);
    ASSERT_EQ(MPI_Isend(chunked, static_cast<int>(n), MPI_BYTE, 1, tag, comm_, &r[0]), MPI_SUCCESS);
    const unsigned char* forty = buffer(Where::host, 40, tag + 1);
    ASSERT_EQ(MPI_Isend(forty, 40, MPI_BYTE, 1, tag + 1, comm_, &r[1]), MPI_SUCCESS);
    const unsigned char* plain = buffer(Where::host, 1000, tag + 2);
    ASSERT_EQ(MPI_Isend(plain, 1000, MPI_BYTE, 1, tag + 2, comm_, &r[2]), MPI_SUCCESS);
    const unsigned char* again = buffer(Where::shared_on_host, n, tag + 3);
    ASSERT_EQ(MPI_Isend(again, static_cast<int>(n), MPI_BYTE, 1, tag + 3, comm_, &r[3]), MPI_SUCCESS);
    ASSERT_EQ(MPI_Waitall(4, r, MPI_STATUSES_IGNORE), MPI_SUCCESS);
  }

  ~Mpi() override {
    for (void* p : shared_) rt_.free(p);
  }

  hdsm::Runtime rt_;
  MPI_Comm comm_;
  bool pairs_only_ = true;  // false: the test runs on every rank (collectives, self-messages)
  std::vector<std::vector<unsigned char>> host_;
  std::vector<void*> shared_;
};

inline void expect_status(const MPI_Status& st, int source, int tag, std::size_t bytes) {
  int count = -1;
  MPI_Get_count(&st, MPI_BYTE, &count);
  EXPECT_EQ(st.MPI_SOURCE, source);
  EXPECT_EQ(st.MPI_TAG, tag);
  EXPECT_EQ(count, static_cast<int>(bytes));
}

inline int error_class(int code) {
  int c = -1;
  MPI_Error_class(code, &c);
  return c;
}

/// Errors are returned, not fatal, on both communicators the tests use.
class MpiErrors : public Mpi {
 protected:
  MpiErrors() {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  ~MpiErrors() override {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  }
};

}  // namespace mpi_test
