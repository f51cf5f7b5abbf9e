// Interposition (issue 4, part 3a): a program linked with libhdsm calls plain read, write, pread,
// pwrite, readv, writev, preadv, pwritev, fread, fwrite and the socket calls on shared memory and gets hdsm's
// I/O (no fault, right data, libc's errno). Without interposition the kernel would refuse the protected user
// view (EFAULT) or stop part way, so these tests fail if the symbols are not interposed. Also the reentrancy
// guard and the memmove/memset entry points of libhdsm_preload.so.
#include <hdsm/hdsm.h>
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
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
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

// preadv and pwritev with a vector list of the shape MPI-IO gives for a datatype with holes: many
// small vectors into one shared object (4 bytes of every 8), with host vectors among them. Before
// they were interposed, the kernel refused the protected user view: -1 with EFAULT.
TEST_P(Interpose, PositionalVectorCallsGatherAndScatterSharedMemory) {
  const std::size_t bytes = 10 * kBlock + 120, pieces = 900, rest = 8 * pieces;  // 910 vectors: < IOV_MAX
  unsigned char* p = invalid_object(bytes);
  std::vector<unsigned char> host(pieces);
  std::vector<struct iovec> vec;
  for (std::size_t i = 0; i < pieces; ++i) {
    vec.push_back({p + 8 * i, 4});
    if (i % 100 == 0) vec.push_back({host.data() + i, 1});
  }
  vec.push_back({p + rest, bytes - rest});  // and the rest of the object whole
  const auto count = static_cast<int>(vec.size());
  std::size_t total = 0;
  for (const struct iovec& v : vec) total += v.iov_len;
  const std::vector<unsigned char> data = pattern(total + 777, 21);
  const int fd = memfd_with(data);
  rt_.reset_stats();
  EXPECT_EQ(::preadv(fd, vec.data(), count, 777), static_cast<ssize_t>(total));
  EXPECT_EQ(faults(), 0u);
  std::vector<unsigned char> got(bytes);
  rt_.memcpy(got.data(), p, bytes);
  std::size_t at = 777, bad = 0;
  for (std::size_t i = 0; i < pieces; ++i) {
    for (std::size_t b = 0; b < 8; ++b)
      bad += got[8 * i + b] != (b < 4 ? data[at + b] : static_cast<unsigned char>((8 * i + b) % 251)) ? 1 : 0;
    at += 4;
    if (i % 100 == 0) bad += host[i] != data[at++] ? 1 : 0;
  }
  for (std::size_t i = rest; i < bytes; ++i) bad += got[i] != data[at++] ? 1 : 0;
  EXPECT_EQ(bad, 0u) << "bytes read wrong";
  EXPECT_EQ(::lseek(fd, 0, SEEK_CUR), 0) << "the file position does not move";

  // Back out, at an offset past the end of the file (a hole before it), then read past the end: a
  // short count.
  const int out = ::memfd_create("hdsm interpose pwritev", MFD_CLOEXEC);
  ASSERT_GE(out, 0);
  rt_.reset_stats();
  EXPECT_EQ(::pwritev64(out, vec.data(), count, 5), static_cast<ssize_t>(total));
  EXPECT_EQ(faults(), 0u);
  const std::vector<unsigned char> written = file_contents(out, total + 5);
  EXPECT_EQ(std::memcmp(written.data() + 5, data.data() + 777, total), 0);
  EXPECT_EQ(::preadv64(out, vec.data(), count, static_cast<off_t>(total + 5 - 10)), 10)
      << "10 bytes before the end";

  // Through the C API too, with one vector in the object.
  const struct iovec whole { p, bytes };
  EXPECT_EQ(hdsm_pwritev(out, &whole, 1, 0), static_cast<ssize_t>(bytes));
  EXPECT_EQ(hdsm_preadv(out, &whole, 1, 0), static_cast<ssize_t>(bytes));
  ::close(out);
  ::close(fd);
  rt_.free(p);
}

