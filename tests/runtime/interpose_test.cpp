// Interposition (issue 4, part 3a): a program linked with libhdsm calls plain read, write, pread,
// pwrite, readv, writev, fread and fwrite on shared memory and gets hdsm's I/O (no fault, right data,
// libc's errno). Without interposition the kernel would refuse the protected user view (EFAULT) or
// stop part way, so these tests fail if the symbols are not interposed. Also the reentrancy guard
// and the memmove/memset entry points of libhdsm_preload.so.
#include <hdsm/hdsm.hpp>

#include "api/interpose.hpp"
#include "runtime/shared_ranges.hpp"
#include "support/death_style.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

// glibc declares them only where _FORTIFY_SOURCE is on.
extern "C" {
ssize_t __read_chk(int fd, void* buf, std::size_t n,
                   std::size_t buf_bytes);                           // NOLINT(bugprone-reserved-identifier)
ssize_t __pread_chk(int fd, void* buf, std::size_t n, off_t offset,  // NOLINT(bugprone-reserved-identifier)
                    std::size_t buf_bytes);
std::size_t __fread_chk(void* buf, std::size_t buf_bytes,
                        std::size_t size,  // NOLINT(bugprone-reserved-identifier)
                        std::size_t count, std::FILE* stream);
}

namespace {

using hdsm::test::pattern;

constexpr std::size_t kBlock = 4096;

const hdsm::Kernel& stamp_kernel() {
  static const hdsm::Kernel k =
      hdsm::per_thread("interpose_stamp", [](const hdsm::Thread& t, unsigned char* p, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) p[i] = static_cast<unsigned char>(i % 251);
      });
  return k;
}

