// I/O on shared objects: Runtime::read/write/pread/pwrite/readv/writev/fread/fwrite against libc on
// plain memory, for every block state and protocol, vectors over several objects, files larger than
// the staging pool, short reads, EOF and errors with libc's errno. Files are memfds (no /tmp).
#include <hdsm/hdsm.h>
#include <hdsm/hdsm.hpp>

#include "support/death_style.hpp"
#include "support/test_support.hpp"

#include "runtime/runtime_impl.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

namespace {

using hdsm::test::pattern;

constexpr std::size_t kBlock = 4096;

const hdsm::Kernel& fill_kernel() {
  static const hdsm::Kernel k =
      hdsm::per_thread("io_fill", [](const hdsm::Thread& t, unsigned char* p, std::uint64_t n, int v) {
        if (const auto i = t.global_x(); i < n) p[i] = static_cast<unsigned char>(v + i % 7);
      });
  return k;
}

/// A memfd holding `data`, offset at 0.
int file_with(const std::vector<unsigned char>& data) {
  const int fd = ::memfd_create("hdsm io test", MFD_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  EXPECT_EQ(::lseek(fd, 0, SEEK_SET), 0);
  return fd;
}

std::vector<unsigned char> contents(int fd) {
  const off_t size = ::lseek(fd, 0, SEEK_END);
  std::vector<unsigned char> out(static_cast<std::size_t>(size));
  EXPECT_EQ(::pread(fd, out.data(), out.size(), 0), size);
  return out;
}

std::uint64_t faults(const hdsm::Stats& s) { return s.read_faults + s.write_faults; }

class Io : public ::testing::TestWithParam<const char*> {
 protected:
  // A 64 KiB pool of 16 KiB chunks, so a few hundred KiB is already "larger than the pool".
  Io()
      : rt_(hdsm::test::fast_sim_config(GetParam(), "4KiB")
                .set("HDSM_STAGING_BYTES", "64KiB")
                .set("HDSM_STAGING_CHUNK", "16KiB")) {}

  enum class State { read_only, dirty, invalid };
  static constexpr State kStates[] = {State::read_only, State::dirty, State::invalid};
  static const char* name(State s) {
    return s == State::read_only ? "read-only" : s == State::dirty ? "dirty" : "invalid";
  }

  /// An object of `bytes` whose blocks are all in `state` (batch: dirty or read-write anyway), with
  /// its expected contents in `ref`.
  unsigned char* object_in(State state, std::size_t bytes, std::vector<unsigned char>& ref) {
    auto* p = static_cast<unsigned char*>(rt_.alloc(bytes));
    ref.assign(bytes, 0);
    if (state == State::dirty) {
      ref = pattern(bytes, 5);
      std::memcpy(p, ref.data(), bytes);
    } else if (state == State::invalid) {
      rt_.call(fill_kernel(), hdsm::cover(bytes), hdsm::out(p), std::uint64_t{bytes}, 40);
      rt_.sync();
      for (std::size_t i = 0; i < bytes; ++i) ref[i] = static_cast<unsigned char>(40 + i % 7);
    }
    return p;
  }

  hdsm::Runtime rt_;
};

TEST_P(Io, ReadIntoEveryStateMatchesLibc) {
  for (State state : kStates) {
    SCOPED_TRACE(name(state));
    const std::size_t bytes = 40 * kBlock + 123;  // several pool-fulls
    std::vector<unsigned char> ref;
    unsigned char* p = object_in(state, bytes, ref);
    const std::vector<unsigned char> data = pattern(30 * kBlock + 77, 9);
    const int fd = file_with(data);
    rt_.reset_stats();
    // Starts inside a block, ends inside another; the file ends before the buffer does.
    const std::size_t at = 1000;
    const ssize_t got = rt_.read(fd, p + at, bytes - at);
    EXPECT_EQ(got, static_cast<ssize_t>(data.size()));
    EXPECT_EQ(faults(rt_.stats()), 0u) << "the runtime's own copies never fault";
    std::memcpy(ref.data() + at, data.data(), data.size());
    EXPECT_EQ(std::memcmp(p, ref.data(), bytes), 0);
    EXPECT_EQ(rt_.read(fd, p, 10), 0) << "at the end of the file";
    ::close(fd);
    rt_.free(p);
  }
}

TEST_P(Io, WriteFromEveryStateMatchesLibc) {
  for (State state : kStates) {
    SCOPED_TRACE(name(state));
    const std::size_t bytes = 37 * kBlock + 5;
    std::vector<unsigned char> ref;
    unsigned char* p = object_in(state, bytes, ref);
    const int fd = ::memfd_create("hdsm io out", MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    rt_.reset_stats();
    EXPECT_EQ(rt_.write(fd, p + 3, bytes - 3), static_cast<ssize_t>(bytes - 3));
    EXPECT_EQ(rt_.pwrite(fd, p, 100, 1), 100);
    EXPECT_EQ(faults(rt_.stats()), 0u);
    std::vector<unsigned char> expected(ref.begin() + 3, ref.end());
    std::memcpy(expected.data() + 1, ref.data(), 100);
    EXPECT_EQ(contents(fd), expected);
    ::close(fd);
    rt_.free(p);
  }
}

TEST_P(Io, PreadAndReadvAcrossObjectsAndHostMemory) {
  auto* a = static_cast<unsigned char*>(rt_.alloc(4 * kBlock));
  auto* b = static_cast<unsigned char*>(rt_.alloc(2 * kBlock));
  const std::vector<unsigned char> data = pattern(6 * kBlock, 3);
  const int fd = file_with(data);
  // One pread over a block boundary of `a`.
  EXPECT_EQ(rt_.pread(fd, a + kBlock, 2 * kBlock, 100), static_cast<ssize_t>(2 * kBlock));
  EXPECT_EQ(std::memcmp(a + kBlock, data.data() + 100, 2 * kBlock), 0);
  EXPECT_EQ(::lseek(fd, 0, SEEK_CUR), 0) << "pread leaves the offset alone";
  // readv: host, shared, host.
  std::vector<unsigned char> h1(10), h2(50);
  iovec iov[3] = {{h1.data(), h1.size()}, {b + 7, 3000}, {h2.data(), h2.size()}};
  EXPECT_EQ(rt_.readv(fd, iov, 3), 3060);
  EXPECT_EQ(std::memcmp(h1.data(), data.data(), 10), 0);
  EXPECT_EQ(std::memcmp(b + 7, data.data() + 10, 3000), 0);
  EXPECT_EQ(std::memcmp(h2.data(), data.data() + 3010, 50), 0);
  // writev back out in another order.
  const int out = ::memfd_create("hdsm io writev", MFD_CLOEXEC);
  iovec back[2] = {{b + 7, 3000}, {h1.data(), h1.size()}};
  EXPECT_EQ(rt_.writev(out, back, 2), 3010);
  std::vector<unsigned char> expected(data.begin() + 10, data.begin() + 3010);
  expected.insert(expected.end(), data.begin(), data.begin() + 10);
  EXPECT_EQ(contents(out), expected);
  // Counts libc refuses are refused alike: above IOV_MAX, and negative (EINVAL, nothing written).
  std::vector<iovec> many(IOV_MAX + 1, iovec{b, 1});
  errno = 0;
  EXPECT_EQ(rt_.writev(out, many.data(), IOV_MAX + 1), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(rt_.readv(fd, iov, -1), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rt_.writev(out, many.data(), IOV_MAX), IOV_MAX) << "IOV_MAX vectors are fine";
  // A length above SSIZE_MAX is EINVAL, as the kernel's, even behind a vector that would fault.
  iovec huge[2] = {{b + 2 * kBlock - 1, 2}, {b, static_cast<std::size_t>(SSIZE_MAX) + 1}};
  for (const int n : {1, 2}) {
    errno = 0;
    EXPECT_EQ(rt_.readv(fd, huge + 2 - n, n), -1);
    EXPECT_EQ(errno, EINVAL) << n << " vectors";
  }
  ::close(out);
  ::close(fd);
  rt_.free(a);
  rt_.free(b);
}

TEST_P(Io, ShortReadsFromAPipeReturnWhatArrived) {
  auto* p = static_cast<unsigned char*>(rt_.alloc(8 * kBlock));
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], "hello", 5), 5);
  EXPECT_EQ(rt_.read(fds[0], p, 8 * kBlock), 5);
  EXPECT_EQ(std::memcmp(p, "hello", 5), 0);
  ::close(fds[1]);
  EXPECT_EQ(rt_.read(fds[0], p, 8 * kBlock), 0) << "end of file";
  ::close(fds[0]);
  rt_.free(p);
}

// read(2) returns what a pipe has: exactly one staging chunk (16 KiB here) in the pipe, or a full
// host vector before a shared one, and the call returns at once with it, as libc's does. Before, the
// next chunk's (or vector's) read waited for more, forever where the writer waits for an answer. A
// late writer unblocks a regression, which then fails on the count instead of hanging.
TEST_P(Io, AReadReturnsWhatAPipeHasWithoutWaitingForMore) {
  constexpr std::size_t kChunk = 16 << 10;
  auto* p = static_cast<unsigned char*>(rt_.alloc(4 * kChunk));
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::atomic<bool> done{false};
  std::thread late([&] {
    for (int i = 0; i < 300 && !done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!done.load()) {
      static const std::vector<unsigned char> more(4 * kChunk, 9);
      (void)::write(fds[1], more.data(), more.size());
    }
  });
  const std::vector<unsigned char> data = pattern(kChunk, 3);
  ASSERT_EQ(::write(fds[1], data.data(), kChunk), static_cast<ssize_t>(kChunk));
  EXPECT_EQ(rt_.read(fds[0], p, 4 * kChunk), static_cast<ssize_t>(kChunk)) << "one chunk in the pipe";
  EXPECT_EQ(std::memcmp(p, data.data(), kChunk), 0);
  unsigned char head[16];
  ASSERT_EQ(::write(fds[1], data.data(), sizeof head), static_cast<ssize_t>(sizeof head));
  const struct iovec v[2] = {{head, sizeof head}, {p, 100}};
  EXPECT_EQ(rt_.readv(fds[0], v, 2), static_cast<ssize_t>(sizeof head)) << "a full host vector, then nothing";
  done = true;
  late.join();
  ::close(fds[0]);
  ::close(fds[1]);
  rt_.free(p);
}

// A signal that interrupts a read waiting on an empty pipe (a handler without SA_RESTART) ends it as
// libc's ends: -1 with EINTR, no byte taken; a write interrupted after part of its bytes went out
// returns that part. The next call goes on where the last one stopped, and no byte is lost.
TEST_P(Io, ASignalEndsAWaitingReadWithEintrAndAWriteWithWhatWentOut) {
  constexpr std::size_t kBytes = 256 << 10;  // four times a pipe's 64 KiB, sixteen staging chunks
  auto* p = static_cast<unsigned char*>(rt_.alloc(kBytes));
  const std::vector<unsigned char> ref = pattern(kBytes, 21);
  std::memcpy(p, ref.data(), kBytes);
  auto* q = static_cast<unsigned char*>(rt_.alloc(kBytes));
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  struct sigaction on {
  }, old{};
  on.sa_handler = [](int) {};  // no SA_RESTART: the waiting call ends with EINTR
  ASSERT_EQ(::sigemptyset(&on.sa_mask), 0);
  ASSERT_EQ(::sigaction(SIGUSR1, &on, &old), 0);
  // Signals the calling thread every 10 ms until `call` returns (a signal before the call starts
  // waiting is only the first of several), then gives its result and errno.
  const auto interrupted = [](auto call) {
    const pthread_t self = ::pthread_self();
    std::atomic<bool> returned{false};
    std::thread kicker([&] {
      while (!returned.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (!returned.load()) ::pthread_kill(self, SIGUSR1);
      }
    });
    errno = 0;
    const ssize_t rc = call();
    const int error = errno;
    returned = true;
    kicker.join();
    return std::pair<ssize_t, int>{rc, error};
  };
  const auto [got, read_error] = interrupted([&] { return rt_.read(fds[0], q, kBytes); });
  EXPECT_EQ(got, -1) << "a read of an empty pipe returned without data";
  EXPECT_EQ(read_error, EINTR);
  // The pipe takes 64 KiB, then the write waits for a reader that never comes until the signal.
  const auto [put, write_error] = interrupted([&] { return rt_.write(fds[1], p, kBytes); });
  ASSERT_GT(put, 0) << "errno " << write_error;
  EXPECT_LT(put, static_cast<ssize_t>(kBytes)) << "the pipe took everything without a reader";
  // What went out arrives, and the rest follows from where the write stopped.
  std::thread rest([&] {
    for (auto done = static_cast<std::size_t>(put); done < kBytes;) {
      const ssize_t n = rt_.write(fds[1], p + done, kBytes - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    ::close(fds[1]);
  });
  std::size_t done = 0;
  for (ssize_t n = 0; (n = rt_.read(fds[0], q + done, kBytes - done)) > 0;)
    done += static_cast<std::size_t>(n);
  rest.join();
  EXPECT_EQ(done, kBytes);
  EXPECT_EQ(std::memcmp(q, ref.data(), kBytes), 0) << "a byte was lost or repeated around the signals";
  ASSERT_EQ(::sigaction(SIGUSR1, &old, nullptr), 0);
  ::close(fds[0]);
  rt_.free(p);
  rt_.free(q);
}

// A datagram larger than a staging chunk (16 KiB here) arrives whole: a message socket's read takes
// one message and discards what does not fit, so it is read at once, not chunk by chunk (before, the
// first chunk's read truncated it, and the next chunk's read took the next message); readv scatters
// one message over host and shared vectors as libc's does.
TEST_P(Io, ADatagramLargerThanAChunkArrivesWhole) {
  // A message larger than a staging chunk, read whole.
  constexpr std::size_t kMessage = 100 << 10;
  for (const int type : {SOCK_DGRAM, SOCK_SEQPACKET}) {
    SCOPED_TRACE(type == SOCK_DGRAM ? "datagram" : "sequenced packets");
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, type, 0, fds), 0);
    const int room = 1 << 20;
    ASSERT_EQ(::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &room, sizeof room), 0);
    const struct timeval patience { 2, 0 };  // a regression's read of an empty socket fails, not waits
    ASSERT_EQ(::setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience), 0);
    auto* p = static_cast<unsigned char*>(rt_.alloc(2 * kMessage));
    const std::vector<unsigned char> one = pattern(kMessage, 6), two = pattern(100, 8);
    ASSERT_EQ(::send(fds[1], one.data(), one.size(), 0), static_cast<ssize_t>(kMessage));
    ASSERT_EQ(::send(fds[1], two.data(), two.size(), 0), 100);
    EXPECT_EQ(rt_.read(fds[0], p, 2 * kMessage), static_cast<ssize_t>(kMessage));
    EXPECT_EQ(std::memcmp(p, one.data(), kMessage), 0);
    unsigned char head[8];
    const struct iovec v[2] = {{head, sizeof head}, {p, 2 * kMessage}};
    EXPECT_EQ(rt_.readv(fds[0], v, 2), 100) << "the second message, whole";
    EXPECT_EQ(std::memcmp(head, two.data(), sizeof head), 0);
    EXPECT_EQ(std::memcmp(p, two.data() + sizeof head, 100 - sizeof head), 0);
    ::close(fds[0]);
    ::close(fds[1]);
    rt_.free(p);
  }
}