// preadv2 and pwritev2: at an offset with flags on every chunk's call; at the file position (-1)
// as readv/writev without flags, one call with them; the kernel's errors.
TEST_P(Interpose, PositionalVectorCallsWithFlags) {
  const std::size_t n = 5 * 16 * 1024 + 33;  // more than a chunk
  unsigned char* p = invalid_object(n);
  const std::vector<unsigned char> data = pattern(2 * n, 17);
  const int fd = memfd_with(data);
  struct iovec whole[2] = {{p, 100}, {p + 100, n - 100}};
  rt_.reset_stats();
  EXPECT_EQ(::preadv2(fd, whole, 2, 9, RWF_SYNC), static_cast<ssize_t>(n));
  EXPECT_EQ(::pwritev2(fd, whole, 2, static_cast<off_t>(n), RWF_DSYNC), static_cast<ssize_t>(n));
  EXPECT_EQ(faults(), 0u);
  std::vector<unsigned char> expect(data.begin() + 9, data.begin() + 9 + static_cast<std::ptrdiff_t>(n));
  const std::vector<unsigned char> before = file_contents(fd, 2 * n);
  EXPECT_EQ(std::memcmp(before.data() + n, expect.data(), n), 0) << "read at 9, written at n";

  ASSERT_EQ(::lseek(fd, 3, SEEK_SET), 3);
  EXPECT_EQ(::preadv64v2(fd, whole, 2, -1, 0), static_cast<ssize_t>(n)) << "the file position, no flags";
  EXPECT_EQ(::lseek(fd, 0, SEEK_CUR), static_cast<off_t>(n + 3));
  EXPECT_EQ(::pwritev64v2(fd, whole, 2, -1, RWF_DSYNC), static_cast<ssize_t>(n)) << "the position, flags";
  EXPECT_EQ(::lseek(fd, 0, SEEK_CUR), static_cast<off_t>(2 * n + 3));
  EXPECT_EQ(faults(), 0u);
  const std::vector<unsigned char> file = file_contents(fd, 2 * n + 3);
  std::vector<unsigned char> got(n);
  rt_.memcpy(got.data(), p, n);
  EXPECT_EQ(std::memcmp(got.data(), before.data() + 3, n), 0) << "read at the position";
  EXPECT_EQ(std::memcmp(file.data() + n + 3, got.data(), n), 0) << "written at the position";

  errno = 0;
  EXPECT_EQ(::preadv2(fd, whole, 2, -2, 0), -1);
  EXPECT_EQ(errno, EINVAL) << "an offset below -1";
  errno = 0;
  EXPECT_EQ(::preadv2(fd, whole, 2, 0, 0x40000000), -1);
  EXPECT_EQ(errno, EOPNOTSUPP) << "a flag the kernel does not know";
  errno = 0;
  EXPECT_EQ(::pwritev2(fd, whole, 2, -1, 0x40000000), -1);
  EXPECT_EQ(errno, EOPNOTSUPP) << "a flag the kernel does not know, at the position";
  ::close(fd);
  rt_.free(p);
}

