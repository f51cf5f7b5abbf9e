// The interposed I/O calls of libhdsm.so (see interpose.hpp). A buffer that may touch shared
// memory goes to the Runtime that owns it (hdsm::Runtime::read and the rest), whatever runtime that
// is; every other call goes to libc untouched, errno included.
#undef _FORTIFY_SOURCE  // the fortified headers define read and fread inline; these are the real ones

#include "api/interpose.hpp"

#include <hdsm/export.h>
#include <hdsm/runtime.hpp>

#include "api/guarded.hpp"
#include "os/fault.hpp"
#include "os/signal_safe_io.hpp"
#include "runtime/shared_ranges.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

namespace hdsm::api {
namespace {

thread_local unsigned reentry_depth = 0;

[[noreturn]] void fatal(const char* call, const char* what) noexcept {
  os::signal_safe::Line().str("hdsm: ").str(call).str(": ").str(what).str("\n").write();
  std::abort();
}

/// libc's definition of an interposed symbol: the next one after libhdsm.so in the lookup order. When
/// libc comes first (libhdsm.so loaded as a dependency of a preloaded library, or by dlopen), there
/// is no next one and libc's own is taken; calls then reach libhdsm's definitions only from code
/// that binds to them first.
template <class Fn>
class Next {
 public:
  explicit constexpr Next(const char* name) : name_(name) {}
  Fn operator*() {
    Fn f = fn_.load(std::memory_order_acquire);
    if (f == nullptr) {
      void* symbol = dlsym(RTLD_NEXT, name_);
      if (symbol == nullptr || in_preload_library(symbol)) symbol = from_libc();
      f = reinterpret_cast<Fn>(symbol);
      fn_.store(f, std::memory_order_release);
    }
    return f;
  }

 private:
  void* from_libc() const noexcept {
    void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    void* symbol = libc != nullptr ? dlsym(libc, name_) : nullptr;
    if (symbol == nullptr) {
      const char* why = dlerror();  // NOLINT(concurrency-mt-unsafe): glibc keeps it per thread
      fatal(name_, why != nullptr ? why : "libc.so.6 has no such symbol");
    }
    dlclose(libc);  // only drops the reference RTLD_NOLOAD took: libc stays
    return symbol;
  }

  // Whether `symbol` is libhdsm_preload.so's definition, which comes next when the preload library
  // follows libhdsm.so in the lookup order (LD_PRELOAD="libhdsm.so libhdsm_preload.so", or a program
  // linked with -lhdsm -lhdsm_preload): it forwards back to this library, whose call of it again was
  // a loop without end.
  static bool in_preload_library(void* symbol) noexcept {
    void* marker = dlsym(RTLD_DEFAULT, "hdsm_preload_library");
    Dl_info of_marker{}, of_symbol{};
    return marker != nullptr && dladdr(marker, &of_marker) != 0 && dladdr(symbol, &of_symbol) != 0 &&
           of_marker.dli_fbase == of_symbol.dli_fbase;
  }

