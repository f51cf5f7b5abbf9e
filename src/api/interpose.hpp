// Interposition (seed 000 §4.4): libhdsm.so defines read, write, pread, pwrite, readv, writev, preadv,
// pwritev (and their v2 forms), fread, fwrite and the socket calls (recv, send, their kin and the
// multi-message forms), so a program linked with it has its I/O on shared objects done by hdsm (no fault, no
// restarted system call) without calling hdsm's own I/O; libhdsm_preload.so adds memcpy, memmove and memset,
// and defines the I/O calls again (interposed_symbols.inc): a program that does not link hdsm loads
// libhdsm.so as the preload library's dependency, after libc, where its definitions come too late. Calls on
// host memory cost one range check (SharedRanges::may_touch) and go to the next definition of the symbol,
// libc's, found with dlsym(RTLD_NEXT).
#pragma once

#include <hdsm/export.h>

#include <csignal>
#include <cstddef>
#include <cstdio>
#include <ctime>

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

HDSM_VISIBLE_BEGIN
namespace hdsm::api {

/// Marks the calling thread as inside an interposed call that hdsm handles: libc calls made on the
/// way (by the runtime, by a device) go straight to libc, whatever memory they touch.
class Reentry {
 public:
  Reentry() noexcept;
  ~Reentry();
  Reentry(const Reentry&) = delete;
  Reentry& operator=(const Reentry&) = delete;
  static bool active() noexcept;
};

/// memmove or memset (value >= 0) of a range that may touch shared memory, by the runtime that owns
/// it. False when libc should do the call: no runtime owns the range, the thread is inside an
/// interposed call already, or the range is not all in live objects (libc's access then faults as a
/// plain one would). A device failure has no way back through memcpy's signature: it ends the
/// process with the message.
bool shared_memmove(void* dst, const void* src, std::size_t n) noexcept;
bool shared_memset(void* dst, int value, std::size_t n) noexcept;

/// The interposed I/O calls, as libc's are called: the C symbols of interposed_symbols.inc forward to
/// them. A buffer that may touch shared memory goes to the Runtime that owns it; every other call goes
/// to libc's function untouched, errno included. The `_chk` forms are what _FORTIFY_SOURCE builds
/// call (a request larger than the buffer goes to libc, which stops the program).
namespace io {
ssize_t read(int fd, void* buf, std::size_t n);
ssize_t write(int fd, const void* buf, std::size_t n);
ssize_t pread(int fd, void* buf, std::size_t n, off_t offset);
ssize_t pwrite(int fd, const void* buf, std::size_t n, off_t offset);
ssize_t readv(int fd, const struct iovec* iov, int count);
ssize_t writev(int fd, const struct iovec* iov, int count);
ssize_t preadv(int fd, const struct iovec* iov, int count, off_t offset);
ssize_t pwritev(int fd, const struct iovec* iov, int count, off_t offset);
ssize_t preadv2(int fd, const struct iovec* iov, int count, off_t offset, int flags);
ssize_t pwritev2(int fd, const struct iovec* iov, int count, off_t offset, int flags);
std::size_t fread(void* buf, std::size_t size, std::size_t count, std::FILE* stream);
std::size_t fwrite(const void* buf, std::size_t size, std::size_t count, std::FILE* stream);
std::size_t fread_unlocked(void* buf, std::size_t size, std::size_t count, std::FILE* stream);
std::size_t fwrite_unlocked(const void* buf, std::size_t size, std::size_t count, std::FILE* stream);
ssize_t read_chk(int fd, void* buf, std::size_t n, std::size_t buf_bytes);
ssize_t pread_chk(int fd, void* buf, std::size_t n, off_t offset, std::size_t buf_bytes);
std::size_t fread_chk(void* buf, std::size_t buf_bytes, std::size_t size, std::size_t count,
                      std::FILE* stream);
ssize_t recv(int fd, void* buf, std::size_t n, int flags);
ssize_t recvfrom(int fd, void* buf, std::size_t n, int flags, struct sockaddr* from, socklen_t* from_bytes);
ssize_t recvmsg(int fd, struct msghdr* msg, int flags);
ssize_t send(int fd, const void* buf, std::size_t n, int flags);
ssize_t sendto(int fd, const void* buf, std::size_t n, int flags, const struct sockaddr* to,
               socklen_t to_bytes);
ssize_t sendmsg(int fd, const struct msghdr* msg, int flags);
int recvmmsg(int fd, struct mmsghdr* messages, unsigned count, int flags, struct timespec* timeout);
int sendmmsg(int fd, struct mmsghdr* messages, unsigned count, int flags);
ssize_t recv_chk(int fd, void* buf, std::size_t n, std::size_t buf_bytes, int flags);
ssize_t recvfrom_chk(int fd, void* buf, std::size_t n, std::size_t buf_bytes, int flags,
                     struct sockaddr* from, socklen_t* from_bytes);
}  // namespace io

/// sigaction and the signal() family (interposed_signals.inc's C symbols forward to them): for SIGSEGV
/// and SIGBUS while hdsm's fault handler is installed, the new handler is chained behind hdsm's
/// (os::chain_fault_signal) and the program is shown its own; everything else is libc's.
int chained_sigaction(int sig, const struct sigaction* act, struct sigaction* old) noexcept;
enum SignalCall : unsigned char { kSignal, kBsdSignal, kSysvSignal, kSysvSignalInner, kSignalCalls };
sighandler_t chained_signal(SignalCall call, int sig, sighandler_t handler) noexcept;

}  // namespace hdsm::api

HDSM_VISIBLE_END