// The kernel's errors, before any byte moves; a pwritev to an O_APPEND file appends, as writev.
TEST_P(Interpose, PositionalVectorCallErrorsAreTheKernels) {
  unsigned char* p = invalid_object(4 * kBlock);
  const int fd = memfd_with(pattern(8 * kBlock, 1));
  struct iovec v[2] = {{p, kBlock}, {p + 2 * kBlock, kBlock}};
  const auto fails = [&](ssize_t got, int expected, const char* what) {
    EXPECT_EQ(got, -1) << what;
    EXPECT_EQ(errno, expected) << what;
    errno = 0;
  };
  errno = 0;
  fails(::preadv(fd, v, 2, -1), EINVAL, "a negative offset");
  fails(::pwritev(-1, v, 2, 0), EBADF, "no descriptor");
  fails(::preadv(fd, v, -1, 0), EINVAL, "a negative count");
  fails(::preadv(fd, v, 2, std::numeric_limits<off_t>::max() - 100), EINVAL, "past the largest offset");
  struct iovec leaves[1] = {{p + 3 * kBlock, 2 * kBlock}};
  fails(::preadv(fd, leaves, 1, 0), EFAULT, "a range that leaves the object");
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  fails(::pwritev(ends[1], v, 2, 0), ESPIPE, "a pipe");
  ::close(ends[0]);
  ::close(ends[1]);

  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  const int append = ::open(self.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  ASSERT_GE(append, 0);
  EXPECT_EQ(::pwritev(append, v, 2, 0), static_cast<ssize_t>(2 * kBlock));
  EXPECT_EQ(::lseek(fd, 0, SEEK_END), static_cast<off_t>(10 * kBlock)) << "appended at the end";
  const std::vector<unsigned char> file = file_contents(fd, 10 * kBlock);
  const std::vector<unsigned char> first = pattern(8 * kBlock, 1);
  EXPECT_EQ(std::memcmp(file.data(), first.data(), first.size()), 0) << "the start is untouched";
  for (std::size_t i = 0; i < 2 * kBlock; ++i) {
    const std::size_t from = i < kBlock ? i : i + kBlock;
    ASSERT_EQ(file[8 * kBlock + i], from % 251) << "appended byte " << i;
  }
  ::close(append);
  ::close(fd);
  rt_.free(p);
}

// Two threads that read or write one regular file's descriptor at once, each a shared object of
// several staging chunks: each call is one range of the file, as the kernel keeps it (the file
// offset's lock). Before, the chunks of the two calls interleaved.
TEST_P(Interpose, ThreadsSharingAFileDescriptorNeverInterleaveTheirCalls) {
  const std::size_t n = 6 * 16 * 1024 + 100;  // six chunks and a bit
  auto* a = static_cast<unsigned char*>(rt_.alloc(n));
  auto* b = static_cast<unsigned char*>(rt_.alloc(n));
  const std::vector<unsigned char> pa = pattern(n, 1), pb = pattern(n, 2);
  for (int round = 0; round < 10; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    rt_.memcpy(a, pa.data(), n);
    rt_.memcpy(b, pb.data(), n);
    const int fd = ::memfd_create("hdsm interpose threads", MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    ssize_t wrote[2] = {0, 0};
    {
      std::thread other([&] { wrote[1] = ::write(fd, b, n); });
      wrote[0] = ::write(fd, a, n);
      other.join();
    }
    EXPECT_EQ(wrote[0], static_cast<ssize_t>(n));
    EXPECT_EQ(wrote[1], static_cast<ssize_t>(n));
    const std::vector<unsigned char> file = file_contents(fd, 2 * n);
    const bool a_first = std::memcmp(file.data(), pa.data(), n) == 0;
    EXPECT_EQ(std::memcmp(file.data(), (a_first ? pa : pb).data(), n), 0) << "the first write whole";
    EXPECT_EQ(std::memcmp(file.data() + n, (a_first ? pb : pa).data(), n), 0) << "the second write whole";

    ASSERT_EQ(::lseek(fd, 0, SEEK_SET), 0);
    ssize_t read[2] = {0, 0};
    {
      std::thread other([&] { read[1] = ::read(fd, b, n); });
      read[0] = ::read(fd, a, n);
      other.join();
    }
    EXPECT_EQ(read[0], static_cast<ssize_t>(n));
    EXPECT_EQ(read[1], static_cast<ssize_t>(n));
    std::vector<unsigned char> got_a(n), got_b(n);
    rt_.memcpy(got_a.data(), a, n);
    rt_.memcpy(got_b.data(), b, n);
    const bool a_read_first = std::memcmp(got_a.data(), file.data(), n) == 0;
    EXPECT_EQ(std::memcmp(got_a.data(), file.data() + (a_read_first ? 0 : n), n), 0) << "one range each";
    EXPECT_EQ(std::memcmp(got_b.data(), file.data() + (a_read_first ? n : 0), n), 0) << "one range each";
    ::close(fd);
  }
  rt_.free(a);
  rt_.free(b);
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

// recv, send and their kin on shared memory, over a stream socket (larger than a staging chunk, so
// in pieces) and a datagram socket: the data arrives, no fault is raised, and the calls keep what
// libc's do: MSG_WAITALL waits for every byte, MSG_PEEK leaves the data queued, recvfrom gives the
// sender's address as libc does, sendmsg's ancillary data (a descriptor) travels with its bytes.
TEST_P(Interpose, SocketCallsMoveSharedMemoryWithoutFaults) {
  const std::size_t bytes = 20 * kBlock + 300;  // five 16 KiB staging chunks and a bit
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  unsigned char* p = invalid_object(bytes);
  unsigned char* q = invalid_object(bytes);
  rt_.reset_stats();
  // The shared bytes, read without touching the user view (which would fault).
  const auto in_q = [&](std::size_t at, std::size_t n) {
    std::vector<unsigned char> v(n);
    rt_.memcpy(v.data(), q + at, n);
    return v;
  };
  const auto same = [](const std::vector<unsigned char>& v, const unsigned char* want) {
    return std::memcmp(v.data(), want, v.size()) == 0;
  };
  std::vector<unsigned char> stamp(bytes);  // what stamp_kernel wrote into p
  for (std::size_t i = 0; i < bytes; ++i) stamp[i] = static_cast<unsigned char>(i % 251);
  std::vector<unsigned char> got(bytes, 0);
  std::thread reader([&] { EXPECT_EQ(::recv(fds[1], got.data(), bytes, MSG_WAITALL), ssize_t(bytes)); });
  const ssize_t sent = ::send(fds[0], p, bytes, 0);
  if (sent != static_cast<ssize_t>(bytes)) ::shutdown(fds[0], SHUT_WR);  // the reader ends, not waits
  EXPECT_EQ(sent, static_cast<ssize_t>(bytes));
  reader.join();
  EXPECT_EQ(got, stamp);

  const std::vector<unsigned char> data = pattern(bytes, 4);
  std::thread writer([&] { EXPECT_EQ(::send(fds[1], data.data(), bytes, 0), ssize_t(bytes)); });
  EXPECT_EQ(::recv(fds[0], q, 8, MSG_PEEK), 8);
  EXPECT_EQ(::recv(fds[0], q + 8, 8, MSG_PEEK | MSG_WAITALL), 8);
  EXPECT_TRUE(same(in_q(0, 8), data.data()));
  EXPECT_TRUE(same(in_q(8, 8), data.data())) << "a peek takes nothing away";
  EXPECT_EQ(::recv(fds[0], q, bytes, MSG_WAITALL), static_cast<ssize_t>(bytes));
  writer.join();
  EXPECT_TRUE(same(in_q(0, bytes), data.data()));

  // Without MSG_WAITALL a receive returns what is there, and waits only for the first byte.
  std::thread later([&] { EXPECT_EQ(::send(fds[1], data.data(), 3 * kBlock, 0), ssize_t(3 * kBlock)); });
  std::size_t arrived = 0;
  while (arrived < 3 * kBlock) {
    const ssize_t n = ::recv(fds[0], q + arrived, bytes - arrived, 0);
    if (n <= 0) {
      ADD_FAILURE() << "recv: " << n << ", errno " << errno;
      break;
    }
    arrived += static_cast<std::size_t>(n);
  }
  later.join();
  EXPECT_EQ(arrived, 3 * kBlock);
  EXPECT_TRUE(same(in_q(0, 3 * kBlock), data.data()));

  // sendmsg from shared and host vectors with a descriptor; recvmsg into shared and host vectors.
  std::vector<unsigned char> host(100, 0x5a);
  struct iovec out[] = {{p, 1000}, {host.data(), host.size()}, {p + 1000, 2000}};
  int passed = ::memfd_create("hdsm interpose passed", MFD_CLOEXEC);
  ASSERT_GE(passed, 0);
  alignas(struct cmsghdr) unsigned char control[CMSG_SPACE(sizeof(int))] = {};
  struct msghdr msg {};
  msg.msg_iov = out;
  msg.msg_iovlen = 3;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &passed, sizeof passed);
  EXPECT_EQ(::sendmsg(fds[0], &msg, 0), 3100);
  ::close(passed);
  std::vector<unsigned char> tail(600, 0);
  struct iovec in[] = {{q, 2500}, {tail.data(), tail.size()}};
  alignas(struct cmsghdr) unsigned char received[CMSG_SPACE(sizeof(int))] = {};
  struct msghdr back {};
  back.msg_iov = in;
  back.msg_iovlen = 2;
  back.msg_control = received;
  back.msg_controllen = sizeof received;
  EXPECT_EQ(::recvmsg(fds[1], &back, MSG_WAITALL), 3100);
  EXPECT_EQ(back.msg_flags & MSG_CTRUNC, 0);
  ASSERT_GE(back.msg_controllen, CMSG_LEN(sizeof(int)));
  const struct cmsghdr* rc = CMSG_FIRSTHDR(&back);
  ASSERT_NE(rc, nullptr);
  EXPECT_EQ(rc->cmsg_type, SCM_RIGHTS);
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(rc), sizeof fd);
  EXPECT_EQ(::fcntl(fd, F_GETFD) >= 0, true) << "the descriptor arrived";
  ::close(fd);
  std::vector<unsigned char> want(3100);
  for (std::size_t i = 0; i < 1000; ++i) want[i] = static_cast<unsigned char>(i % 251);
  std::fill_n(want.begin() + 1000, 100, 0x5a);
  for (std::size_t i = 0; i < 2000; ++i) want[1100 + i] = static_cast<unsigned char>((1000 + i) % 251);
  EXPECT_TRUE(same(in_q(0, 2500), want.data()));
  EXPECT_EQ(std::memcmp(tail.data(), want.data() + 2500, 600), 0);
  EXPECT_EQ(faults(), 0u);
  ::close(fds[0]);
  ::close(fds[1]);

  // Datagrams: one call, one message, whole, with the sender's address as libc gives it.
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM, 0, fds), 0);
  rt_.reset_stats();
  EXPECT_EQ(::sendto(fds[0], p, 3000, 0, nullptr, 0), 3000);
  EXPECT_EQ(::send(fds[0], data.data(), 3000, 0), 3000);
  struct sockaddr_storage from {
  }, host_from{};
  socklen_t from_bytes = sizeof from, host_bytes = sizeof host_from;
  EXPECT_EQ(::recvfrom(fds[1], q + 1, 5000, 0, reinterpret_cast<sockaddr*>(&from), &from_bytes), 3000);
  EXPECT_EQ(::recvfrom(fds[1], got.data(), 3000, 0, reinterpret_cast<sockaddr*>(&host_from), &host_bytes),
            3000);
  EXPECT_EQ(from_bytes, host_bytes);
  EXPECT_EQ(from.ss_family, host_from.ss_family);
  EXPECT_TRUE(same(in_q(1, 3000), stamp.data()));
  EXPECT_EQ(std::memcmp(got.data(), data.data(), 3000), 0);
  EXPECT_EQ(::send(fds[0], p, 3000, 0), 3000);
  EXPECT_EQ(::recv(fds[1], q, 10, MSG_TRUNC), 3000) << "MSG_TRUNC gives the datagram's length";
  EXPECT_TRUE(same(in_q(0, 10), stamp.data()));
  EXPECT_EQ(faults(), 0u);
  ::close(fds[0]);
  ::close(fds[1]);
  rt_.free(p);
  rt_.free(q);
}