  const char* name_;
  std::atomic<Fn> fn_{nullptr};
};

using ReadFn = ssize_t (*)(int, void*, std::size_t);
using WriteFn = ssize_t (*)(int, const void*, std::size_t);
using PreadFn = ssize_t (*)(int, void*, std::size_t, off_t);
using PwriteFn = ssize_t (*)(int, const void*, std::size_t, off_t);
using VectorFn = ssize_t (*)(int, const struct iovec*, int);
using PvectorFn = ssize_t (*)(int, const struct iovec*, int, off_t);
using Pvector2Fn = ssize_t (*)(int, const struct iovec*, int, off_t, int);
using FreadFn = std::size_t (*)(void*, std::size_t, std::size_t, std::FILE*);
using FwriteFn = std::size_t (*)(const void*, std::size_t, std::size_t, std::FILE*);
using ReadChkFn = ssize_t (*)(int, void*, std::size_t, std::size_t);
using PreadChkFn = ssize_t (*)(int, void*, std::size_t, off_t, std::size_t);
using FreadChkFn = std::size_t (*)(void*, std::size_t, std::size_t, std::size_t, std::FILE*);
using RecvFn = ssize_t (*)(int, void*, std::size_t, int);
using RecvfromFn = ssize_t (*)(int, void*, std::size_t, int, struct sockaddr*, socklen_t*);
using RecvmsgFn = ssize_t (*)(int, struct msghdr*, int);
using SendFn = ssize_t (*)(int, const void*, std::size_t, int);
using SendtoFn = ssize_t (*)(int, const void*, std::size_t, int, const struct sockaddr*, socklen_t);
using SendmsgFn = ssize_t (*)(int, const struct msghdr*, int);
using RecvmmsgFn = int (*)(int, struct mmsghdr*, unsigned, int, struct timespec*);
using SendmmsgFn = int (*)(int, struct mmsghdr*, unsigned, int);
using RecvChkFn = ssize_t (*)(int, void*, std::size_t, std::size_t, int);
using RecvfromChkFn = ssize_t (*)(int, void*, std::size_t, std::size_t, int, struct sockaddr*, socklen_t*);

constinit Next<ReadFn> libc_read{"read"};
constinit Next<WriteFn> libc_write{"write"};
constinit Next<PreadFn> libc_pread{"pread"};
constinit Next<PwriteFn> libc_pwrite{"pwrite"};
constinit Next<VectorFn> libc_readv{"readv"};
constinit Next<VectorFn> libc_writev{"writev"};
constinit Next<PvectorFn> libc_preadv{"preadv"};
constinit Next<PvectorFn> libc_pwritev{"pwritev"};
constinit Next<Pvector2Fn> libc_preadv2{"preadv2"};
constinit Next<Pvector2Fn> libc_pwritev2{"pwritev2"};
constinit Next<FreadFn> libc_fread{"fread"};
constinit Next<FwriteFn> libc_fwrite{"fwrite"};
constinit Next<FreadFn> libc_fread_unlocked{"fread_unlocked"};
constinit Next<FwriteFn> libc_fwrite_unlocked{"fwrite_unlocked"};
constinit Next<ReadChkFn> libc_read_chk{"__read_chk"};
constinit Next<PreadChkFn> libc_pread_chk{"__pread_chk"};
constinit Next<FreadChkFn> libc_fread_chk{"__fread_chk"};
constinit Next<RecvFn> libc_recv{"recv"};
constinit Next<RecvfromFn> libc_recvfrom{"recvfrom"};
constinit Next<RecvmsgFn> libc_recvmsg{"recvmsg"};
constinit Next<SendFn> libc_send{"send"};
constinit Next<SendtoFn> libc_sendto{"sendto"};
constinit Next<SendmsgFn> libc_sendmsg{"sendmsg"};
constinit Next<RecvmmsgFn> libc_recvmmsg{"recvmmsg"};
constinit Next<SendmmsgFn> libc_sendmmsg{"sendmmsg"};
constinit Next<RecvChkFn> libc_recv_chk{"__recv_chk"};
constinit Next<RecvfromChkFn> libc_recvfrom_chk{"__recvfrom_chk"};

// Resolved while the process starts, so that no later first call (one from a signal handler, say)
// runs dlsym.
template <class... Fn>
void resolve(Next<Fn>&... next) {
  (static_cast<void>(*next), ...);
}

[[gnu::constructor]] void resolve_all() {
  resolve(libc_read, libc_write, libc_pread, libc_pwrite, libc_readv, libc_writev, libc_preadv, libc_pwritev,
          libc_preadv2, libc_pwritev2, libc_fread, libc_fwrite, libc_fread_unlocked, libc_fwrite_unlocked,
          libc_read_chk, libc_pread_chk, libc_fread_chk, libc_recv, libc_recvfrom, libc_recvmsg, libc_send,
          libc_sendto, libc_sendmsg, libc_recvmmsg, libc_sendmmsg, libc_recv_chk, libc_recvfrom_chk);
}

/// The runtime that owns `p`, unless this thread is inside an interposed call already.
Runtime* owner_of(const void* p) noexcept {
  return Reentry::active() ? nullptr : detail::shared_ranges.owner(p);
}

/// `shared(runtime)` when `p` is in shared memory, else `plain()`; hdsm errors become `failed`
/// and EIO, as the C API's I/O calls give.
template <class R, class Shared, class Plain>
R dispatch(const void* p, R failed, Shared&& shared, Plain&& plain) {
  Runtime* runtime = owner_of(p);
  if (runtime == nullptr) return plain();
  Reentry guard;
  return io_guarded<R>(failed, [&] { return shared(*runtime); });
}

/// The first vector that may touch shared memory, or nullptr.
const void* shared_vector(const struct iovec* iov, int count) noexcept {
  if (iov == nullptr) return nullptr;
  for (int i = 0; i < count; ++i)
    if (detail::shared_ranges.may_touch(iov[i].iov_base, iov[i].iov_len) &&
        owner_of(iov[i].iov_base) != nullptr)
      return iov[i].iov_base;
  return nullptr;
}

bool may_touch(const void* p, std::size_t n) noexcept { return detail::shared_ranges.may_touch(p, n); }

/// `p` when its `n` bytes may touch shared memory, or nullptr.
const void* shared_range(const void* p, std::size_t n) noexcept {
  return n != 0 && may_touch(p, n) && owner_of(p) != nullptr ? p : nullptr;
}

/// The first of a message's vectors, address and ancillary data that may touch shared memory (the
/// kernel reads or writes all of them), or nullptr.
const void* shared_socket_message(const struct msghdr& m) noexcept {
  if (m.msg_iovlen <= INT_MAX)
    if (const void* p = shared_vector(m.msg_iov, static_cast<int>(m.msg_iovlen))) return p;
  if (const void* p = shared_range(m.msg_name, m.msg_namelen)) return p;
  return shared_range(m.msg_control, m.msg_controllen);
}

/// The most messages one recvmmsg or sendmmsg takes (the kernel's UIO_MAXIOV).
constexpr unsigned kMostMessages = 1024;

/// The first vector, address or ancillary data of `count` messages that may touch shared memory, or
/// nullptr.
const void* shared_message(const struct mmsghdr* messages, unsigned count) noexcept {
  if (messages == nullptr) return nullptr;
  for (unsigned i = 0; i < std::min(count, kMostMessages); ++i) {
    if (const void* p = shared_socket_message(messages[i].msg_hdr)) return p;
  }
  return nullptr;
}

}  // namespace

Reentry::Reentry() noexcept { ++reentry_depth; }
Reentry::~Reentry() { --reentry_depth; }
bool Reentry::active() noexcept { return reentry_depth != 0; }

bool shared_memmove(void* dst, const void* src, std::size_t n) noexcept {
  Runtime* runtime = owner_of(dst);
  if (runtime == nullptr) runtime = owner_of(src);
  if (runtime == nullptr) return false;
  Reentry guard;
  try {
    runtime->memmove(dst, src, n);
    return true;
  } catch (const InvalidArgument&) {
    return false;
  } catch (const std::exception& e) {
    fatal("memmove on shared memory", e.what());
  }
}

bool shared_memset(void* dst, int value, std::size_t n) noexcept {
  Runtime* runtime = owner_of(dst);
  if (runtime == nullptr) return false;
  Reentry guard;
  try {
    runtime->memset(dst, value, n);
    return true;
  } catch (const InvalidArgument&) {
    return false;
  } catch (const std::exception& e) {
    fatal("memset on shared memory", e.what());
  }
}

}  // namespace hdsm::api