int memfd_with(const std::vector<unsigned char>& data) {
  const int fd = ::memfd_create("hdsm interpose test", MFD_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::pwrite(fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  return fd;
}

std::vector<unsigned char> file_contents(int fd, std::size_t n) {
  std::vector<unsigned char> out(n);
  EXPECT_EQ(::pread(fd, out.data(), n, 0), static_cast<ssize_t>(n));
  return out;
}

class Interpose : public ::testing::TestWithParam<const char*> {
 protected:
  Interpose()
      : rt_(hdsm::test::fast_sim_config(GetParam(), "4KiB")
                .set("HDSM_STAGING_BYTES", "64KiB")
                .set("HDSM_STAGING_CHUNK", "16KiB")) {}

  /// An object whose host copy is invalid (a kernel wrote it last): any CPU access would fault, and
  /// a system call on it would fail with EFAULT.
  unsigned char* invalid_object(std::size_t bytes) {
    auto* p = static_cast<unsigned char*>(rt_.alloc(bytes));
    rt_.call(stamp_kernel(), hdsm::cover(bytes), hdsm::out(p), std::uint64_t{bytes});
    rt_.sync();
    return p;
  }
  std::uint64_t faults() const {
    const hdsm::Stats s = rt_.stats();
    return s.read_faults + s.write_faults;
  }

  hdsm::Runtime rt_;
};

TEST_P(Interpose, PlainReadAndPreadFillSharedMemoryWithoutFaults) {
  const std::size_t bytes = 20 * kBlock + 300;
  unsigned char* p = invalid_object(bytes);
  const std::vector<unsigned char> data = pattern(bytes, 3);
  const int fd = memfd_with(data);
  rt_.reset_stats();
  ASSERT_EQ(::lseek(fd, 0, SEEK_SET), 0);
  EXPECT_EQ(::read(fd, p, bytes / 2), static_cast<ssize_t>(bytes / 2));
  EXPECT_EQ(::pread(fd, p + bytes / 2, bytes - bytes / 2, static_cast<off_t>(bytes / 2)),
            static_cast<ssize_t>(bytes - bytes / 2));
  EXPECT_EQ(faults(), 0u);
  if (std::string(GetParam()) != "batch") {  // batch-update never leaves a host copy invalid
    EXPECT_GT(rt_.stats().action(hdsm::Action::bulk).bytes, 0u) << "straight to the device copy";
  }
  EXPECT_EQ(std::memcmp(p, data.data(), bytes), 0);
  ::close(fd);
  rt_.free(p);
}

TEST_P(Interpose, PlainWriteAndPwriteTakeSharedMemoryWithoutFaults) {
  const std::size_t bytes = 18 * kBlock + 17;
  unsigned char* p = invalid_object(bytes);
  const int fd = ::memfd_create("hdsm interpose out", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  rt_.reset_stats();
  EXPECT_EQ(::write(fd, p, 1000), 1000);
  EXPECT_EQ(::pwrite(fd, p + 1000, bytes - 1000, 1000), static_cast<ssize_t>(bytes - 1000));
  EXPECT_EQ(faults(), 0u);
  const std::vector<unsigned char> got = file_contents(fd, bytes);
  for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(got[i], i % 251) << "byte " << i;
  ::close(fd);
  rt_.free(p);
}

TEST_P(Interpose, LargeFileOffsetCallsAndVectorsMixingHostAndSharedMemory) {
  const std::size_t bytes = 9 * kBlock;
  unsigned char* p = invalid_object(bytes);
  std::vector<unsigned char> host(5000, 0);
  const std::vector<unsigned char> data = pattern(bytes + host.size(), 11);
  const int fd = memfd_with(data);
  rt_.reset_stats();
  struct iovec in[] = {{host.data(), host.size()}, {p, bytes}};
  ASSERT_EQ(::lseek(fd, 0, SEEK_SET), 0);
  EXPECT_EQ(::readv(fd, in, 2), static_cast<ssize_t>(bytes + host.size()));
  EXPECT_EQ(std::memcmp(host.data(), data.data(), host.size()), 0);
  EXPECT_EQ(::pread64(fd, p + 100, 50, 7), 50);  // what _FILE_OFFSET_BITS=64 programs call
  EXPECT_EQ(faults(), 0u);
  std::vector<unsigned char> ref(data.begin() + static_cast<std::ptrdiff_t>(host.size()), data.end());
  std::memcpy(ref.data() + 100, data.data() + 7, 50);
  EXPECT_EQ(std::memcmp(p, ref.data(), bytes), 0);

  const int out = ::memfd_create("hdsm interpose writev", MFD_CLOEXEC);
  struct iovec vec[] = {{p, 4000}, {host.data(), 10}, {p + 4000, bytes - 4000}};
  rt_.reset_stats();
  EXPECT_EQ(::writev(out, vec, 3), static_cast<ssize_t>(bytes + 10));
  EXPECT_EQ(::pwrite64(out, p, 3, static_cast<off_t>(bytes + 10)), 3);
  EXPECT_EQ(faults(), 0u);
  const std::vector<unsigned char> written = file_contents(out, bytes + 13);
  EXPECT_EQ(std::memcmp(written.data(), ref.data(), 4000), 0);
  EXPECT_EQ(std::memcmp(written.data() + 4000, host.data(), 10), 0);
  EXPECT_EQ(std::memcmp(written.data() + 4010, ref.data() + 4000, bytes - 4000), 0);
  EXPECT_EQ(std::memcmp(written.data() + bytes + 10, ref.data(), 3), 0);
  ::close(out);
  ::close(fd);
  rt_.free(p);
}

TEST_P(Interpose, StdioFreadAndFwriteOnSharedMemory) {
  const std::size_t bytes = 12 * kBlock + 8;
  unsigned char* p = invalid_object(bytes);
  const int fd = ::memfd_create("hdsm interpose stdio", MFD_CLOEXEC);
  std::FILE* f = ::fdopen(fd, "w+");
  ASSERT_NE(f, nullptr);
  rt_.reset_stats();
  EXPECT_EQ(std::fwrite(p, 8, bytes / 8, f), bytes / 8);
  ASSERT_EQ(std::fflush(f), 0);
  std::rewind(f);
  unsigned char* q = invalid_object(bytes);
  rt_.reset_stats();
  EXPECT_EQ(std::fread(q + 1, 1, bytes - 1, f), bytes - 1);
  EXPECT_EQ(std::fread(q, 2, 1, f), 0u) << "one byte left: no whole item, but libc stores the byte";
  EXPECT_EQ(std::fread(q, 1, 1, f), 0u) << "end of file";
  EXPECT_TRUE(std::feof(f));
  EXPECT_EQ(faults(), 0u);
  EXPECT_EQ(q[0], (bytes - 1) % 251);
  for (std::size_t i = 1; i < bytes; ++i) ASSERT_EQ(q[i], (i - 1) % 251) << "byte " << i;
  std::fclose(f);
  rt_.free(p);
  rt_.free(q);
}

// What _FORTIFY_SOURCE builds call instead of read, pread and fread: the same I/O on shared memory,
// and libc's stop (abort) for a request larger than the buffer, including an fread whose size * count
// wraps around to a size that fits.
TEST_P(Interpose, FortifiedEntryPointsFillSharedMemoryAndStopOnOverflows) {
  const std::size_t bytes = 10 * kBlock + 5;
  unsigned char* p = invalid_object(bytes);
  const std::vector<unsigned char> data = pattern(bytes, 9);
  const int fd = memfd_with(data);
  ASSERT_EQ(::lseek(fd, 0, SEEK_SET), 0);
  rt_.reset_stats();
  EXPECT_EQ(__read_chk(fd, p, 3 * kBlock, bytes), static_cast<ssize_t>(3 * kBlock));
  EXPECT_EQ(__pread_chk(fd, p + 3 * kBlock, 3 * kBlock, static_cast<off_t>(3 * kBlock), bytes - 3 * kBlock),
            static_cast<ssize_t>(3 * kBlock));
  std::FILE* f = ::fdopen(::dup(fd), "r");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fseek(f, static_cast<long>(6 * kBlock), SEEK_SET), 0);
  const std::size_t rest = bytes - 6 * kBlock;
  EXPECT_EQ(__fread_chk(p + 6 * kBlock, rest, 1, rest, f), rest);
  EXPECT_EQ(faults(), 0u);
  EXPECT_EQ(std::memcmp(p, data.data(), bytes), 0);
  // 2^63 + 8 items of two bytes: 16 bytes once wrapped, which fit the 16-byte buffer. The child runs
  // the test from the start (a fork's child has no runtime: hdsm leaves its calls to libc).
  const hdsm::test::DeathTestStyle style("threadsafe");
  const std::size_t huge = (SIZE_MAX / 2) + 9;
  EXPECT_EXIT((void)__fread_chk(p, 16, huge, 2, f), ::testing::KilledBySignal(SIGABRT), "buffer overflow");
  EXPECT_EXIT((void)__read_chk(fd, p, 32, 16), ::testing::KilledBySignal(SIGABRT), "buffer overflow");
  std::fclose(f);
  ::close(fd);
  rt_.free(p);
}

TEST_P(Interpose, ErrorsAreLibcs) {
  unsigned char* p = invalid_object(4 * kBlock);
  errno = 0;
  EXPECT_EQ(::read(-1, p, 10), -1);
  EXPECT_EQ(errno, EBADF);
  const int fd = memfd_with(pattern(8 * kBlock, 1));
  errno = 0;
  EXPECT_EQ(::pread(fd, p + kBlock, 4 * kBlock, 0), -1) << "the range leaves the object";
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(::lseek(fd, 0, SEEK_CUR), 0) << "nothing moved";
  errno = 0;
  EXPECT_EQ(::write(fd, p + 4 * kBlock - 1, 2), -1);
  EXPECT_EQ(errno, EFAULT);
  ::close(fd);
  rt_.free(p);
}

TEST_P(Interpose, TheRuntimesOwnCallsGoStraightToLibc) {
  if (std::string(GetParam()) == "batch") GTEST_SKIP() << "batch-update keeps the user view accessible";
  unsigned char* p = invalid_object(2 * kBlock);
  const int fd = memfd_with(pattern(2 * kBlock, 5));
  {
    hdsm::api::Reentry inside;  // as when a libc call comes from within an interposed call
    errno = 0;
    const ssize_t got = ::pread(fd, p, 2 * kBlock, 0);
    EXPECT_EQ(got, -1) << "the kernel refuses the protected user view";
    EXPECT_EQ(errno, EFAULT);
    EXPECT_FALSE(hdsm::api::shared_memset(p, 1, 10));
  }
  EXPECT_EQ(::pread(fd, p, 2 * kBlock, 0), static_cast<ssize_t>(2 * kBlock)) << "outside the guard";
  ::close(fd);
  rt_.free(p);
}

TEST_P(Interpose, PreloadEntryPointsHandleSharedRangesAndDeclineTheRest) {
  const std::size_t bytes = 6 * kBlock;
  unsigned char* p = invalid_object(bytes);
  unsigned char* q = invalid_object(bytes);
  std::vector<unsigned char> host(bytes, 7);
  rt_.reset_stats();
  EXPECT_TRUE(hdsm::api::shared_memset(p + 10, 0x33, 3 * kBlock));
  EXPECT_TRUE(hdsm::api::shared_memmove(q, p, bytes));
  EXPECT_TRUE(hdsm::api::shared_memmove(host.data(), q + 5, 100));
  EXPECT_EQ(faults(), 0u);
  EXPECT_FALSE(hdsm::api::shared_memmove(host.data(), host.data() + 1, 10)) << "host memory is libc's";
  EXPECT_FALSE(hdsm::api::shared_memset(host.data(), 0, 10));
  EXPECT_FALSE(hdsm::api::shared_memset(q + bytes - 8, 0, 16)) << "a range leaving the objects is libc's";
  for (std::size_t i = 0; i < bytes; ++i) {
    const unsigned char want = i >= 10 && i < 10 + 3 * kBlock ? 0x33 : static_cast<unsigned char>(i % 251);
    ASSERT_EQ(q[i], want) << "byte " << i;
  }
  for (std::size_t i = 0; i < 100; ++i) ASSERT_EQ(host[i], q[i + 5]);
  rt_.free(p);
  rt_.free(q);
}

INSTANTIATE_TEST_SUITE_P(Protocols, Interpose, ::testing::Values("batch", "lazy", "rolling"),
                         [](const auto& info) { return std::string(info.param); });

TEST(InterposeRuntimes, EachCallGoesToTheRuntimeThatOwnsTheBuffer) {
  hdsm::Runtime a(hdsm::test::fast_sim_config("rolling")), b(hdsm::test::fast_sim_config("lazy"));
  auto* pa = static_cast<unsigned char*>(a.alloc(3 * kBlock));
  auto* pb = static_cast<unsigned char*>(b.alloc(3 * kBlock));
  EXPECT_EQ(hdsm::detail::shared_ranges.owner(pa), &a);
  EXPECT_EQ(hdsm::detail::shared_ranges.owner(pb), &b);
  std::vector<unsigned char> host(16);
  EXPECT_EQ(hdsm::detail::shared_ranges.owner(host.data()), nullptr);
  const std::vector<unsigned char> data = pattern(3 * kBlock, 9);
  const int fd = memfd_with(data);
  a.reset_stats();
  b.reset_stats();
  EXPECT_EQ(::pread(fd, pa, 3 * kBlock, 0), static_cast<ssize_t>(3 * kBlock));
  EXPECT_EQ(::pread(fd, pb, 3 * kBlock, 0), static_cast<ssize_t>(3 * kBlock));
  EXPECT_GT(a.stats().action(hdsm::Action::bulk).bytes + b.stats().action(hdsm::Action::bulk).bytes, 0u);
  EXPECT_EQ(a.stats().write_faults + b.stats().write_faults, 0u);
  EXPECT_EQ(std::memcmp(pa, data.data(), data.size()), 0);
  EXPECT_EQ(std::memcmp(pb, data.data(), data.size()), 0);
  ::close(fd);
  a.free(pa);
  b.free(pb);
}

// One readv or writev whose vectors lie in objects of two runtimes: each vector goes to the runtime
// that owns it (before, the first vector's runtime took the other's as host memory: EFAULT there, and
// a short count with half the data).
TEST(InterposeRuntimes, VectorsInObjectsOfTwoRuntimesGoEachToItsOwn) {
  hdsm::Runtime a(hdsm::test::fast_sim_config("rolling")), b(hdsm::test::fast_sim_config("lazy"));
  const std::size_t n = 3 * kBlock;
  const auto device_only = [&](hdsm::Runtime& rt) {
    auto* p = static_cast<unsigned char*>(rt.alloc(n));
    rt.call(stamp_kernel(), hdsm::cover(n), hdsm::out(p), std::uint64_t{n});
    rt.sync();  // the host copy is invalid: a system call on it would get EFAULT
    return p;
  };
  unsigned char* pa = device_only(a);
  unsigned char* pb = device_only(b);
  std::vector<unsigned char> host(kBlock);
  const std::vector<unsigned char> data = pattern(2 * n + kBlock, 5);
  int fd = memfd_with(data);
  struct iovec in[3] = {{pa, n}, {host.data(), kBlock}, {pb, n}};
  EXPECT_EQ(::readv(fd, in, 3), static_cast<ssize_t>(2 * n + kBlock));
  EXPECT_EQ(std::memcmp(pa, data.data(), n), 0);
  EXPECT_EQ(std::memcmp(host.data(), data.data() + n, kBlock), 0);
  EXPECT_EQ(std::memcmp(pb, data.data() + n + kBlock, n), 0);
  ::close(fd);
  // And back out: b's vector first this time.
  a.call(stamp_kernel(), hdsm::cover(n), hdsm::out(pa), std::uint64_t{n});
  a.sync();
  fd = ::memfd_create("hdsm interpose test", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct iovec out[2] = {{pb, n}, {pa, n}};
  EXPECT_EQ(::writev(fd, out, 2), static_cast<ssize_t>(2 * n));
  const std::vector<unsigned char> written = file_contents(fd, 2 * n);
  EXPECT_EQ(std::memcmp(written.data(), data.data() + n + kBlock, n), 0) << "b's vector";
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(written[n + i], static_cast<unsigned char>(i % 251)) << "a's vector, byte " << i;
  ::close(fd);
  a.free(pa);
  b.free(pb);
}

}  // namespace