// The kernel reads a message's address and ancillary data on a send and writes them on a receive,
// as it does its vectors: in a shared object (whose host view is closed) they go through host
// copies too, whether the data is in shared memory or not. Before, such a call failed with EFAULT.
TEST_P(Interpose, SocketAddressesAndAncillaryDataInSharedMemory) {
  // Two datagram sockets with abstract names (no file): the receiver's name in a shared object.
  const auto named = [](const std::string& name) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract
    return std::pair{a, static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())};
  };
  const std::string tag = std::to_string(::getpid()) + "-" + GetParam();
  const auto [to, to_bytes] = named("hdsm-interpose-to-" + tag);
  const auto [sender, sender_bytes] = named("hdsm-interpose-from-" + tag);
  // The receiver does not wait: a datagram that was not sent fails the test instead of hanging it.
  const int rx = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int tx = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(rx, 0);
  ASSERT_GE(tx, 0);
  ASSERT_EQ(::bind(rx, reinterpret_cast<const sockaddr*>(&to), to_bytes), 0) << std::strerror(errno);
  ASSERT_EQ(::bind(tx, reinterpret_cast<const sockaddr*>(&sender), sender_bytes), 0) << std::strerror(errno);
  unsigned char* names = invalid_object(2 * kBlock);  // [0]: the receiver's name; [kBlock]: a sender's
  rt_.memcpy(names, &to, to_bytes);
  const auto name_at = [&](std::size_t at, socklen_t n) {
    std::vector<unsigned char> v(n);
    rt_.memcpy(v.data(), names + at, n);
    return v;
  };
  const auto bytes_of = [](const sockaddr_un& a, socklen_t n) {
    const auto* b = reinterpret_cast<const unsigned char*>(&a);
    return std::vector<unsigned char>(b, b + n);
  };
  rt_.reset_stats();

  // sendto and recvfrom with host data: the address alone is shared.
  const char hello[] = "hello";
  EXPECT_EQ(::sendto(tx, hello, sizeof hello, 0, reinterpret_cast<const sockaddr*>(names), to_bytes),
            static_cast<ssize_t>(sizeof hello))
      << std::strerror(errno);
  char got[16] = {};
  socklen_t from_bytes = kBlock;
  EXPECT_EQ(::recvfrom(rx, got, sizeof got, 0, reinterpret_cast<sockaddr*>(names + kBlock), &from_bytes),
            static_cast<ssize_t>(sizeof hello))
      << std::strerror(errno);
  EXPECT_STREQ(got, hello);
  EXPECT_EQ(from_bytes, sender_bytes);
  EXPECT_EQ(name_at(kBlock, sender_bytes), bytes_of(sender, sender_bytes)) << "the sender's name arrived";
  EXPECT_EQ(faults(), 0u);

  // sendmsg to the shared name with a descriptor in shared ancillary data; recvmsg of the sender's
  // name and the descriptor into shared memory, with the data in shared memory too.
  unsigned char* control = invalid_object(kBlock);
  alignas(cmsghdr) unsigned char host_control[CMSG_SPACE(sizeof(int))] = {};
  const int passed = ::memfd_create("hdsm interpose passed", MFD_CLOEXEC);
  ASSERT_GE(passed, 0);
  {
    msghdr m{};
    m.msg_control = host_control;
    m.msg_controllen = sizeof host_control;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &passed, sizeof passed);
  }
  rt_.memcpy(control, host_control, sizeof host_control);
  char data[] = "with a descriptor";
  iovec out{data, sizeof data};
  msghdr msg{};
  msg.msg_name = names;
  msg.msg_namelen = to_bytes;
  msg.msg_iov = &out;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof host_control;
  EXPECT_EQ(::sendmsg(tx, &msg, 0), static_cast<ssize_t>(sizeof data)) << std::strerror(errno);
  ::close(passed);
  unsigned char* into = invalid_object(kBlock);
  iovec in{into, kBlock};
  msghdr back{};
  back.msg_name = names + kBlock;
  back.msg_namelen = kBlock;
  back.msg_iov = &in;
  back.msg_iovlen = 1;
  back.msg_control = control + 512;
  back.msg_controllen = kBlock - 512;
  EXPECT_EQ(::recvmsg(rx, &back, 0), static_cast<ssize_t>(sizeof data)) << std::strerror(errno);
  EXPECT_EQ(back.msg_namelen, sender_bytes);
  EXPECT_EQ(back.msg_flags & MSG_CTRUNC, 0);
  ASSERT_GE(back.msg_controllen, CMSG_LEN(sizeof(int)));
  alignas(cmsghdr) unsigned char arrived[CMSG_SPACE(sizeof(int))] = {};
  rt_.memcpy(arrived, control + 512, sizeof arrived);
  const auto* c = reinterpret_cast<const cmsghdr*>(arrived);
  EXPECT_EQ(c->cmsg_level, SOL_SOCKET);
  EXPECT_EQ(c->cmsg_type, SCM_RIGHTS);
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  EXPECT_GE(::fcntl(fd, F_GETFD), 0) << "the descriptor arrived";
  ::close(fd);
  char data_back[sizeof data] = {};
  rt_.memcpy(data_back, into, sizeof data);
  EXPECT_STREQ(data_back, data);
  EXPECT_EQ(name_at(kBlock, sender_bytes), bytes_of(sender, sender_bytes));
  // The bytes past what the kernel wrote are the object's as they were (the stamp).
  std::vector<unsigned char> after(8);
  rt_.memcpy(after.data(), names + kBlock + sender_bytes, after.size());
  for (std::size_t i = 0; i < after.size(); ++i)
    EXPECT_EQ(after[i], (kBlock + sender_bytes + i) % 251) << "byte " << i << " past the name";
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // (The sanitizers' sendmsg reads the control message headers itself before hdsm's: a fault.)
  EXPECT_EQ(faults(), 0u);
