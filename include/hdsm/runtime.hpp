// The process-wide runtime: configuration, devices, statistics and tracing, with an explicit
// lifetime. The implicit default instance (Runtime::instance(), used by the C API) is created on
// first use and destroyed at exit.
#pragma once

#include <hdsm/export.h>

#include <hdsm/config.hpp>
#include <hdsm/device.hpp>
#include <hdsm/kernel.hpp>
#include <hdsm/stats.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

// The library's own, hidden: declared before the exported declarations.
namespace hdsm::detail {
struct RuntimeImpl;
}

HDSM_VISIBLE_BEGIN
namespace hdsm {

/// How a kernel call uses a shared object (hdsm::in, hdsm::out, hdsm::inout in adsm.hpp).
enum class Use : std::uint8_t { in, out, inout };

class Runtime;

namespace detail {
RuntimeImpl& impl_of(const Runtime& runtime);

/// One argument of Runtime::call as the runtime sees it: a plain value, a raw pointer (translated
/// when it points into a shared object; `use` is what it counts as in a call with annotations) or an
/// annotated pointer.
struct CallArg {
  static constexpr std::size_t kWholeObject = SIZE_MAX;
  enum class Kind : std::uint8_t { value, pointer, annotated };
  Kind kind = Kind::value;
  Use use = Use::inout;
  const void* pointer = nullptr;
  KernelArg value;
  /// Range annotations: the kernel touches `bytes` bytes from `pointer + offset` (kWholeObject: the
  /// whole object).
  std::size_t offset = 0;
  std::size_t bytes = kWholeObject;
};

/// free(p) on the default runtime, or nothing once it has ended (static destruction at exit: a
/// global smart pointer's memory went with it).
void free_in_default_runtime(void* p);
}  // namespace detail

class Runtime {
 public:
  /// Create a runtime with the given configuration (by default: defaults + environment).
  explicit Runtime(Config config = Config::from_environment());
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// The implicit default instance, created on first use.
  static Runtime& instance();

  const Config& config() const;
  std::span<Device* const> devices() const;
  Device& device(std::size_t index) const;
  /// The device HDSM_DEVICE names (by default the first one).
  Device& default_device() const;

  /// Shared memory (ADSM, adsm.hpp): one pointer for the CPU and the kernels of `device` (-1: the
  /// default device). The object is zero-filled.
  void* alloc(std::size_t bytes, int device = -1);
  template <class T>
  T* alloc(std::size_t n, int device = -1);
  /// `p` must be the start of a live shared object of this runtime (InvalidPointer otherwise).
  void free(void* p);
  /// GMAC's adsmSafeAlloc: the same allocation as alloc. Every hdsm object is what GMAC calls a safe
  /// allocation, since hdsm translates every pointer argument of call() and so never needs the host
  /// and device addresses of an object to be equal; safe_alloc exists so GMAC programs port unchanged.
  void* safe_alloc(std::size_t bytes, int device = -1);
  template <class T>
  T* safe_alloc(std::size_t n, int device = -1);
  /// GMAC's adsmSafe: the address kernels of the hosting device see for `p` (interior pointers
  /// included), for device pointers stored inside shared data that kernels follow (a table of
  /// pointers, a linked structure). Never dereference it on the host. InvalidArgument when `p` is
  /// not in a live shared object of this runtime.
  void* safe(const void* p) const;
  template <class T>
  T* safe(T* p) const;
  /// Bulk memory for any mix of host memory and shared objects of this runtime (a range lies in one
  /// object: no object starts where another ends). Each block of a shared range is handled where its data is:
  /// the device fills or copies blocks whose host copy is invalid (or that the call overwrites
  /// entirely while they are read-only) without fetching them; the host view is written otherwise,
  /// through the runtime's shadow mapping, so no page fault is raised. They return `dst` once the
  /// data is in place. Every byte of a shared range must be in a live object of this runtime:
  /// InvalidArgument names the first byte that is not, and nothing is written. memcpy accepts
  /// overlapping ranges (it is memmove); with only host memory involved they are the libc calls.
  void* memcpy(void* dst, const void* src, std::size_t n);
  void* memmove(void* dst, const void* src, std::size_t n);
  void* memset(void* dst, int value, std::size_t n);
  /// memcpy that returns once the copy has started: the returned event completes when the bytes are
  /// in place (Event::wait rethrows a failed transfer's error). Until then the destination must be
  /// neither read nor written and the source not written — by the CPU, by kernels (call) or by other
  /// hdsm calls; later work on the copied bytes (calls that name the objects whole or by an
  /// overlapping range, transfers, free) is ordered after the copy, and a call whose range annotation
  /// lies elsewhere in the objects runs alongside it (adsm.hpp). What needs the CPU is done before it
  /// returns (blocks handled on the host view, pageable host memory staged through pinned chunks,
  /// overlapping ranges); device transfers, peer and staged copies between devices included, may
  /// still be running. Bad ranges throw InvalidArgument as memcpy does,
  /// before any byte moves. With only host memory involved it is std::memmove and the event is
  /// complete.
  Event memcpy_async(void* dst, const void* src, std::size_t n);

