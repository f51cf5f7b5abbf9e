// I/O on shared objects (seed 000 §4.4, seed 003 §5.4): read, write, pread, pwrite, readv, writev,
// fread and fwrite with a buffer in shared memory. A system call never sees the user view (a fault
// inside the kernel's copy would end the call with EFAULT after part of the data moved); the data
// goes through chunks of the pinned staging pool instead, and the memory model's copy places each
// chunk (the ADSM model: by block state, straight into the device copy where the host copy is
// invalid). Memory the model does not mediate (host memory, unified memory) goes straight to libc. Two
// chunks, when the pool has them free, overlap the device transfer of one chunk with the file transfer of the
// other.
#include <hdsm/error.hpp>
#include <hdsm/runtime.hpp>

#include "runtime/knobs.hpp"
#include "runtime/runtime_impl.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace hdsm {
namespace detail {

StagingPool& RuntimeImpl::staging() {
  return pools->get("staging", config.size(knob_name(Knob::staging_bytes)),
                    config.size(knob_name(Knob::staging_chunk)),
                    {"HDSM_STAGING_BYTES", "HDSM_STAGING_CHUNK"});
}

}  // namespace detail

namespace {

/// Two staging chunks where the pool has them free: the device side of one chunk overlaps the file
/// side of the other.
constexpr std::size_t kIoDepth = 2;

/// The memory model when it mediates the host's access to `p` (a shared object of the ADSM model),
/// nullptr for memory libc may touch directly (host memory, unified memory).
detail::MemoryModel* shared(detail::RuntimeImpl& impl, const void* p) {
  return impl.model->mediates(p) ? impl.model.get() : nullptr;
}

/// EFAULT, as the kernel gives for a buffer outside the process's memory, unless the range lies in
/// live shared objects.
bool range_ok(detail::MemoryModel& model, const void* p, std::size_t n, const char* call) {
  try {
    model.check(p, n, call);
    return true;
  } catch (const InvalidArgument&) {
    errno = EFAULT;
    return false;
  }
}

/// Whether a read of `fd` after one that returned data may go on: always for a regular file or a
/// block device, which never make a read wait; for a pipe, a socket or a terminal only while data is
/// there now. read(2) returns what is there: the next chunk's read must not wait for more (it would
/// wait forever where the writer waits for this reader's answer).
bool more_now(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))) return true;
  struct pollfd p {
    fd, POLLIN, 0
  };
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

/// Whether `fd` is a socket that keeps message boundaries (datagram, sequenced packets): one read
/// takes one message whole and discards what does not fit, so a message must never be read in chunks.
bool keeps_messages(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  int type = 0;
  socklen_t length = sizeof type;
  return ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) == 0 && type != SOCK_STREAM;
}

/// One read of a message socket into `parts` (shared memory or host memory, in order): through one
/// pageable buffer of their whole size, then copied out, as readv would scatter it.
ssize_t read_message(detail::RuntimeImpl& impl, int fd, std::span<const struct iovec> parts) {
  std::size_t total = 0;
  for (const struct iovec& v : parts) {
    if (v.iov_len > SIZE_MAX - total) {
      errno = EINVAL;
      return -1;
    }
    total += v.iov_len;
  }
  // No message is larger than a socket's buffer (net.core.rmem_max, a few MiB): a larger read
  // buffer would only be memory.
  constexpr std::size_t kLargestMessage = std::size_t{64} << 20;
  const std::size_t take = std::min(total, kLargestMessage);
  const auto buffer = std::make_unique_for_overwrite<std::byte[]>(take);
  const ssize_t got = ::read(fd, buffer.get(), take);
  if (got <= 0) return got;
  std::size_t at = 0;
  for (const struct iovec& v : parts) {
    const std::size_t n = std::min(v.iov_len, static_cast<std::size_t>(got) - at);
    if (n == 0) break;
    if (detail::MemoryModel* space = shared(impl, v.iov_base))
      space->copy(v.iov_base, buffer.get() + at, n, nullptr);
    else
      std::memcpy(v.iov_base, buffer.get() + at, n);
    at += n;
  }
  return got;
}