// The write side: a message written from shared memory (or gathered by writev from shared and host
// vectors) leaves as one datagram. Before, each staging chunk, and each vector, was a message of its own.
TEST_P(Io, ADatagramWrittenFromSharedMemoryLeavesWhole) {
  constexpr std::size_t kMessage = 40 << 10;
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM, 0, fds), 0);
  auto* p = static_cast<unsigned char*>(rt_.alloc(kMessage));
  const std::vector<unsigned char> ref = pattern(kMessage, 3);
  std::memcpy(p, ref.data(), kMessage);
  EXPECT_EQ(rt_.write(fds[1], p, kMessage), static_cast<ssize_t>(kMessage));
  unsigned char head[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const struct iovec v[2] = {{head, sizeof head}, {p, kMessage}};
  EXPECT_EQ(rt_.writev(fds[1], v, 2), static_cast<ssize_t>(kMessage + sizeof head));
  std::vector<unsigned char> got(2 * kMessage);
  EXPECT_EQ(::recv(fds[0], got.data(), got.size(), MSG_DONTWAIT), static_cast<ssize_t>(kMessage));
  EXPECT_EQ(std::memcmp(got.data(), ref.data(), kMessage), 0);
  EXPECT_EQ(::recv(fds[0], got.data(), got.size(), MSG_DONTWAIT),
            static_cast<ssize_t>(kMessage + sizeof head));
  EXPECT_EQ(std::memcmp(got.data(), head, sizeof head), 0);
  EXPECT_EQ(std::memcmp(got.data() + sizeof head, ref.data(), kMessage), 0);
  EXPECT_EQ(::recv(fds[0], got.data(), got.size(), MSG_DONTWAIT), -1) << "no third message";
  // UDP sends a datagram larger than its send buffer: so does a write from shared memory (before, a
  // check of SO_SNDBUF refused it with EMSGSIZE).
  const int udp = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in loopback{};
  loopback.sin_family = AF_INET;
  loopback.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof loopback;
  if (udp >= 0 && ::bind(udp, reinterpret_cast<sockaddr*>(&loopback), sizeof loopback) == 0 &&
      ::getsockname(udp, reinterpret_cast<sockaddr*>(&loopback), &length) == 0 &&
      ::connect(udp, reinterpret_cast<sockaddr*>(&loopback), sizeof loopback) == 0) {
    const int tight = 8192;
    ASSERT_EQ(::setsockopt(udp, SOL_SOCKET, SO_SNDBUF, &tight, sizeof tight), 0);
    EXPECT_EQ(rt_.write(udp, p, 20000), 20000) << std::strerror(errno);
    EXPECT_EQ(::recv(udp, got.data(), got.size(), MSG_DONTWAIT), 20000);
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), 20000), 0);
  }
  if (udp >= 0) ::close(udp);
  // Larger than the socket takes: the kernel's EMSGSIZE, as for libc's write (hdsm does not guess).
  const int small = 4096;
  ASSERT_EQ(::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  errno = 0;
  EXPECT_EQ(rt_.write(fds[1], p, kMessage), -1);
  EXPECT_EQ(errno, EMSGSIZE);
  ::close(fds[0]);
  ::close(fds[1]);
  rt_.free(p);
}