  /// I/O on shared objects with the libc calls' arguments, results and errno. A buffer in shared
  /// memory is moved in chunks of the pinned staging pool, double-buffered (for a pipe, a socket or a
  /// terminal, whose calls may wait for another thread: of pageable memory), straight between the file
  /// and the device copy where the host copy is invalid, through the host view otherwise; no page
  /// fault is raised, so no system call is interrupted halfway and restarted. A buffer range that
  /// leaves the live shared objects gives -1 with EFAULT (fread/fwrite: 0) before any byte moves.
  /// Host-mapped and unified objects go to libc once the calls in flight that use them are done;
  /// other host memory goes straight to libc. A regular file's read/write/readv/writev of several
  /// chunks holds a lock for its descriptor, so threads sharing it never interleave their chunks.
  /// readv/writev handle their vectors in order, each as one read/write, and so are not atomic
  /// towards other processes when a vector is shared; on a socket that keeps message
  /// boundaries, one message is one call, whole. preadv/pwritev gather or scatter their vectors
  /// through staging chunks, one pread/pwrite per chunk (a pwritev to an O_APPEND file appends, as
  /// writev).
  ssize_t read(int fd, void* buf, std::size_t n);
  ssize_t write(int fd, const void* buf, std::size_t n);
  ssize_t pread(int fd, void* buf, std::size_t n, off_t offset);
  ssize_t pwrite(int fd, const void* buf, std::size_t n, off_t offset);
  ssize_t readv(int fd, const struct iovec* iov, int count);
  ssize_t writev(int fd, const struct iovec* iov, int count);
  ssize_t preadv(int fd, const struct iovec* iov, int count, off_t offset);
  ssize_t pwritev(int fd, const struct iovec* iov, int count, off_t offset);
  /// With RWF_* `flags` (offset -1: the file position): at an offset as preadv/pwritev with the flags
  /// on every chunk's call; at the file position one call through a pageable buffer (up to 64 MiB).
  ssize_t preadv2(int fd, const struct iovec* iov, int count, off_t offset, int flags);
  ssize_t pwritev2(int fd, const struct iovec* iov, int count, off_t offset, int flags);
  std::size_t fread(void* buf, std::size_t size, std::size_t count, std::FILE* stream);
  std::size_t fwrite(const void* buf, std::size_t size, std::size_t count, std::FILE* stream);
  /// Socket calls, as recvmsg(2) and sendmsg(2) (send, recv and the rest are these with one vector):
  /// vectors in shared memory go through pageable memory. A message, a peek and a receive that takes
  /// ancillary data are one call; a stream's bytes move in pieces of HDSM_STAGING_CHUNK, the later
  /// pieces of a receive only while data is there (with MSG_WAITALL, until all arrived), those of a
  /// send until one goes out short. Sender, ancillary data and flags are the first piece's. An
  /// address or ancillary data in shared memory goes through a host copy as well.
  ssize_t recvmsg(int fd, struct msghdr* msg, int flags);
  ssize_t sendmsg(int fd, const struct msghdr* msg, int flags);

  /// Release, then launch asynchronously on the device hosting the first shared-pointer argument.
  /// Objects of other devices are passed by their device's address when the devices are peers, as
  /// copies with HDSM_REMOTE=copy, and are Unsupported otherwise (docs/user-guide.md).
  template <class... A>
  void call(const Kernel& kernel, const Launch& launch, A&&... args);
  /// The same for a typed kernel (per_thread, per_block, cooperative): every argument is checked
  /// against the kernel's parameter at compile time and converted to its type. A pointer argument
  /// must convert to the parameter's pointer type (a float* for an int* parameter does not
  /// compile); in a call with annotations, a raw pointer for a `const T*` parameter counts as in.
  template <class... P, class... A>
  void call(const KernelOf<P...>& kernel, const Launch& launch, A&&... args);
  /// Wait for the calls the calling thread made since its last sync, then acquire what they used; a
  /// no-op with none in flight. Other threads' calls are theirs to sync.
  void sync();
  void call_args(const Kernel& kernel, const Launch& launch, std::span<const detail::CallArg> args);

  Stats stats() const;
  void reset_stats();

 private:
  friend detail::RuntimeImpl& detail::impl_of(const Runtime& runtime);
  std::unique_ptr<detail::RuntimeImpl> impl_;
};

}  // namespace hdsm

HDSM_VISIBLE_END