#endif
  ::close(rx);
  ::close(tx);
  rt_.free(names);
  rt_.free(control);
  rt_.free(into);
}

// sendmmsg and recvmmsg with vectors in shared memory: each message whole and the count of those
// that moved, MSG_WAITFORONE taking only what is there after the first message, and the timeout
// checked after each message.
TEST_P(Interpose, MultiMessageSocketCallsOnSharedMemory) {
  unsigned char* p = invalid_object(4 * kBlock);
  unsigned char* q = invalid_object(4 * kBlock);
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM, 0, fds), 0);
  rt_.reset_stats();
  struct iovec out[3] = {{p, 1000}, {p + 1000, 3000}, {p + 4000, 10}};
  struct mmsghdr sent[3] = {};
  for (int i = 0; i < 3; ++i) {
    sent[i].msg_hdr.msg_iov = &out[i];
    sent[i].msg_hdr.msg_iovlen = 1;
  }
  ASSERT_EQ(::sendmmsg(fds[0], sent, 3, 0), 3);  // else the receive below would wait forever
  EXPECT_EQ(sent[1].msg_len, 3000u);
  struct iovec in[5];
  struct mmsghdr got[5] = {};
  for (int i = 0; i < 5; ++i) {
    in[i] = {q + static_cast<std::ptrdiff_t>(i) * 3000, 3000};
    got[i].msg_hdr.msg_iov = &in[i];
    got[i].msg_hdr.msg_iovlen = 1;
  }
  EXPECT_EQ(::recvmmsg(fds[1], got, 5, MSG_WAITFORONE, nullptr), 3);
  EXPECT_EQ(got[0].msg_len, 1000u);
  EXPECT_EQ(got[1].msg_len, 3000u);
  EXPECT_EQ(got[2].msg_len, 10u);
  errno = 0;
  EXPECT_EQ(::recvmmsg(fds[1], got, 5, MSG_DONTWAIT, nullptr), -1);
  EXPECT_EQ(errno, EAGAIN);
  // A timeout of zero ends the call after its first message, though a second one is there.
  ASSERT_EQ(::sendmmsg(fds[0], sent, 2, 0), 2);
  struct timespec none {};
  EXPECT_EQ(::recvmmsg(fds[1], got + 3, 2, 0, &none), 1);
  EXPECT_EQ(none.tv_sec, 0);
  EXPECT_EQ(none.tv_nsec, 0);
  EXPECT_EQ(::recvmmsg(fds[1], got + 4, 1, 0, nullptr), 1);
  // A timeout that is no time is the kernel's EINVAL; one of years is a wait as long as needed.
  struct timespec bad {
    0, 1'000'000'000
  };
  errno = 0;
  EXPECT_EQ(::recvmmsg(fds[1], got, 1, MSG_DONTWAIT, &bad), -1);
  EXPECT_EQ(errno, EINVAL);
  ASSERT_EQ(::sendmmsg(fds[0], sent, 2, 0), 2);
  struct timespec forever {
    std::numeric_limits<std::time_t>::max(), 0
  };
  EXPECT_EQ(::recvmmsg(fds[1], got, 5, MSG_WAITFORONE, &forever), 2) << "both messages, in no time";
  EXPECT_EQ(faults(), 0u);
  std::vector<unsigned char> stamp(4 * kBlock), back(15000);
  for (std::size_t i = 0; i < stamp.size(); ++i) stamp[i] = static_cast<unsigned char>(i % 251);
  rt_.memcpy(back.data(), q, back.size());
  EXPECT_EQ(std::memcmp(back.data(), stamp.data(), 1000), 0);
  EXPECT_EQ(std::memcmp(back.data() + 3000, stamp.data() + 1000, 3000), 0);
  EXPECT_EQ(std::memcmp(back.data() + 6000, stamp.data() + 4000, 10), 0);
  EXPECT_EQ(std::memcmp(back.data() + 9000, stamp.data(), 1000), 0);
  EXPECT_EQ(std::memcmp(back.data() + 12000, stamp.data() + 1000, 3000), 0);
  ::close(fds[0]);
  ::close(fds[1]);
  rt_.free(p);
  rt_.free(q);
}