namespace hdsm::api::io {

ssize_t read(int fd, void* buf, std::size_t n) {
  const auto plain = [&] { return (*libc_read)(fd, buf, n); };
  if (!may_touch(buf, n)) return plain();
  return dispatch<ssize_t>(
      buf, -1, [&](Runtime& r) { return r.read(fd, buf, n); }, plain);
}

ssize_t write(int fd, const void* buf, std::size_t n) {
  const auto plain = [&] { return (*libc_write)(fd, buf, n); };
  if (!may_touch(buf, n)) return plain();
  return dispatch<ssize_t>(
      buf, -1, [&](Runtime& r) { return r.write(fd, buf, n); }, plain);
}

ssize_t pread(int fd, void* buf, std::size_t n, off_t offset) {
  const auto plain = [&] { return (*libc_pread)(fd, buf, n, offset); };
  if (!may_touch(buf, n)) return plain();
  return dispatch<ssize_t>(
      buf, -1, [&](Runtime& r) { return r.pread(fd, buf, n, offset); }, plain);
}

ssize_t pwrite(int fd, const void* buf, std::size_t n, off_t offset) {
  const auto plain = [&] { return (*libc_pwrite)(fd, buf, n, offset); };
  if (!may_touch(buf, n)) return plain();
  return dispatch<ssize_t>(
      buf, -1, [&](Runtime& r) { return r.pwrite(fd, buf, n, offset); }, plain);
}

ssize_t readv(int fd, const struct iovec* iov, int count) {
  const auto plain = [&] { return (*libc_readv)(fd, iov, count); };
  const void* shared = hdsm::api::shared_vector(iov, count);
  if (shared == nullptr) return plain();
  return dispatch<ssize_t>(
      shared, -1, [&](Runtime& r) { return r.readv(fd, iov, count); }, plain);
}

ssize_t writev(int fd, const struct iovec* iov, int count) {
  const auto plain = [&] { return (*libc_writev)(fd, iov, count); };
  const void* shared = hdsm::api::shared_vector(iov, count);
  if (shared == nullptr) return plain();
  return dispatch<ssize_t>(
      shared, -1, [&](Runtime& r) { return r.writev(fd, iov, count); }, plain);
}

ssize_t preadv(int fd, const struct iovec* iov, int count, off_t offset) {
  const auto plain = [&] { return (*libc_preadv)(fd, iov, count, offset); };
  const void* shared = hdsm::api::shared_vector(iov, count);
  if (shared == nullptr) return plain();
  return dispatch<ssize_t>(
      shared, -1, [&](Runtime& r) { return r.preadv(fd, iov, count, offset); }, plain);
}

ssize_t pwritev(int fd, const struct iovec* iov, int count, off_t offset) {
  const auto plain = [&] { return (*libc_pwritev)(fd, iov, count, offset); };
  const void* shared = hdsm::api::shared_vector(iov, count);
  if (shared == nullptr) return plain();
  return dispatch<ssize_t>(
      shared, -1, [&](Runtime& r) { return r.pwritev(fd, iov, count, offset); }, plain);
}

ssize_t preadv2(int fd, const struct iovec* iov, int count, off_t offset, int flags) {
  const auto plain = [&] { return (*libc_preadv2)(fd, iov, count, offset, flags); };
  const void* shared = hdsm::api::shared_vector(iov, count);
  if (shared == nullptr) return plain();
  return dispatch<ssize_t>(
      shared, -1, [&](Runtime& r) { return r.preadv2(fd, iov, count, offset, flags); }, plain);
}

ssize_t pwritev2(int fd, const struct iovec* iov, int count, off_t offset, int flags) {
  const auto plain = [&] { return (*libc_pwritev2)(fd, iov, count, offset, flags); };
  const void* shared = hdsm::api::shared_vector(iov, count);
  if (shared == nullptr) return plain();
  return dispatch<ssize_t>(
      shared, -1, [&](Runtime& r) { return r.pwritev2(fd, iov, count, offset, flags); }, plain);
}

std::size_t fread(void* buf, std::size_t size, std::size_t count, std::FILE* stream) {
  const auto plain = [&] { return (*libc_fread)(buf, size, count, stream); };
  if (!may_touch(buf, size * count)) return plain();
  return dispatch<std::size_t>(
      buf, 0, [&](Runtime& r) { return r.fread(buf, size, count, stream); }, plain);
}

std::size_t fwrite(const void* buf, std::size_t size, std::size_t count, std::FILE* stream) {
  const auto plain = [&] { return (*libc_fwrite)(buf, size, count, stream); };
  if (!may_touch(buf, size * count)) return plain();
  return dispatch<std::size_t>(
      buf, 0, [&](Runtime& r) { return r.fwrite(buf, size, count, stream); }, plain);
}

// The stream lock is recursive, so the locking fread/fwrite the runtime uses are right here too.
std::size_t fread_unlocked(void* buf, std::size_t size, std::size_t count, std::FILE* stream) {
  const auto plain = [&] { return (*libc_fread_unlocked)(buf, size, count, stream); };
  if (!may_touch(buf, size * count)) return plain();
  return dispatch<std::size_t>(
      buf, 0, [&](Runtime& r) { return r.fread(buf, size, count, stream); }, plain);
}

std::size_t fwrite_unlocked(const void* buf, std::size_t size, std::size_t count, std::FILE* stream) {
  const auto plain = [&] { return (*libc_fwrite_unlocked)(buf, size, count, stream); };
  if (!may_touch(buf, size * count)) return plain();
  return dispatch<std::size_t>(
      buf, 0, [&](Runtime& r) { return r.fwrite(buf, size, count, stream); }, plain);
}

// What _FORTIFY_SOURCE builds call. A request larger than the buffer goes to libc, which stops the
// program as it would without hdsm; so does an fread whose size * count overflows, even where the
// wrapped product fits the buffer (the runtime would fail it with EOVERFLOW, and the program go on).
ssize_t read_chk(int fd, void* buf, std::size_t n, std::size_t buf_bytes) {
  if (n > buf_bytes || !may_touch(buf, n)) return (*libc_read_chk)(fd, buf, n, buf_bytes);
  return io::read(fd, buf, n);
}

ssize_t pread_chk(int fd, void* buf, std::size_t n, off_t offset, std::size_t buf_bytes) {
  if (n > buf_bytes || !may_touch(buf, n)) return (*libc_pread_chk)(fd, buf, n, offset, buf_bytes);
  return io::pread(fd, buf, n, offset);
}

std::size_t fread_chk(void* buf, std::size_t buf_bytes, std::size_t size, std::size_t count,
                      std::FILE* stream) {
  std::size_t n = 0;
  if (__builtin_mul_overflow(size, count, &n) || n > buf_bytes || !may_touch(buf, n))
    return (*libc_fread_chk)(buf, buf_bytes, size, count, stream);
  return io::fread(buf, size, count, stream);
}

// The socket calls: each is the runtime's recvmsg or sendmsg with one vector (and the sender or
// receiver's address for recvfrom and sendto).
ssize_t recv(int fd, void* buf, std::size_t n, int flags) {
  return recvfrom(fd, buf, n, flags, nullptr, nullptr);
}

ssize_t recvfrom(int fd, void* buf, std::size_t n, int flags, struct sockaddr* from, socklen_t* from_bytes) {
  const auto plain = [&] {
    return from == nullptr && from_bytes == nullptr ? (*libc_recv)(fd, buf, n, flags)
                                                    : (*libc_recvfrom)(fd, buf, n, flags, from, from_bytes);
  };
  // The sender's address may be in shared memory too (its length is read and written here).
  const void* shared = shared_range(buf, n);
  if (shared == nullptr && from != nullptr && from_bytes != nullptr) shared = shared_range(from, *from_bytes);
  if (shared == nullptr) return plain();
  return dispatch<ssize_t>(
      shared, -1,
      [&](Runtime& r) -> ssize_t {
        if (from != nullptr && from_bytes == nullptr) {  // the kernel would take the data, then fail
          errno = EFAULT;
          return -1;
        }
        struct iovec v {
          buf, n
        };
        struct msghdr msg {};
        msg.msg_iov = &v;
        msg.msg_iovlen = 1;
        msg.msg_name = from;
        msg.msg_namelen = from != nullptr ? *from_bytes : 0;
        const ssize_t got = r.recvmsg(fd, &msg, flags);
        if (got >= 0 && from != nullptr) *from_bytes = msg.msg_namelen;
        return got;
      },
      plain);
}

ssize_t recvmsg(int fd, struct msghdr* msg, int flags) {
  const auto plain = [&] { return (*libc_recvmsg)(fd, msg, flags); };
  if (msg == nullptr || msg->msg_iovlen > INT_MAX) return plain();
  const void* shared = hdsm::api::shared_socket_message(*msg);
  if (shared == nullptr) return plain();
  return dispatch<ssize_t>(
      shared, -1, [&](Runtime& r) { return r.recvmsg(fd, msg, flags); }, plain);
}

ssize_t send(int fd, const void* buf, std::size_t n, int flags) {
  return sendto(fd, buf, n, flags, nullptr, 0);
}

ssize_t sendto(int fd, const void* buf, std::size_t n, int flags, const struct sockaddr* to,
               socklen_t to_bytes) {
  const auto plain = [&] {
    return to == nullptr ? (*libc_send)(fd, buf, n, flags) : (*libc_sendto)(fd, buf, n, flags, to, to_bytes);
  };
  const void* shared = shared_range(buf, n);
  if (shared == nullptr && to != nullptr) shared = shared_range(to, to_bytes);
  if (shared == nullptr) return plain();
  return dispatch<ssize_t>(
      shared, -1,
      [&](Runtime& r) {
        struct iovec v {
          const_cast<void*>(buf), n
        };
        struct msghdr msg {};
        msg.msg_iov = &v;
        msg.msg_iovlen = 1;
        msg.msg_name = const_cast<struct sockaddr*>(to);
        msg.msg_namelen = to != nullptr ? to_bytes : 0;
        return r.sendmsg(fd, &msg, flags);
      },
      plain);
}

ssize_t sendmsg(int fd, const struct msghdr* msg, int flags) {
  const auto plain = [&] { return (*libc_sendmsg)(fd, msg, flags); };
  if (msg == nullptr || msg->msg_iovlen > INT_MAX) return plain();
  const void* shared = hdsm::api::shared_socket_message(*msg);
  if (shared == nullptr) return plain();
  return dispatch<ssize_t>(
      shared, -1, [&](Runtime& r) { return r.sendmsg(fd, msg, flags); }, plain);
}

// The multi-message forms, as the kernel makes them: one message after another, the count of those
// that moved (-1 only when the first fails). recvmmsg waits for the first message; with
// MSG_WAITFORONE it takes only those already there after it; its timeout is checked after each
// message, and the time left written back.
int recvmmsg(int fd, struct mmsghdr* messages, unsigned count, int flags, struct timespec* timeout) {
  const auto plain = [&] { return (*libc_recvmmsg)(fd, messages, count, flags, timeout); };
  const void* shared = shared_message(messages, count);
  if (shared == nullptr) return plain();
  return dispatch<int>(
      shared, -1,
      [&](Runtime& r) {
        using Clock = std::chrono::steady_clock;
        if (timeout != nullptr &&
            (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1'000'000'000)) {
          errno = EINVAL;  // the kernel's answer, before any message moves
          return -1;
        }
        // A timeout beyond a century is none (its time point would not fit the clock's range).
        constexpr std::time_t kCentury = std::time_t{100} * 365 * 24 * 3600;
        const bool timed = timeout != nullptr && timeout->tv_sec < kCentury;
        const auto deadline = !timed ? Clock::time_point::max()
                                     : Clock::now() + std::chrono::seconds(timeout->tv_sec) +
                                           std::chrono::nanoseconds(timeout->tv_nsec);
        const int each = flags & ~MSG_WAITFORONE;
        unsigned done = 0;
        while (done < std::min(count, kMostMessages)) {
          const bool rest = done > 0 && (flags & MSG_WAITFORONE) != 0;
          const ssize_t got = r.recvmsg(fd, &messages[done].msg_hdr, rest ? each | MSG_DONTWAIT : each);
          if (got < 0) {
            if (done == 0) return -1;
            break;
          }
          messages[done++].msg_len = static_cast<unsigned>(got);
          if (timed && Clock::now() >= deadline) break;
        }
        if (timed) {
          const auto left = std::max(deadline - Clock::now(), Clock::duration::zero());
          const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(left);
          timeout->tv_sec = seconds.count();
          timeout->tv_nsec = std::chrono::duration_cast<std::chrono::nanoseconds>(left - seconds).count();
        }
        return static_cast<int>(done);
      },
      plain);
}

int sendmmsg(int fd, struct mmsghdr* messages, unsigned count, int flags) {
  const auto plain = [&] { return (*libc_sendmmsg)(fd, messages, count, flags); };
  const void* shared = shared_message(messages, count);
  if (shared == nullptr) return plain();
  return dispatch<int>(
      shared, -1,
      [&](Runtime& r) {
        unsigned done = 0;
        while (done < std::min(count, kMostMessages)) {
          const ssize_t put = r.sendmsg(fd, &messages[done].msg_hdr, flags);
          if (put < 0) {
            if (done == 0) return -1;
            break;
          }
          messages[done++].msg_len = static_cast<unsigned>(put);
        }
        return static_cast<int>(done);
      },
      plain);
}

ssize_t recv_chk(int fd, void* buf, std::size_t n, std::size_t buf_bytes, int flags) {
  if (n > buf_bytes || !may_touch(buf, n)) return (*libc_recv_chk)(fd, buf, n, buf_bytes, flags);
  return io::recv(fd, buf, n, flags);
}

ssize_t recvfrom_chk(int fd, void* buf, std::size_t n, std::size_t buf_bytes, int flags,
                     struct sockaddr* from, socklen_t* from_bytes) {
  if (n > buf_bytes || !may_touch(buf, n))
    return (*libc_recvfrom_chk)(fd, buf, n, buf_bytes, flags, from, from_bytes);
  return io::recvfrom(fd, buf, n, flags, from, from_bytes);
}

}  // namespace hdsm::api::io

// The C symbols, forwarding to the functions above; libhdsm_preload.so defines them again.
#include "api/interposed_symbols.inc"

// The signal calls. While hdsm's fault handler is installed, a handler for SIGSEGV or SIGBUS is
// chained behind it instead of replacing it. LLVM, inside PoCL's compiler, installs its crash
// handler while it builds a kernel: shared memory's faults on other threads reached it, it removed
// the build's temporary files, and with its SA_RESETHAND a fault in the window killed the process.
// signal() and its kin are here too: glibc's call its own sigaction by its inner name, past ours.
//
// libc's sigaction is called by its other name, __sigaction, not found with dlsym: AddressSanitizer
// resolves its REAL(sigaction) to this library's while it starts, before dlsym may run. None under
// ThreadSanitizer: its runtime calls sigaction before it can run instrumented code, and it keeps the
// process's handlers in a table of its own, where there is nothing to chain.
#if !defined(__SANITIZE_THREAD__)
extern "C" int __sigaction(int sig, const struct sigaction* act,  // NOLINT(bugprone-reserved-identifier)
                           struct sigaction* old) noexcept;

namespace hdsm::api {
namespace {

using SignalFunction = sighandler_t (*)(int, sighandler_t);
constinit Next<SignalFunction> libc_signal[kSignalCalls] = {
    Next<SignalFunction>{"signal"}, Next<SignalFunction>{"bsd_signal"}, Next<SignalFunction>{"sysv_signal"},
    Next<SignalFunction>{"__sysv_signal"}};

// Resolved while the process starts, as the I/O calls: old programs call signal() again inside their
// handlers, where dlsym's lock, held by the interrupted thread, would hang them.
[[gnu::constructor]] void resolve_signal_calls() {
  for (Next<SignalFunction>& next : libc_signal) static_cast<void>(*next);
}

}  // namespace

int chained_sigaction(int sig, const struct sigaction* act, struct sigaction* old) noexcept {
  if (os::chain_fault_signal(sig, act, old)) return 0;
  return ::__sigaction(sig, act, old);
}

// With the flags glibc gives each: BSD's (signal, bsd_signal: the handler stays, the signal is
// blocked while it runs, interrupted calls restart) or System V's (sysv_signal, and signal itself in
// strict ISO C modes: once, unblocked). Every call but a chained one is libc's.
sighandler_t chained_signal(SignalCall call, int sig, sighandler_t handler) noexcept {
  const bool bsd = call == kSignal || call == kBsdSignal;
  if ((sig == SIGSEGV || sig == SIGBUS) && handler != SIG_ERR) {
    struct sigaction act {};
    act.sa_handler = handler;
    sigemptyset(&act.sa_mask);
    if (bsd) sigaddset(&act.sa_mask, sig);
    act.sa_flags = bsd ? SA_RESTART : static_cast<int>(SA_RESETHAND | SA_NODEFER);
    struct sigaction old {};
    if (os::chain_fault_signal(sig, &act, &old)) return old.sa_handler;
  }
  return (*libc_signal[call])(sig, handler);
}

}  // namespace hdsm::api

#include "api/interposed_signals.inc"
#endif
