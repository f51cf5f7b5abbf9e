// I/O on shared objects (seed 000 §4.4, seed 003 §5.4): read, write, pread, pwrite, readv, writev,
// preadv, pwritev (and their v2 forms), fread, fwrite and the socket calls with a buffer in shared memory. A
// system call never sees the user view (a fault inside the kernel's copy would end the call with EFAULT after
// part of the data moved); the data goes through chunks of the pinned staging pool instead, and the memory
// model's copy places each chunk (the ADSM model: by block state, straight into the device copy where the
// host copy is invalid). Memory the model does not mediate goes to libc: host memory at once, host-mapped and
// unified objects once the calls that use them are done (before_direct_io). Two chunks, when the pool has
// them free, overlap the device transfer of one chunk with the file transfer of the other. Pipes, sockets and
// terminals, whose calls may wait for another thread, stage through pageable memory instead, and a message
// socket's message moves whole, by one call.
#include <hdsm/error.hpp>
#include <hdsm/runtime.hpp>

#include "runtime/direct_objects.hpp"
#include "runtime/knobs.hpp"
#include "runtime/runtime_impl.hpp"
#include "runtime/shared_ranges.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include <fcntl.h>
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

/// Before libc's call on memory no model mediates: where it is a host-mapped or unified object, the
/// calls in flight that use it are waited for, as a copy waits (EFAULT for a range that leaves the
/// object, as for a mediated one).
bool direct_ready(detail::RuntimeImpl& impl, const void* p, std::size_t n, const char* call) {
  if (n == 0) return true;
  try {
    // In another runtime's host-mapped or unified object: that runtime's model checks the range and
    // orders the I/O after its calls (this one would refuse the range as another runtime's).
    const Runtime* other = detail::direct_objects().other_owner(p, n, impl.self);
    (other != nullptr ? *detail::impl_of(*other).model : *impl.model).before_direct_io(p, n, call);
    return true;
  } catch (const InvalidArgument&) {
    errno = EFAULT;
    return false;
  }
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

/// What the system calls on a descriptor may do, found once per call with a shared buffer.
enum class Descriptor {
  file,      // a regular file or a block device: never waits for another thread
  append,    // a regular file opened O_APPEND: a file whose one write(2) lands whole at its end
  stream,    // a pipe, a stream socket, a terminal...: may wait for its peer, another thread perhaps
  messages,  // a socket that keeps message boundaries (datagram, sequenced packets): one call, one message
};

Descriptor classify(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISBLK(st.st_mode))
    return Descriptor::file;  // a bad descriptor: the call itself fails with libc's errno
  if (S_ISREG(st.st_mode)) {
    const int flags = ::fcntl(fd, F_GETFL);
    return flags >= 0 && (flags & O_APPEND) != 0 ? Descriptor::append : Descriptor::file;
  }
  int type = 0;
  socklen_t length = sizeof type;
  if (S_ISSOCK(st.st_mode) && ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) == 0 &&
      type != SOCK_STREAM)
    return Descriptor::messages;
  return Descriptor::stream;
}

/// Whether calls on `kind` may wait for another thread (a pipe's peer): their staging then holds no
/// chunk of the pool.
bool may_wait(Descriptor kind) { return kind == Descriptor::stream || kind == Descriptor::messages; }