// The socket calls' errors are libc's: a bad descriptor, a descriptor that is no socket, and a range
// that leaves the object, refused before the data is taken (the next receive gets it).
TEST_P(Interpose, SocketErrorsAreLibcsAndLoseNoData) {
  unsigned char* p = invalid_object(4 * kBlock);
  errno = 0;
  EXPECT_EQ(::recv(-1, p, 10, 0), -1);
  EXPECT_EQ(errno, EBADF);
  const int file = ::memfd_create("hdsm interpose not a socket", MFD_CLOEXEC);
  errno = 0;
  EXPECT_EQ(::send(file, p, 10, 0), -1);
  EXPECT_EQ(errno, ENOTSOCK);
  ::close(file);
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  const unsigned char hello[5] = {'h', 'e', 'l', 'l', 'o'};
  ASSERT_EQ(::send(fds[0], hello, 5, 0), 5);
  errno = 0;
  EXPECT_EQ(::recv(fds[1], p + 4 * kBlock - 2, 5, 0), -1) << "the range leaves the object";
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(::recv(fds[1], p, 5, MSG_DONTWAIT), 5) << "the data is still there";
  EXPECT_EQ(std::memcmp(p, hello, 5), 0);
  errno = 0;
  EXPECT_EQ(::recv(fds[1], p, 5, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
  ::close(fds[0]);
  ::close(fds[1]);
  rt_.free(p);
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
  // preadv and pwritev gather and scatter through one buffer: the other runtime's part is copied by
  // that runtime.
  a.call(stamp_kernel(), hdsm::cover(n), hdsm::out(pa), std::uint64_t{n});
  b.call(stamp_kernel(), hdsm::cover(n), hdsm::out(pb), std::uint64_t{n});
  a.sync();
  b.sync();
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  EXPECT_EQ(::pwritev(fd, out, 2, 7), static_cast<ssize_t>(2 * n));
  const std::vector<unsigned char> again = file_contents(fd, 2 * n + 7);
  for (std::size_t i = 0; i < 2 * n; ++i)
    ASSERT_EQ(again[7 + i], static_cast<unsigned char>((i % n) % 251)) << "pwritev, byte " << i;
  EXPECT_EQ(::preadv(fd, in, 3, 1), static_cast<ssize_t>(2 * n + 6)) << "short: the end of the file";
  EXPECT_EQ(std::memcmp(pa, again.data() + 1, n), 0);
  EXPECT_EQ(std::memcmp(host.data(), again.data() + 1 + n, kBlock), 0);
  EXPECT_EQ(std::memcmp(pb, again.data() + 1 + n + kBlock, n - kBlock + 6), 0);
  ::close(fd);
  a.free(pa);
  b.free(pb);
}

}  // namespace