/// File to shared memory. `transfer(chunk, bytes, done)` reads up to `bytes` of the file into the
/// chunk (`done` bytes are already in) and returns the count, 0 at the end or -1 with errno.
/// `read_fd`: the descriptor of a read(2), whose later chunks are read only while more_now says so
/// (-1: pread and fread, which wait for every byte as they would without hdsm).
template <class Transfer>
ssize_t into_shared(detail::RuntimeImpl& impl, detail::MemoryModel& space, void* dst, std::size_t n,
                    Transfer&& transfer, int read_fd = -1) {
  StagingRing buffers(impl.staging(), kIoDepth);
  auto* out = static_cast<std::byte*>(dst);
  std::size_t done = 0;
  int error = 0;
  for (std::size_t i = 0; done < n; ++i) {
    if (done != 0 && read_fd >= 0 && !more_now(read_fd)) break;
    buffers.settle(i);  // the device no longer reads this chunk
    const std::size_t want = std::min(n - done, buffers.chunk());
    const ssize_t got = transfer(buffers.data(i), want, done);
    if (got < 0) error = errno;
    if (got <= 0) break;
    space.copy(out + done, buffers.data(i), static_cast<std::size_t>(got), &buffers.pending(i));
    done += static_cast<std::size_t>(got);
    if (static_cast<std::size_t>(got) < want) break;  // short: end of file, or what a pipe had
  }
  for (std::size_t i = 0; i < buffers.count(); ++i) buffers.settle(i);
  if (done == 0 && error != 0) {
    errno = error;
    return -1;
  }
  return static_cast<ssize_t>(done);
}

/// Shared memory to a file. `transfer(chunk, bytes, done)` writes the chunk and returns the count
/// written or -1 with errno. Chunk i + 1 is staged while chunk i is written.
template <class Transfer>
ssize_t from_shared(detail::RuntimeImpl& impl, detail::MemoryModel& space, const void* src, std::size_t n,
                    Transfer&& transfer) {
  StagingRing buffers(impl.staging(), kIoDepth);
  const auto* in = static_cast<const std::byte*>(src);
  const auto stage = [&](std::size_t i, std::size_t at) {
    space.copy(buffers.data(i), in + at, std::min(n - at, buffers.chunk()), &buffers.pending(i));
  };
  std::size_t done = 0;
  int error = 0;
  stage(0, 0);
  for (std::size_t i = 0; done < n; ++i) {
    const std::size_t want = std::min(n - done, buffers.chunk());
    buffers.settle(i);
    if (buffers.count() > 1 && done + want < n) stage(i + 1, done + want);
    const ssize_t put = transfer(buffers.data(i), want, done);
    if (put < 0) error = errno;
    if (put <= 0) break;
    done += static_cast<std::size_t>(put);
    if (static_cast<std::size_t>(put) < want) break;  // short write: report what went out
    if (buffers.count() == 1 && done < n) stage(i + 1, done);
  }
  for (std::size_t i = 0; i < buffers.count(); ++i) buffers.settle(i);
  if (done == 0 && error != 0) {
    errno = error;
    return -1;
  }
  return static_cast<ssize_t>(done);
}

/// size * count, or nullopt (errno EOVERFLOW) when it does not fit.
bool item_bytes(std::size_t size, std::size_t count, std::size_t& bytes) {
  if (size != 0 && count > SIZE_MAX / size) {
    errno = EOVERFLOW;
    return false;
  }
  bytes = size * count;
  return true;
}

}  // namespace

ssize_t Runtime::read(int fd, void* buf, std::size_t n) {
  detail::MemoryModel* space = shared(*impl_, buf);
  if (space == nullptr || n == 0) return ::read(fd, buf, n);
  if (!range_ok(*space, buf, n, "read")) return -1;
  if (keeps_messages(fd)) {
    const struct iovec whole { buf, n };
    return read_message(*impl_, fd, {&whole, 1});
  }
  return into_shared(
      *impl_, *space, buf, n,
      [fd](std::byte* chunk, std::size_t bytes, std::size_t) { return ::read(fd, chunk, bytes); }, fd);
}

ssize_t Runtime::pread(int fd, void* buf, std::size_t n, off_t offset) {
  detail::MemoryModel* space = shared(*impl_, buf);
  if (space == nullptr || n == 0) return ::pread(fd, buf, n, offset);
  if (!range_ok(*space, buf, n, "pread")) return -1;
  return into_shared(*impl_, *space, buf, n,
                     [fd, offset](std::byte* chunk, std::size_t bytes, std::size_t done) {
                       return ::pread(fd, chunk, bytes, offset + static_cast<off_t>(done));
                     });
}

ssize_t Runtime::write(int fd, const void* buf, std::size_t n) {
  detail::MemoryModel* space = shared(*impl_, buf);
  if (space == nullptr || n == 0) return ::write(fd, buf, n);
  if (!range_ok(*space, buf, n, "write")) return -1;
  return from_shared(*impl_, *space, buf, n, [fd](const std::byte* chunk, std::size_t bytes, std::size_t) {
    return ::write(fd, chunk, bytes);
  });
}

ssize_t Runtime::pwrite(int fd, const void* buf, std::size_t n, off_t offset) {
  detail::MemoryModel* space = shared(*impl_, buf);
  if (space == nullptr || n == 0) return ::pwrite(fd, buf, n, offset);
  if (!range_ok(*space, buf, n, "pwrite")) return -1;
  return from_shared(*impl_, *space, buf, n,
                     [fd, offset](const std::byte* chunk, std::size_t bytes, std::size_t done) {
                       return ::pwrite(fd, chunk, bytes, offset + static_cast<off_t>(done));
                     });
}