// A write to a pipe may wait for the reader, another thread perhaps; a writer blocked there holds no
// chunk of the staging pool, which the copy engine waits for and that reader may need. Before, a
// blocked writer held two chunks for as long as its reader took.
TEST_P(Io, APipeWriterWaitingForItsReaderHoldsNoChunkOfThePool) {
  constexpr std::size_t kBytes = 512 << 10;  // well above a pipe's 64 KiB
  auto* p = static_cast<unsigned char*>(rt_.alloc(kBytes));
  const std::vector<unsigned char> ref = pattern(kBytes, 9);
  std::memcpy(p, ref.data(), kBytes);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::thread writer([&] {
    for (std::size_t done = 0; done < kBytes;) {
      const ssize_t n = rt_.write(fds[1], p + done, kBytes - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
  });
  // Wait until the pipe is full: the writer is then inside a write that waits for this thread.
  for (int i = 0, queued = 0; i < 2000 && queued < 64 << 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(::ioctl(fds[0], FIONREAD, &queued), 0);
  }
  hdsm::StagingPool& pool = hdsm::detail::impl_of(rt_).staging();
  EXPECT_EQ(pool.lease(pool.chunks(), hdsm::StagingPool::Wait::never).size(), pool.chunks())
      << "the blocked writer holds chunks of the pool";
  std::vector<unsigned char> got(kBytes);
  for (std::size_t done = 0; done < kBytes;) {
    const ssize_t n = ::read(fds[0], got.data() + done, kBytes - done);
    ASSERT_GT(n, 0);
    done += static_cast<std::size_t>(n);
  }
  writer.join();
  EXPECT_EQ(got, ref);
  ::close(fds[0]);
  ::close(fds[1]);
  rt_.free(p);
}

// readv takes its vectors as they are when it is called, as the kernel does: data landing on the
// array itself (a vector pointing at it) does not redirect the next vector. Before, the file's bytes
// made the second vector point at host memory of the file's choosing, and it was written there.
TEST_P(Io, ReadvTakesItsVectorsBeforeAnyDataLands) {
  auto* p = static_cast<unsigned char*>(rt_.alloc(kBlock));
  unsigned char victim[16] = {};
  struct iovec v[2];
  v[1] = {p, 16};
  v[0] = {&v[1], sizeof(struct iovec)};
  const struct iovec fake { victim, sizeof victim };
  std::vector<unsigned char> data(sizeof fake + 16);
  std::memcpy(data.data(), &fake, sizeof fake);
  for (std::size_t i = 0; i < 16; ++i) data[sizeof fake + i] = static_cast<unsigned char>(100 + i);
  const int fd = file_with(data);
  EXPECT_EQ(rt_.readv(fd, v, 2), static_cast<ssize_t>(data.size()));
  for (std::size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(victim[i], 0) << i;
    EXPECT_EQ(p[i], 100 + i) << i;
  }
  ::close(fd);
  rt_.free(p);
}

// writev of up to PIPE_BUF bytes to a pipe is one write, which POSIX makes atomic there: two threads'
// records do not mix. Before, each vector was a write of its own, and the other writer's went between.
TEST_P(Io, VectoredPipeWritesUpToPipeBufStayWhole) {
  constexpr int kRecords = 2000;
  constexpr std::size_t kHead = 8, kBody = 56, kRecord = kHead + kBody;
  auto* body = static_cast<unsigned char*>(rt_.alloc(2 * kBody));
  std::memset(body, 1, kBody);
  std::memset(body + kBody, 2, kBody);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::vector<unsigned char> got(2 * kRecords * kRecord);
  std::thread reader([&] {
    std::size_t at = 0;
    while (at < got.size()) {
      const ssize_t n = ::read(fds[0], got.data() + at, got.size() - at);
      if (n <= 0) break;
      at += static_cast<std::size_t>(n);
    }
  });
  std::vector<std::thread> writers;
  std::atomic<int> failed{0};
  for (int t = 0; t < 2; ++t)
    writers.emplace_back([&, t] {
      unsigned char head[kHead];
      std::memset(head, t + 1, kHead);
      const struct iovec v[2] = {{head, kHead}, {body + t * kBody, kBody}};
      for (int r = 0; r < kRecords; ++r)
        if (rt_.writev(fds[1], v, 2) != static_cast<ssize_t>(kRecord)) failed.fetch_add(1);
    });
  for (auto& w : writers) w.join();
  ::close(fds[1]);
  reader.join();
  ::close(fds[0]);
  EXPECT_EQ(failed.load(), 0);
  int mixed = 0;
  for (std::size_t r = 0; r < got.size() / kRecord; ++r) {
    const unsigned char* record = got.data() + r * kRecord;
    mixed += std::count(record, record + kRecord, record[0]) != static_cast<std::ptrdiff_t>(kRecord);
  }
  EXPECT_EQ(mixed, 0) << "records mixed with the other thread's";
  rt_.free(body);
}

// Two threads reading one datagram socket into shared memory get whole messages. Before, a read sized
// its buffer by a peek at the next message, which the other thread could take first: the next, larger
// one was then cut to the size peeked.
TEST_P(Io, TwoThreadsReadingOneDatagramSocketGetWholeMessages) {
  constexpr int kMessages = 3000;
  constexpr std::size_t kSmall = 100, kLarge = 20000;
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM, 0, fds), 0);
  const int room = 1 << 20;
  ASSERT_EQ(::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &room, sizeof room), 0);
  const struct timeval patience { 10, 0 };  // a lost end marker fails the test, not hangs it
  ASSERT_EQ(::setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience), 0);
  std::atomic<int> cut{0}, whole{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t)
    readers.emplace_back([&] {
      auto* p = static_cast<unsigned char*>(rt_.alloc(kLarge + kBlock));
      for (;;) {
        const ssize_t n = rt_.read(fds[0], p, kLarge + kBlock);
        if (n <= 1) break;  // the end marker (or a timeout)
        (n == static_cast<ssize_t>(kSmall) || n == static_cast<ssize_t>(kLarge) ? whole : cut).fetch_add(1);
      }
      rt_.free(p);
    });
  const std::vector<unsigned char> small = pattern(kSmall, 1), large = pattern(kLarge, 2);
  for (int m = 0; m < kMessages; ++m) {
    const auto& message = m % 2 == 0 ? small : large;
    ASSERT_EQ(::send(fds[1], message.data(), message.size(), 0), static_cast<ssize_t>(message.size()));
  }
  const unsigned char end = 0;
  for (int t = 0; t < 2; ++t) ASSERT_EQ(::send(fds[1], &end, 1, 0), 1);
  for (auto& r : readers) r.join();
  EXPECT_EQ(cut.load(), 0) << "messages cut short";
  EXPECT_EQ(whole.load(), kMessages);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_P(Io, ErrorsAreLibcs) {
  auto* p = static_cast<unsigned char*>(rt_.alloc(kBlock + 10));
  std::memset(p, 6, kBlock + 10);
  const std::vector<unsigned char> data = pattern(3 * kBlock, 1);
  const int fd = file_with(data);
  // A closed descriptor.
  const int closed = ::dup(fd);
  ::close(closed);
  errno = 0;
  EXPECT_EQ(rt_.read(closed, p, 100), -1);
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(rt_.write(closed, p, 100), -1);
  EXPECT_EQ(errno, EBADF);
  // A range leaving the object: EFAULT, and neither the file offset nor the object moved.
  errno = 0;
  EXPECT_EQ(rt_.read(fd, p + kBlock, 100), -1);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(::lseek(fd, 0, SEEK_CUR), 0);
  for (std::size_t i = 0; i < kBlock + 10; ++i) ASSERT_EQ(p[i], 6) << "byte " << i;
  errno = 0;
  EXPECT_EQ(rt_.write(fd, p + 5, kBlock + 10), -1);
  EXPECT_EQ(errno, EFAULT);
  // A freed object.
  auto* q = static_cast<unsigned char*>(rt_.alloc(kBlock));
  rt_.free(q);
  errno = 0;
  EXPECT_EQ(rt_.read(fd, q, 10), -1);
  EXPECT_EQ(errno, EFAULT);
  // Host memory the user made read-only: the kernel's EFAULT, as with libc.
  void* ro = ::mmap(nullptr, kBlock, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  errno = 0;
  EXPECT_EQ(rt_.read(fd, ro, 10), -1);
  EXPECT_EQ(errno, EFAULT);
  ::munmap(ro, kBlock);
  // Writing to a descriptor opened read-only.
  const int rd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(rd, 0);
  errno = 0;
  EXPECT_EQ(rt_.write(rd, p, 10), -1);
  EXPECT_EQ(errno, EBADF);
  ::close(rd);
  ::close(fd);
  rt_.free(p);
}

TEST_P(Io, FreadAndFwriteCountWholeItems) {
  auto* p = static_cast<unsigned char*>(rt_.alloc(20 * kBlock));
  const std::vector<unsigned char> data = pattern(10 * kBlock + 6, 2);
  std::FILE* in = ::fdopen(file_with(data), "rb");
  ASSERT_NE(in, nullptr);
  EXPECT_EQ(rt_.fread(p, 8, 20 * kBlock / 8, in), (10 * kBlock + 6) / 8) << "whole items up to EOF";
  EXPECT_TRUE(std::feof(in));
  EXPECT_EQ(std::memcmp(p, data.data(), data.size()), 0) << "the partial item's bytes arrive too";
  std::fclose(in);
  const int fd = ::memfd_create("hdsm io fwrite", MFD_CLOEXEC);
  std::FILE* out = ::fdopen(fd, "wb");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(rt_.fwrite(p + 2, 4, 1000, out), 1000u);
  ASSERT_EQ(std::fflush(out), 0);
  EXPECT_EQ(contents(fd), std::vector<unsigned char>(data.begin() + 2, data.begin() + 4002));
  std::fclose(out);
  // A stream with no descriptor (fmemopen): the data arrives and errno is left as it was.
  char text[] = "from a memory stream";
  std::FILE* mem = ::fmemopen(text, sizeof text, "rb");
  ASSERT_NE(mem, nullptr);
  errno = 0;
  EXPECT_EQ(rt_.fread(p + 1, 1, sizeof text, mem), sizeof text);
  EXPECT_EQ(errno, 0) << "a successful fread set errno";
  EXPECT_EQ(std::memcmp(p + 1, text, sizeof text), 0);
  std::fclose(mem);
  // Overflowing size * count.
  errno = 0;
  EXPECT_EQ(rt_.fread(p, SIZE_MAX / 2, 4, stdin), 0u);
  EXPECT_EQ(errno, EOVERFLOW);
  rt_.free(p);
}

// Records of several staging chunks from two threads at once, each thread's records filled with its
// own bytes: libc keeps each call's bytes together on an O_APPEND file (write, writev) and on a stdio
// stream (fwrite); before, each chunk was a call of its own and the threads' chunks interleaved.
TEST_P(Io, AppendsAndStreamWritesOfTwoThreadsKeepEachCallWhole) {
  constexpr std::size_t kRecord = 256 * 1024, kRecords = 8;  // 16 chunks a record
  auto* a = static_cast<unsigned char*>(rt_.alloc(kRecord));
  auto* b = static_cast<unsigned char*>(rt_.alloc(kRecord));
  std::memset(a, 'a', kRecord);
  std::memset(b, 'b', kRecord);
  const auto whole_records = [&](const std::vector<unsigned char>& file, const char* how) {
    ASSERT_EQ(file.size(), 2 * kRecords * kRecord) << how;
    for (std::size_t r = 0; r < 2 * kRecords; ++r) {
      const unsigned char first = file[r * kRecord];
      const auto end = file.begin() + static_cast<std::ptrdiff_t>((r + 1) * kRecord);
      const auto other = std::find_if(file.begin() + static_cast<std::ptrdiff_t>(r * kRecord), end,
                                      [&](unsigned char c) { return c != first; });
      EXPECT_EQ(other, end) << how << ": record " << r << " is torn";
    }
  };
  for (const bool vectored : {false, true}) {
    const int fd = ::memfd_create("hdsm io append", MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::fcntl(fd, F_SETFL, O_APPEND), 0);
    const auto writer = [&](unsigned char* p) {
      for (std::size_t r = 0; r < kRecords; ++r) {
        const iovec v[2] = {{p, kRecord / 2}, {p + kRecord / 2, kRecord / 2}};
        EXPECT_EQ(vectored ? rt_.writev(fd, v, 2) : rt_.write(fd, p, kRecord), static_cast<ssize_t>(kRecord));
      }
    };
    std::thread other(writer, b);
    writer(a);
    other.join();
    whole_records(contents(fd), vectored ? "writev, O_APPEND" : "write, O_APPEND");
    ::close(fd);
  }
  const int fd = ::memfd_create("hdsm io fwrite threads", MFD_CLOEXEC);
  std::FILE* out = ::fdopen(::dup(fd), "wb");
  ASSERT_NE(out, nullptr);
  const auto writer = [&](unsigned char* p) {
    for (std::size_t r = 0; r < kRecords; ++r) EXPECT_EQ(rt_.fwrite(p, kRecord, 1, out), 1u);
  };
  std::thread other(writer, b);
  writer(a);
  other.join();
  ASSERT_EQ(std::fclose(out), 0);
  whole_records(contents(fd), "fwrite");
  // And back through one stream: each fread gets one record whole.
  ASSERT_EQ(::lseek(fd, 0, SEEK_SET), 0);  // the writing stream's descriptor shared the offset
  std::FILE* in = ::fdopen(::dup(fd), "rb");
  ASSERT_NE(in, nullptr);
  const auto reader = [&](unsigned char* p) {
    for (std::size_t r = 0; r < kRecords; ++r) {
      ASSERT_EQ(rt_.fread(p, kRecord, 1, in), 1u);
      const unsigned char first = p[0];
      EXPECT_EQ(std::count(p, p + kRecord, first), static_cast<std::ptrdiff_t>(kRecord))
          << "fread " << r << " is torn";
    }
  };
  std::thread other_reader(reader, b);
  reader(a);
  other_reader.join();
  std::fclose(in);
  ::close(fd);
  rt_.free(a);
  rt_.free(b);
}

INSTANTIATE_TEST_SUITE_P(Protocols, Io, ::testing::Values("batch", "lazy", "rolling"),
                         [](const auto& info) { return std::string(info.param); });

TEST(IoStaging, APoolWithoutAChunkOrAboveMemoryIsAConfigError) {
  // Below the smallest chunk: refused by the configuration itself; below its own chunk: when the
  // runtime starts, naming both knobs.
  for (const char* bytes : {"0", "1KiB"})
    EXPECT_THROW(hdsm::test::fast_sim_config().set("HDSM_STAGING_BYTES", bytes), hdsm::ConfigError) << bytes;
  try {
    hdsm::Runtime rt(
        hdsm::test::fast_sim_config().set("HDSM_STAGING_BYTES", "1MiB").set("HDSM_STAGING_CHUNK", "2MiB"));
    ADD_FAILURE() << "a pool smaller than its chunk was accepted";
  } catch (const hdsm::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("HDSM_STAGING_CHUNK"), std::string::npos) << e.what();
  }
  // Above the machine's memory: at the first I/O, which allocates the pool.
  for (const char* bytes : {"1TiB"}) {
    hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_STAGING_BYTES", bytes));
    void* p = rt.alloc(kBlock);
    const int fd = file_with(pattern(100, 0));
    try {
      (void)rt.read(fd, p, 100);
      ADD_FAILURE() << "HDSM_STAGING_BYTES=" << bytes << " was accepted";
    } catch (const hdsm::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("HDSM_STAGING_BYTES"), std::string::npos) << e.what();
    }
    ::close(fd);
    rt.free(p);
  }
}