/// Whether a stream's read after one that returned data may go on: only while data is there now.
/// read(2) returns what is there: the next chunk's read must not wait for more (it would wait
/// forever where the writer waits for this reader's answer).
bool has_data(int fd) {
  struct pollfd p {
    fd, POLLIN, 0
  };
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

/// The bytes of `parts`, or nullopt (errno EINVAL, as readv's) when their sum overflows.
std::optional<std::size_t> total_of(std::span<const struct iovec> parts) {
  std::size_t total = 0;
  for (const struct iovec& v : parts) {
    if (v.iov_len > SIZE_MAX - total) {
      errno = EINVAL;
      return std::nullopt;
    }
    total += v.iov_len;
  }
  return total;
}

/// The largest message hdsm stages whole (a socket's buffer holds far less: net.core.*mem_max).
constexpr std::size_t kLargestMessage = std::size_t{64} << 20;

/// The runtime other than `impl`'s that owns `p`, or nullptr.
Runtime* other_runtime(const detail::RuntimeImpl& impl, const void* p) {
  Runtime* owner = detail::shared_ranges.owner(p);
  return owner != impl.self ? owner : nullptr;
}

/// Copies `n` bytes between `buffer` and `parts` (shared memory or host memory, in order), starting
/// `at` bytes into them: into the parts as readv scatters (`to_parts`), or out of them as writev
/// gathers. A part in another runtime's objects is that runtime's to copy.
void exchange(detail::RuntimeImpl& impl, std::span<const struct iovec> parts, std::size_t at,
              std::byte* buffer, std::size_t n, bool to_parts) {
  for (const struct iovec& v : parts) {
    if (n == 0) break;
    if (at >= v.iov_len) {
      at -= v.iov_len;
      continue;
    }
    const std::size_t take = std::min(v.iov_len - at, n);
    std::byte* part = static_cast<std::byte*>(v.iov_base) + at;
    void* to = to_parts ? static_cast<void*>(part) : buffer;
    const void* from = to_parts ? static_cast<const void*>(buffer) : part;
    if (detail::MemoryModel* space = shared(impl, v.iov_base))
      space->copy(to, from, take, nullptr);
    else if (Runtime* other = other_runtime(impl, v.iov_base))
      other->memcpy(to, from, take);
    else
      std::memcpy(to, from, take);
    buffer += take;
    n -= take;
    at = 0;
  }
}
void scatter(detail::RuntimeImpl& impl, std::span<const struct iovec> parts, std::size_t at, std::byte* from,
             std::size_t n) {
  exchange(impl, parts, at, from, n, true);
}
void gather(detail::RuntimeImpl& impl, std::span<const struct iovec> parts, std::size_t at, std::byte* to,
            std::size_t n) {
  exchange(impl, parts, at, to, n, false);
}

/// One read of a message socket into `parts` (shared memory or host memory, in order): through one
/// pageable buffer as large as `parts` (up to kLargestMessage, more than any socket takes), then
/// copied out, as readv would scatter it. Not sized by a peek at the next message: another reader
/// of the socket may take that one first, and the next, larger one was cut to its size.
/// `flags`: preadv2's RWF_* flags, at the file position.
ssize_t read_message(detail::RuntimeImpl& impl, int fd, std::span<const struct iovec> parts, int flags = 0) {
  const std::optional<std::size_t> total = total_of(parts);
  if (!total) return -1;
  const std::size_t take = std::min(*total, kLargestMessage);
  const auto buffer = std::make_unique_for_overwrite<std::byte[]>(take);
  const struct iovec one { buffer.get(), take };
  const ssize_t got = flags != 0 ? ::preadv2(fd, &one, 1, -1, flags) : ::read(fd, buffer.get(), take);
  if (got > 0) scatter(impl, parts, 0, buffer.get(), static_cast<std::size_t>(got));
  return got;
}

/// Whether a write of `total` bytes to `kind` is one write(2), as libc's: a message whole (above
/// kLargestMessage, which no socket takes, write_message refuses it), an O_APPEND file's bytes
/// together at its end (up to kLargestMessage; not interleaved with another writer's between chunks),
/// and up to PIPE_BUF bytes to a pipe, where POSIX makes such a write atomic (another writer's bytes
/// went between a writev's vectors).
bool one_write(Descriptor kind, std::size_t total) {
  return kind == Descriptor::messages || (kind == Descriptor::append && total <= kLargestMessage) ||
         (kind == Descriptor::stream && total <= PIPE_BUF);
}

/// One write of `parts` to a message socket, as one message (or to an O_APPEND file or a pipe, as
/// one_write says): gathered into one pageable buffer.
/// Whether it fits is the kernel's to say (UDP takes datagrams larger than its send buffer);
/// above kLargestMessage, which no socket takes, EMSGSIZE before anything is allocated.
ssize_t write_message(detail::RuntimeImpl& impl, int fd, std::span<const struct iovec> parts) {
  const std::optional<std::size_t> total = total_of(parts);
  if (!total) return -1;
  if (*total > kLargestMessage) {
    errno = EMSGSIZE;
    return -1;
  }
  const auto buffer = std::make_unique_for_overwrite<std::byte[]>(*total);
  gather(impl, parts, 0, buffer.get(), *total);
  return ::write(fd, buffer.get(), *total);
}

/// File to shared memory. `transfer(chunk, bytes, done)` reads up to `bytes` of the file into the
/// chunk (`done` bytes are already in) and returns the count, 0 at the end or -1 with errno.
/// `may_wait`: the reads may wait for another thread (a pipe, a socket), so they stage through
/// pageable memory, never holding chunks of the pool that other users of it may wait for.
/// `poll_fd`: a stream's read(2), whose later chunks are read only while it has data (-1: pread and
/// fread, which wait for every byte as they would without hdsm).
template <class Transfer>
ssize_t into_shared(detail::RuntimeImpl& impl, detail::MemoryModel& space, void* dst, std::size_t n,
                    bool may_wait, Transfer&& transfer, int poll_fd = -1) {
  StagingRing buffers(impl.staging(), may_wait ? 0 : kIoDepth);
  auto* out = static_cast<std::byte*>(dst);
  std::size_t done = 0;
  int error = 0;
  for (std::size_t i = 0; done < n; ++i) {
    if (done != 0 && poll_fd >= 0 && !has_data(poll_fd)) break;
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
/// written or -1 with errno. Chunk i + 1 is staged while chunk i is written. `may_wait` as
/// into_shared's.
template <class Transfer>
ssize_t from_shared(detail::RuntimeImpl& impl, detail::MemoryModel& space, const void* src, std::size_t n,
                    bool may_wait, Transfer&& transfer) {
  StagingRing buffers(impl.staging(), may_wait ? 0 : kIoDepth);
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

/// A regular file's read(2) or write(2) is one range of the file: the kernel holds the file offset's
/// lock for the whole call, so two threads that read or write one descriptor at once never
/// interleave. A staged call of several chunks holds a lock of hdsm's for its descriptor instead (one
/// of 64, by descriptor number; recursive, as a readv's vector in another runtime's objects takes it
/// again on the same thread). Pipes and sockets make no such promise past PIPE_BUF: no lock.
std::unique_lock<std::recursive_mutex> offset_lock(int fd, Descriptor kind) {
  static std::array<std::recursive_mutex, 64> locks;
  if (kind != Descriptor::file && kind != Descriptor::append) return {};
  return std::unique_lock(locks[static_cast<unsigned>(fd) % locks.size()]);
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

namespace {

/// read(2) of `kind` into `buf`, in shared memory or not.
ssize_t read_into(detail::RuntimeImpl& impl, int fd, Descriptor kind, void* buf, std::size_t n) {
  detail::MemoryModel* space = shared(impl, buf);
  if (space == nullptr || n == 0) return direct_ready(impl, buf, n, "read") ? ::read(fd, buf, n) : -1;
  if (!range_ok(*space, buf, n, "read")) return -1;
  if (kind == Descriptor::messages) {
    const struct iovec whole { buf, n };
    return read_message(impl, fd, {&whole, 1});
  }
  const bool stream = kind == Descriptor::stream;
  const auto lock = offset_lock(fd, kind);
  return into_shared(
      impl, *space, buf, n, stream,
      [fd](std::byte* chunk, std::size_t bytes, std::size_t) { return ::read(fd, chunk, bytes); },
      stream ? fd : -1);
}

/// write(2) of `buf`, in shared memory or not, to `kind`.
ssize_t write_from(detail::RuntimeImpl& impl, int fd, Descriptor kind, const void* buf, std::size_t n) {
  detail::MemoryModel* space = shared(impl, buf);
  if (space == nullptr || n == 0) return direct_ready(impl, buf, n, "write") ? ::write(fd, buf, n) : -1;
  if (!range_ok(*space, buf, n, "write")) return -1;
  const auto lock = offset_lock(fd, kind);
  if (one_write(kind, n)) {
    const struct iovec whole { const_cast<void*>(buf), n };
    return write_message(impl, fd, {&whole, 1});
  }
  return from_shared(
      impl, *space, buf, n, kind == Descriptor::stream,
      [fd](const std::byte* chunk, std::size_t bytes, std::size_t) { return ::write(fd, chunk, bytes); });
}

enum class Way { in, out };

/// Where a call's vectors are: 1 when one is in shared memory that hdsm moves (this runtime's
/// mediated objects, checked whole, or another runtime's objects, which that runtime checks); 0 when
/// libc may take them all, once the calls in flight on host-mapped and unified objects among them are
/// done; -1 with EFAULT for a range that leaves the objects it starts in.
int place(detail::RuntimeImpl& impl, const struct iovec* iov, int count, const char* call) {
  bool any_shared = false;
  for (int i = 0; i < count && iov != nullptr; ++i) {
    if (iov[i].iov_len != 0 && other_runtime(impl, iov[i].iov_base) != nullptr) {
      any_shared = true;  // checked by its own runtime when its turn comes
      continue;
    }
    detail::MemoryModel* space = shared(impl, iov[i].iov_base);
    if (space != nullptr ? iov[i].iov_len != 0 && !range_ok(*space, iov[i].iov_base, iov[i].iov_len, call)
                         : !direct_ready(impl, iov[i].iov_base, iov[i].iov_len, call))
      return -1;
    any_shared |= space != nullptr;
  }
  return any_shared ? 1 : 0;
}

/// preadv or pwritev (`way`) of `parts` (some in shared memory) at `offset`: the bytes in pieces of
/// a staging chunk, each one pread or pwrite at the offset where it belongs, gathered from the parts
/// before a write and scattered into them after a read, so a list of many small vectors (what MPI-IO
/// gives for a datatype with holes) costs one system call a chunk. Stops at the first short piece (the
/// end of the file, a full disk); what moved is the result. `flags` (preadv2/pwritev2's RWF_*; 0 for
/// preadv/pwritev, the same call) go with every piece.
ssize_t positional(detail::RuntimeImpl& impl, int fd, std::span<const struct iovec> parts, off_t offset,
                   Way way, int flags) {
  const std::optional<std::size_t> total = total_of(parts);
  if (!total) return -1;
  const bool in = way == Way::in;
  if (*total == 0)
    return in ? ::preadv2(fd, nullptr, 0, offset, flags) : ::pwritev2(fd, nullptr, 0, offset, flags);
  if (*total > static_cast<std::size_t>(std::numeric_limits<off_t>::max() - offset)) {
    errno = EINVAL;  // the kernel's answer for a range past the largest offset
    return -1;
  }
  StagingRing buffer(impl.staging(), 1);  // no wait for another thread: a pread on a pipe is ESPIPE
  std::size_t done = 0;
  int error = 0;
  while (done < *total) {
    const std::size_t take = std::min(*total - done, buffer.chunk());
    std::byte* piece = buffer.data(0);
    const off_t at = offset + static_cast<off_t>(done);
    if (!in) gather(impl, parts, done, piece, take);
    const struct iovec one { piece, take };
    const ssize_t moved = in ? ::preadv2(fd, &one, 1, at, flags) : ::pwritev2(fd, &one, 1, at, flags);
    if (moved < 0) {
      error = errno;
      break;
    }
    if (in) scatter(impl, parts, done, piece, static_cast<std::size_t>(moved));
    done += static_cast<std::size_t>(moved);
    if (static_cast<std::size_t>(moved) < take) break;
  }
  if (done == 0 && error != 0) {
    errno = error;
    return -1;
  }
  return static_cast<ssize_t>(done);
}

/// preadv2 or pwritev2 (`way`) at the file position with `flags`: one call, as the kernel's, through
/// one pageable buffer as large as `parts` (up to kLargestMessage: a longer call moves short),
/// gathered before a write and scattered after a read, so the flags mean what they mean to the
/// kernel (RWF_NOWAIT: nothing waits; a datagram whole).
ssize_t whole_call(detail::RuntimeImpl& impl, int fd, std::span<const struct iovec> parts, int flags,
                   Way way) {
  if (way == Way::in) return read_message(impl, fd, parts, flags);
  const std::optional<std::size_t> total = total_of(parts);
  if (!total) return -1;
  const std::size_t take = std::min(*total, kLargestMessage);
  const auto buffer = std::make_unique_for_overwrite<std::byte[]>(take);
  gather(impl, parts, 0, buffer.get(), take);
  const struct iovec one { buffer.get(), take };
  return ::pwritev2(fd, &one, 1, -1, flags);
}

/// What a vectored call is: readv/writev (no offset), preadv/pwritev (an offset), or their v2 forms
/// with RWF_* flags (an offset, or none for the file position: -1).
struct VectorCall {
  std::optional<off_t> offset;
  int flags = 0;
  bool v2 = false;
  const char* name(Way way) const {
    if (v2) return way == Way::in ? "preadv2" : "pwritev2";
    if (offset) return way == Way::in ? "preadv" : "pwritev";
    return way == Way::in ? "readv" : "writev";
  }
  ssize_t libc(int fd, const struct iovec* iov, int count, Way way) const {
    if (v2)
      return way == Way::in ? ::preadv2(fd, iov, count, offset.value_or(-1), flags)
                            : ::pwritev2(fd, iov, count, offset.value_or(-1), flags);
    if (offset)
      return way == Way::in ? ::preadv(fd, iov, count, *offset) : ::pwritev(fd, iov, count, *offset);
    return way == Way::in ? ::readv(fd, iov, count) : ::writev(fd, iov, count);
  }
};

/// readv or writev (`way`), or with `offset` preadv or pwritev: libc's when no vector is shared memory;
/// positional()'s for preadv and pwritev (a pwritev to an O_APPEND file appends, as writev);
/// else a message socket's message whole, by one read or write of all the vectors; else the vectors
/// in order, stopping at the first short one, and for a stream's readv where the next vector's read
/// would wait. A vector in another runtime's objects goes to that runtime (not for a message socket,
/// whose message is one call). The v2 forms with flags: positional()'s with an offset, whole_call()'s
/// at the file position (and for a pwritev2 that appends).
ssize_t vectored(detail::RuntimeImpl& impl, int fd, const struct iovec* iov, int count, Way way,
                 const VectorCall& form = {}) {
  const std::optional<off_t>& offset = form.offset;
  // libc's answer for a count it refuses, before any vector is looked at (which a negative count
  // would make a walk of no end, and one above IOV_MAX a call the kernel refuses).
  if (count < 0 || count > IOV_MAX) {
    errno = EINVAL;
    return -1;
  }
  // A length the kernel reads as negative is EINVAL before any vector's memory is looked at (a
  // shared range's check would say EFAULT).
  for (int i = 0; i < count && iov != nullptr; ++i) {
    if (iov[i].iov_len > static_cast<std::size_t>(SSIZE_MAX)) {
      errno = EINVAL;
      return -1;
    }
  }
  if (offset && *offset < 0) {
    errno = EINVAL;  // checked by the kernel before anything else
    return -1;
  }
  const int placed = place(impl, iov, count, form.name(way));
  if (placed < 0) return -1;
  if (placed == 0) return form.libc(fd, iov, count, way);
  // The vectors as they are now, as the kernel copies them before it moves a byte: data a readv
  // brings in may land on the array itself (a vector pointing at it), and must not redirect the next.
  const std::vector<struct iovec> copied(iov, iov + count);
  const std::span<const struct iovec> parts(copied);
  const Descriptor kind = classify(fd);
  if (offset && (way == Way::in || kind != Descriptor::append))
    return positional(impl, fd, parts, *offset, way, form.flags);
  const auto lock = offset_lock(fd, kind);
  if (form.flags != 0) return whole_call(impl, fd, parts, form.flags, way);
  if (way == Way::in && kind == Descriptor::messages) return read_message(impl, fd, parts);
  if (way == Way::out)
    if (const std::optional<std::size_t> total = total_of(parts); !total || one_write(kind, *total))
      return write_message(impl, fd, parts);  // an overflowing total: its errno
  std::size_t done = 0;
  for (const struct iovec& v : parts) {
    if (done != 0 && way == Way::in && kind == Descriptor::stream && v.iov_len != 0 && !has_data(fd)) break;
    // A vector in another runtime's objects is that runtime's to move (one call may name both).
    Runtime* other = v.iov_len != 0 ? other_runtime(impl, v.iov_base) : nullptr;
    const ssize_t moved = other != nullptr ? (way == Way::in ? other->read(fd, v.iov_base, v.iov_len)
                                                             : other->write(fd, v.iov_base, v.iov_len))
                          : way == Way::in ? read_into(impl, fd, kind, v.iov_base, v.iov_len)
                                           : write_from(impl, fd, kind, v.iov_base, v.iov_len);
    if (moved < 0) return done == 0 ? -1 : static_cast<ssize_t>(done);
    done += static_cast<std::size_t>(moved);
    if (static_cast<std::size_t>(moved) < v.iov_len) break;
  }
  return static_cast<ssize_t>(done);
}

/// recvmsg(2) into `parts` or sendmsg(2) of them (`way`; msg's vectors as they were at the call,
/// some in shared memory), through a pageable buffer: scattered after a receive, gathered before a
/// send. A message is one call, whole (to send above kLargestMessage, which no socket takes: EMSGSIZE
/// before anything is allocated; MSG_TRUNC's length of a longer datagram comes back as the kernel
/// gives it). So are a peek and a receive that takes ancillary data. A stream's bytes move in pieces:
/// a receive's later pieces only while data is there, as read(2)'s, or with MSG_WAITALL until every
/// byte arrived; a send's until one goes out short (what went out is the result). The address and
/// the ancillary data go with the first piece, and a receive's sender, ancillary data and flags are
/// the first piece's.
ssize_t socket_transfer(detail::RuntimeImpl& impl, int fd, struct msghdr& msg,
                        std::span<const struct iovec> parts, int flags, Way way) {
  const std::optional<std::size_t> total = total_of(parts);
  if (!total) return -1;
  const bool in = way == Way::in;
  const bool pieces =
      classify(fd) == Descriptor::stream && (!in || ((flags & MSG_PEEK) == 0 && msg.msg_control == nullptr));
  if (!in && !pieces && *total > kLargestMessage) {
    errno = EMSGSIZE;
    return -1;
  }
  const std::size_t size =
      std::min(*total, pieces ? impl.config.size(knob_name(Knob::staging_chunk)) : kLargestMessage);
  const auto buffer = std::make_unique_for_overwrite<std::byte[]>(size);
  struct msghdr call = msg;
  std::size_t done = 0;
  int error = 0;
  for (bool first = true;; first = false) {
    const std::size_t take = std::min(*total - done, size);
    if (!in) gather(impl, parts, done, buffer.get(), take);
    struct iovec piece {
      buffer.get(), take
    };
    call.msg_iov = &piece;
    call.msg_iovlen = 1;
    const ssize_t moved = in ? ::recvmsg(fd, &call, flags) : ::sendmsg(fd, &call, flags);
    if (moved < 0) {
      error = errno;
      break;
    }
    if (first && in) {
      msg.msg_namelen = call.msg_namelen;
      msg.msg_controllen = call.msg_controllen;
      msg.msg_flags = call.msg_flags;
    }
    call.msg_name = nullptr;
    call.msg_namelen = 0;
    call.msg_control = nullptr;
    call.msg_controllen = 0;
    if (in) scatter(impl, parts, done, buffer.get(), std::min(static_cast<std::size_t>(moved), take));
    done += static_cast<std::size_t>(moved);
    if (!pieces || static_cast<std::size_t>(moved) < take || done == *total) break;
    if (in && (flags & MSG_WAITALL) == 0 && !has_data(fd)) break;
  }
  if (done == 0 && error != 0) {
    errno = error;
    return -1;
  }
  return static_cast<ssize_t>(done);
}

/// A message's address or ancillary data (`side`) in shared memory, for one call through a host
/// copy: the kernel reads both on a send, and writes both on a receive, up to the lengths the call
/// gives back, which go back to the object. Sized by the range, which lies in a live object.
class SocketSide {
 public:
  SocketSide(detail::RuntimeImpl& impl, void* side, std::size_t bytes)
      : impl_(impl), side_{side, bytes}, copy_(std::make_unique_for_overwrite<std::byte[]>(bytes)) {
    gather(impl_, {&side_, 1}, 0, copy_.get(), bytes);  // a receive leaves the bytes past its length
  }
  void* get() const { return copy_.get(); }
  void finish(std::size_t written) {
    scatter(impl_, {&side_, 1}, 0, copy_.get(), std::min(written, side_.iov_len));
  }

 private:
  detail::RuntimeImpl& impl_;
  struct iovec side_;
  std::unique_ptr<std::byte[]> copy_;
};

/// recvmsg or sendmsg (`way`) with the libc call's arguments: libc's when no vector, address or
/// ancillary data is in shared memory hdsm moves (and for what the kernel refuses before it looks at
/// a vector).
ssize_t socket_call(detail::RuntimeImpl& impl, int fd, struct msghdr* msg, int flags, Way way) {
  const auto libc = [&] { return way == Way::in ? ::recvmsg(fd, msg, flags) : ::sendmsg(fd, msg, flags); };
  if (msg == nullptr || msg->msg_iovlen > IOV_MAX || (msg->msg_iov == nullptr && msg->msg_iovlen != 0))
    return libc();
  const auto count = static_cast<int>(msg->msg_iovlen);
  for (int i = 0; i < count; ++i) {
    if (msg->msg_iov[i].iov_len > static_cast<std::size_t>(SSIZE_MAX)) {
      errno = EINVAL;
      return -1;
    }
  }
  const char* call = way == Way::in ? "recvmsg" : "sendmsg";
  const int placed = place(impl, msg->msg_iov, count, call);
  const struct iovec sides[2] = {{msg->msg_name, msg->msg_namelen}, {msg->msg_control, msg->msg_controllen}};
  const int sides_placed = place(impl, sides, 2, call);
  if (placed < 0 || sides_placed < 0) return -1;
  if (placed == 0 && sides_placed == 0) return libc();
  struct msghdr call_msg = *msg;
  std::optional<SocketSide> name, control;
  if (sides_placed > 0) {
    const auto in_shared = [&](const struct iovec& v) {
      return v.iov_len != 0 &&
             (shared(impl, v.iov_base) != nullptr || other_runtime(impl, v.iov_base) != nullptr);
    };
    if (in_shared(sides[0]))
      call_msg.msg_name = name.emplace(impl, sides[0].iov_base, sides[0].iov_len).get();
    if (in_shared(sides[1]))
      call_msg.msg_control = control.emplace(impl, sides[1].iov_base, sides[1].iov_len).get();
  }
  ssize_t moved = 0;
  if (placed > 0) {
    const std::vector<struct iovec> parts(msg->msg_iov, msg->msg_iov + count);
    moved = socket_transfer(impl, fd, call_msg, parts, flags, way);
  } else {
    moved = way == Way::in ? ::recvmsg(fd, &call_msg, flags) : ::sendmsg(fd, &call_msg, flags);
  }
  if (moved < 0 || way == Way::out) return moved;
  if (name) name->finish(call_msg.msg_namelen);
  if (control) control->finish(call_msg.msg_controllen);
  msg->msg_namelen = call_msg.msg_namelen;
  msg->msg_controllen = call_msg.msg_controllen;
  msg->msg_flags = call_msg.msg_flags;
  return moved;
}

/// A stdio stream locked for one call (flockfile: recursive, so the stdio calls inside take it too).
class StreamLock {
 public:
  explicit StreamLock(std::FILE* stream) : stream_(stream) { ::flockfile(stream_); }
  StreamLock(const StreamLock&) = delete;
  StreamLock& operator=(const StreamLock&) = delete;
  ~StreamLock() { ::funlockfile(stream_); }

 private:
  std::FILE* stream_;
};

/// The descriptor of a stdio stream, for classify(); a stream with none (fmemopen) is memory.
Descriptor classify(std::FILE* stream) {
  const int saved = errno;  // fileno of a stream with no descriptor sets EBADF; the call succeeds
  const int fd = ::fileno(stream);
  if (fd < 0) {
    errno = saved;
    return Descriptor::file;
  }
  return classify(fd);
}

}  // namespace

// The descriptor is classified only for a shared buffer: host buffers (every interposed call of the
// program) cost one range check.
ssize_t Runtime::read(int fd, void* buf, std::size_t n) {
  if (shared(*impl_, buf) == nullptr || n == 0) return read_into(*impl_, fd, Descriptor::file, buf, n);
  return read_into(*impl_, fd, classify(fd), buf, n);
}

ssize_t Runtime::pread(int fd, void* buf, std::size_t n, off_t offset) {
  detail::MemoryModel* space = shared(*impl_, buf);
  if (space == nullptr || n == 0)
    return direct_ready(*impl_, buf, n, "pread") ? ::pread(fd, buf, n, offset) : -1;
  if (!range_ok(*space, buf, n, "pread")) return -1;
  return into_shared(*impl_, *space, buf, n, may_wait(classify(fd)),
                     [fd, offset](std::byte* chunk, std::size_t bytes, std::size_t done) {
                       return ::pread(fd, chunk, bytes, offset + static_cast<off_t>(done));
                     });
}

ssize_t Runtime::write(int fd, const void* buf, std::size_t n) {
  if (shared(*impl_, buf) == nullptr || n == 0) return write_from(*impl_, fd, Descriptor::file, buf, n);
  return write_from(*impl_, fd, classify(fd), buf, n);
}

ssize_t Runtime::pwrite(int fd, const void* buf, std::size_t n, off_t offset) {
  detail::MemoryModel* space = shared(*impl_, buf);
  if (space == nullptr || n == 0)
    return direct_ready(*impl_, buf, n, "pwrite") ? ::pwrite(fd, buf, n, offset) : -1;
  if (!range_ok(*space, buf, n, "pwrite")) return -1;
  return from_shared(*impl_, *space, buf, n, may_wait(classify(fd)),
                     [fd, offset](const std::byte* chunk, std::size_t bytes, std::size_t done) {
                       return ::pwrite(fd, chunk, bytes, offset + static_cast<off_t>(done));
                     });
}

ssize_t Runtime::readv(int fd, const struct iovec* iov, int count) {
  return vectored(*impl_, fd, iov, count, Way::in);
}

ssize_t Runtime::writev(int fd, const struct iovec* iov, int count) {
  return vectored(*impl_, fd, iov, count, Way::out);
}

ssize_t Runtime::preadv(int fd, const struct iovec* iov, int count, off_t offset) {
  return vectored(*impl_, fd, iov, count, Way::in, {.offset = offset});
}

ssize_t Runtime::pwritev(int fd, const struct iovec* iov, int count, off_t offset) {
  return vectored(*impl_, fd, iov, count, Way::out, {.offset = offset});
}

// offset -1: the file position, as readv/writev (with flags: one call, whole_call()).
ssize_t Runtime::preadv2(int fd, const struct iovec* iov, int count, off_t offset, int flags) {
  return vectored(
      *impl_, fd, iov, count, Way::in,
      {.offset = offset == -1 ? std::nullopt : std::optional(offset), .flags = flags, .v2 = true});
}

ssize_t Runtime::pwritev2(int fd, const struct iovec* iov, int count, off_t offset, int flags) {
  return vectored(
      *impl_, fd, iov, count, Way::out,
      {.offset = offset == -1 ? std::nullopt : std::optional(offset), .flags = flags, .v2 = true});
}

ssize_t Runtime::recvmsg(int fd, struct msghdr* msg, int flags) {
  return socket_call(*impl_, fd, msg, flags, Way::in);
}

ssize_t Runtime::sendmsg(int fd, const struct msghdr* msg, int flags) {
  return socket_call(*impl_, fd, const_cast<struct msghdr*>(msg), flags, Way::out);  // sendmsg only reads it
}

std::size_t Runtime::fread(void* buf, std::size_t size, std::size_t count, std::FILE* stream) {
  // size * count overflowing is EOVERFLOW in every memory model, before libc sees it: its fread would
  // move the product's wrapped value.
  std::size_t n = 0;
  if (!item_bytes(size, count, n)) return 0;
  detail::MemoryModel* space = shared(*impl_, buf);
  if (space == nullptr)
    return direct_ready(*impl_, buf, n, "fread") ? std::fread(buf, size, count, stream) : 0;
  if (n == 0) return 0;
  if (!range_ok(*space, buf, n, "fread")) return 0;
  const StreamLock lock(stream);  // one fread, as libc's: no other thread's call between the chunks
  const ssize_t done = into_shared(*impl_, *space, buf, n, may_wait(classify(stream)),
                                   [stream](std::byte* chunk, std::size_t bytes, std::size_t) -> ssize_t {
                                     const std::size_t got = std::fread(chunk, 1, bytes, stream);
                                     return got == 0 && std::ferror(stream) ? -1 : static_cast<ssize_t>(got);
                                   });
  return done <= 0 ? 0 : static_cast<std::size_t>(done) / size;
}

std::size_t Runtime::fwrite(const void* buf, std::size_t size, std::size_t count, std::FILE* stream) {
  // size * count overflowing is EOVERFLOW in every memory model, before libc sees it: its fwrite would
  // move the product's wrapped value.
  std::size_t n = 0;
  if (!item_bytes(size, count, n)) return 0;
  detail::MemoryModel* space = shared(*impl_, buf);
  if (space == nullptr)
    return direct_ready(*impl_, buf, n, "fwrite") ? std::fwrite(buf, size, count, stream) : 0;
  if (n == 0) return 0;
  if (!range_ok(*space, buf, n, "fwrite")) return 0;
  const StreamLock lock(stream);  // one fwrite, as libc's: no other thread's call between the chunks
  const ssize_t done =
      from_shared(*impl_, *space, buf, n, may_wait(classify(stream)),
                  [stream](const std::byte* chunk, std::size_t bytes, std::size_t) -> ssize_t {
                    const std::size_t put = std::fwrite(chunk, 1, bytes, stream);
                    return put == 0 && std::ferror(stream) ? -1 : static_cast<ssize_t>(put);
                  });
  return done <= 0 ? 0 : static_cast<std::size_t>(done) / size;
}

}  // namespace hdsm