namespace {

/// readv/writev with at least one shared vector: the vectors in order, each through `one` (a read or
/// write of the runtime), stopping at the first short one, and for readv (`read_fd` >= 0) where the
/// next vector's read would wait (more_now). `plain` is libc's call for host memory.
template <class Plain, class One>
ssize_t vectored(detail::RuntimeImpl& impl, const struct iovec* iov, int count, const char* call,
                 Plain&& plain, One&& one, int read_fd = -1) {
  bool any_shared = false;
  for (int i = 0; i < count && iov != nullptr; ++i) any_shared |= shared(impl, iov[i].iov_base) != nullptr;
  if (!any_shared) return plain();
  for (int i = 0; i < count; ++i) {
    detail::MemoryModel* space = shared(impl, iov[i].iov_base);
    if (space != nullptr && iov[i].iov_len != 0 && !range_ok(*space, iov[i].iov_base, iov[i].iov_len, call))
      return -1;
  }
  std::size_t done = 0;
  for (int i = 0; i < count; ++i) {
    if (done != 0 && read_fd >= 0 && iov[i].iov_len != 0 && !more_now(read_fd)) break;
    const ssize_t moved = one(iov[i]);
    if (moved < 0) return done == 0 ? -1 : static_cast<ssize_t>(done);
    done += static_cast<std::size_t>(moved);
    if (static_cast<std::size_t>(moved) < iov[i].iov_len) break;
  }
  return static_cast<ssize_t>(done);
}

}  // namespace

ssize_t Runtime::readv(int fd, const struct iovec* iov, int count) {
  // A message socket's message goes whole into the vectors, by one read (per vector, all but the
  // first vector's part of it would be lost).
  if (iov != nullptr && count > 0 && keeps_messages(fd)) {
    bool any_shared = false;
    for (int i = 0; i < count; ++i) {
      detail::MemoryModel* space = shared(*impl_, iov[i].iov_base);
      if (space != nullptr && iov[i].iov_len != 0 &&
          !range_ok(*space, iov[i].iov_base, iov[i].iov_len, "readv"))
        return -1;
      any_shared |= space != nullptr;
    }
    if (any_shared) return read_message(*impl_, fd, {iov, static_cast<std::size_t>(count)});
  }
  return vectored(
      *impl_, iov, count, "readv", [&] { return ::readv(fd, iov, count); },
      [&](const struct iovec& v) { return read(fd, v.iov_base, v.iov_len); }, fd);
}

ssize_t Runtime::writev(int fd, const struct iovec* iov, int count) {
  return vectored(
      *impl_, iov, count, "writev", [&] { return ::writev(fd, iov, count); },
      [&](const struct iovec& v) { return write(fd, v.iov_base, v.iov_len); });
}

std::size_t Runtime::fread(void* buf, std::size_t size, std::size_t count, std::FILE* stream) {
  detail::MemoryModel* space = shared(*impl_, buf);
  if (space == nullptr) return std::fread(buf, size, count, stream);
  std::size_t n = 0;
  if (!item_bytes(size, count, n) || n == 0) return 0;
  if (!range_ok(*space, buf, n, "fread")) return 0;
  const ssize_t done = into_shared(*impl_, *space, buf, n,
                                   [stream](std::byte* chunk, std::size_t bytes, std::size_t) -> ssize_t {
                                     const std::size_t got = std::fread(chunk, 1, bytes, stream);
                                     return got == 0 && std::ferror(stream) ? -1 : static_cast<ssize_t>(got);
                                   });
  return done <= 0 ? 0 : static_cast<std::size_t>(done) / size;
}

std::size_t Runtime::fwrite(const void* buf, std::size_t size, std::size_t count, std::FILE* stream) {
  detail::MemoryModel* space = shared(*impl_, buf);
  if (space == nullptr) return std::fwrite(buf, size, count, stream);
  std::size_t n = 0;
  if (!item_bytes(size, count, n) || n == 0) return 0;
  if (!range_ok(*space, buf, n, "fwrite")) return 0;
  const ssize_t done = from_shared(
      *impl_, *space, buf, n, [stream](const std::byte* chunk, std::size_t bytes, std::size_t) -> ssize_t {
        const std::size_t put = std::fwrite(chunk, 1, bytes, stream);
        return put == 0 && std::ferror(stream) ? -1 : static_cast<ssize_t>(put);
      });
  return done <= 0 ? 0 : static_cast<std::size_t>(done) / size;
}

}  // namespace hdsm