// Writers that block on full pipes hold their staging chunks (the pool's four here) while their
// readers need chunks to read: the readers stage through memory of their own instead of waiting for
// the pool, and every byte arrives (before, they waited forever). A watchdog ends a regression.
TEST_P(Io, PipeWritersHoldingThePoolDoNotStarveTheirReaders) {
  constexpr int kPairs = 2;
  constexpr std::size_t kBytes = 512 << 10;  // well above a pipe's 64 KiB
  std::atomic<bool> finished{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 2000 && !finished.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!finished.load()) {
      std::fprintf(stderr, "pipe readers still waiting after 20 s: the staging pool starved them\n");
      std::_Exit(1);
    }
  });
  const std::vector<unsigned char> ref = pattern(kBytes, 4);
  std::vector<std::thread> threads;
  std::vector<unsigned char*> in(kPairs), out(kPairs);
  std::vector<std::array<int, 2>> pipes(kPairs);
  for (int i = 0; i < kPairs; ++i) {
    in[i] = static_cast<unsigned char*>(rt_.alloc(kBytes));
    out[i] = static_cast<unsigned char*>(rt_.alloc(kBytes));
    std::memcpy(in[i], ref.data(), kBytes);
    ASSERT_EQ(::pipe(pipes[i].data()), 0);
  }
  for (int i = 0; i < kPairs; ++i) {
    threads.emplace_back([&, i] {
      for (std::size_t done = 0; done < kBytes;) {
        const ssize_t n = rt_.write(pipes[i][1], in[i] + done, kBytes - done);
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
      }
    });
    threads.emplace_back([&, i] {
      for (std::size_t done = 0; done < kBytes;) {
        const ssize_t n = rt_.read(pipes[i][0], out[i] + done, kBytes - done);
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
      }
    });
  }
  for (auto& t : threads) t.join();
  finished = true;
  watchdog.join();
  for (int i = 0; i < kPairs; ++i) {
    EXPECT_EQ(std::memcmp(out[i], ref.data(), kBytes), 0) << "pair " << i;
    ::close(pipes[i][0]);
    ::close(pipes[i][1]);
    rt_.free(in[i]);
    rt_.free(out[i]);
  }
}

TEST(IoCApi, ReadAndWriteOnTheDefaultRuntime) {
  // A fresh process, whose default runtime is not made yet (a fork of this one may have it).
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_EXIT(
      {
        bool ok = hdsm_config_set("HDSM_SIM_MEMORY", "32MiB") == HDSM_SUCCESS;
        ok &= hdsm_config_set("HDSM_ARENA_SEGMENT", "1GiB") == HDSM_SUCCESS;
        void* p = nullptr;
        ok &= hdsm_alloc(3 * kBlock, -1, &p) == HDSM_SUCCESS;
        const std::vector<unsigned char> data = pattern(3 * kBlock, 8);
        const int fd = file_with(data);
        ok &= hdsm_read(fd, p, 3 * kBlock) == static_cast<ssize_t>(3 * kBlock);
        ok &= std::memcmp(p, data.data(), data.size()) == 0;
        ok &= hdsm_pwrite(fd, p, 10, 3 * kBlock) == 10;
        errno = 0;
        ok &= hdsm_read(fd, static_cast<char*>(p) + 3 * kBlock - 1, 2) == -1 && errno == EFAULT;
        ok &= hdsm_free(p) == HDSM_SUCCESS;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// Host buffers go straight to libc, as hdsm.h says, without the default runtime: here it cannot be
// made (an unknown setting), and before, every call failed with EIO.
bool host_io_without_a_runtime() {
  ::setenv("HDSM_NO_SUCH_SETTING", "1", 1);
  bool ok = hdsm_sync() != HDSM_SUCCESS;  // the default runtime cannot be made
  const std::vector<unsigned char> data = pattern(64, 3);
  const int fd = file_with(data);
  unsigned char buf[64] = {};
  ok &= hdsm_read(fd, buf, 16) == 16;
  ok &= hdsm_pread(fd, buf + 16, 48, 16) == 48;
  ok &= std::memcmp(buf, data.data(), sizeof buf) == 0;
  const struct iovec v { buf, 8 };
  ok &= hdsm_writev(fd, &v, 1) == 8 && hdsm_pwrite(fd, buf, 4, 60) == 4;
  ok &= hdsm_pwritev(fd, &v, 1, 40) == 8 && hdsm_preadv(fd, &v, 1, 40) == 8;
  std::FILE* stream = ::fdopen(fd, "r+");
  ok &= stream != nullptr && std::fseek(stream, 0, SEEK_SET) == 0;
  ok &= hdsm_fread(buf, 8, 2, stream) == 2 && std::memcmp(buf, data.data(), 16) == 0;
  return ok;
}

TEST(IoCApi, HostBuffersNeedNoRuntime) {
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_EXIT(std::exit(host_io_without_a_runtime() ? 0 : 1), ::testing::ExitedWithCode(0), "");
}

}  // namespace

namespace {

// Eight threads, each with objects of its own and one object they all read, mixing CPU accesses
// (faults), bulk memory, file I/O (half of it through the interposed libc calls) and kernel calls
// with syncs, checked against plain memory after every step (TSan in CI).
// Threads alternate between the two sim devices, so their kernel calls, syncs and transfers overlap
// on each device and across both.
TEST(IoThreads, EightThreadsMixFaultsBulkMemoryIoAndKernelCalls) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config("rolling", "4KiB")
                       .set("HDSM_STAGING_BYTES", "128KiB")
                       .set("HDSM_STAGING_CHUNK", "16KiB"));
  constexpr std::size_t kCommon = 16 * kBlock, kOwn = 12 * kBlock;
  auto* common = static_cast<unsigned char*>(rt.alloc(kCommon));
  const std::vector<unsigned char> common_ref = pattern(kCommon, 77);
  rt.memcpy(common, common_ref.data(), kCommon);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (unsigned t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      auto* own = static_cast<unsigned char*>(rt.alloc(kOwn, static_cast<int>(t % rt.devices().size())));
      std::vector<unsigned char> ref(kOwn, 0);
      const int fd = ::memfd_create("hdsm io thread", MFD_CLOEXEC);
      std::vector<unsigned char> file(kOwn, 0);
      if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(kOwn)) != 0) ++failures;
      for (int step = 0; step < 60 && failures == 0; ++step) {
        const std::size_t at = rng() % kOwn, n = 1 + rng() % (kOwn - at);
        switch (rng() % 7) {
          case 0:  // CPU write: faults
            for (std::size_t i = at; i < at + n; i += 97) own[i] = ref[i] = static_cast<unsigned char>(rng());
            break;
          case 1: {
            const int v = static_cast<int>(rng() % 256);
            rt.memset(own + at, v, n);
            std::memset(ref.data() + at, v, n);
            break;
          }
          case 2:  // own -> file; every other time through the interposed libc call
            if ((step % 2 == 0
                     ? rt.pwrite(fd, own + at, n, static_cast<off_t>(at))
                     : ::pwrite(fd, own + at, n, static_cast<off_t>(at))) != static_cast<ssize_t>(n))
              ++failures;
            std::memcpy(file.data() + at, ref.data() + at, n);
            break;
          case 3:  // file -> own
            if ((step % 2 == 0 ? rt.pread(fd, own + at, n, static_cast<off_t>(at))
                               : ::pread(fd, own + at, n, static_cast<off_t>(at))) != static_cast<ssize_t>(n))
              ++failures;
            std::memcpy(ref.data() + at, file.data() + at, n);
            break;
          case 4: {  // a kernel rewrites part of the thread's object; the thread waits for it
            const int v = static_cast<int>(rng() % 200);
            rt.call(fill_kernel(), hdsm::cover(n), hdsm::inout(own + at), std::uint64_t{n}, v);
            rt.sync();
            for (std::size_t i = 0; i < n; ++i) ref[at + i] = static_cast<unsigned char>(v + i % 7);
            break;
          }
          case 5: {  // the common object, read by everyone with a bulk copy and by the CPU
            const std::size_t c = rng() % (kCommon - 64);
            std::vector<unsigned char> got(64);
            rt.memcpy(got.data(), common + c, 64);
            if (std::memcmp(got.data(), common_ref.data() + c, 64) != 0 || common[c] != common_ref[c])
              ++failures;
            break;
          }
          default: {
            std::vector<unsigned char> got(n);
            rt.memcpy(got.data(), own + at, n);
            if (std::memcmp(got.data(), ref.data() + at, n) != 0) ++failures;
          }
        }
        if (std::memcmp(own, ref.data(), kOwn) != 0) ++failures;
      }
      ::close(fd);
      rt.free(own);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  rt.free(common);
}

}  // namespace
