/* hdsm C API. Every call returns an hdsm_status; on failure hdsm_last_error() gives the message
 * of the calling thread's last error. The calls use the implicit default runtime, which is created
 * on first use (after any hdsm_config_set) and destroyed at exit. */
#ifndef HDSM_HDSM_H
#define HDSM_HDSM_H

#include <hdsm/export.h>
#include <hdsm/version.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

HDSM_VISIBLE_BEGIN

typedef enum hdsm_status {
  HDSM_SUCCESS = 0,
  HDSM_ERROR_INVALID_ARGUMENT = 1,
  HDSM_ERROR_INVALID_POINTER = 2,
  HDSM_ERROR_OUT_OF_DEVICE_MEMORY = 3,
  HDSM_ERROR_CONFIG = 4,
  HDSM_ERROR_UNSUPPORTED = 5,
  HDSM_ERROR_NO_DEVICE = 6,
  HDSM_ERROR_KERNEL_FAILURE = 7,
  HDSM_ERROR_SYSTEM = 8,
  HDSM_ERROR_UNKNOWN = 99
} hdsm_status;

/* Message of the calling thread's last failed call ("" if none). */
const char* hdsm_last_error(void);
const char* hdsm_version(void);

/* Set a knob (e.g. "HDSM_SIM_DEVICES", "4") before the default runtime is created. */
hdsm_status hdsm_config_set(const char* name, const char* value);

typedef struct hdsm_device_info {
  char name[64];
  char backend[16];
  uint64_t memory_bytes;
  uint32_t copy_engines;
  int32_t peer_group;
  double link_gbps;
} hdsm_device_info;

hdsm_status hdsm_device_count(size_t* count);
hdsm_status hdsm_device_get_info(size_t index, hdsm_device_info* info);

typedef struct hdsm_route_stats {
  uint64_t bytes;
  uint64_t transfers;
} hdsm_route_stats;

typedef struct hdsm_stats {
  hdsm_route_stats h2d, d2h, d2d, peer;
  uint64_t kernel_launches;
  uint64_t read_faults, write_faults;
  /* Contended acquisitions of hdsm's enqueue locks and the time threads spent blocked on them. */
  uint64_t lock_waits, lock_wait_ns;
} hdsm_stats;

hdsm_status hdsm_stats_get(hdsm_stats* stats);

/* Shared memory (ADSM): a zero-filled object of `bytes` hosted by `device` (-1: the default device)
 * whose pointer the CPU and kernels share. hdsm_free takes the start of such an object (NULL: no-op);
 * hdsm_sync waits for the kernel calls the calling thread made since its last sync and makes their
 * results visible to the CPU (each thread syncs its own calls). */
hdsm_status hdsm_alloc(size_t bytes, int device, void** out);
hdsm_status hdsm_free(void* pointer);
hdsm_status hdsm_sync(void);
hdsm_status hdsm_stats_reset(void);

/* Kernels from C (GMAC's adsmLaunch): a kernel has a name, a host body (which the CPU executor and
 * the sim devices run, every thread of the grid once) and, for OpenCL devices, OpenCL C source whose
 * __kernel function has the kernel's name and the call's arguments in order. A body reads argument i
 * at args[i]: a value argument's bytes, or a pointer argument's translated pointer
 * (`float* b = *(float* const*)args[1];`). NULL source: no OpenCL body; NULL body: OpenCL only. */
typedef struct hdsm_dim3 {
  uint32_t x, y, z;
} hdsm_dim3;
typedef struct hdsm_thread {
  hdsm_dim3 idx, block, block_dim, grid_dim; /* threadIdx, blockIdx, blockDim, gridDim */
} hdsm_thread;
typedef void (*hdsm_thread_fn)(const hdsm_thread* thread, void* const* args);
typedef struct hdsm_kernel_s* hdsm_kernel;
hdsm_status hdsm_kernel_create(const char* name, hdsm_thread_fn body, const char* opencl_source,
                               hdsm_kernel* out);
/* NULL: no-op. The calls made with it may still run: destroy it after their hdsm_sync. */
hdsm_status hdsm_kernel_destroy(hdsm_kernel kernel);

/* One argument of hdsm_call: a value (`data` points at its `size` bytes, 1 to 64), a plain pointer
 * (translated when it points into a shared object, counted as read and written), or a shared pointer
 * the kernel only reads (IN), only writes (OUT) or both (INOUT); with any IN/OUT/INOUT argument
 * only the objects the call names are released and acquired, as hdsm::in/out/inout. */
typedef enum hdsm_arg_kind {
  HDSM_ARG_VALUE = 0,
  HDSM_ARG_POINTER = 1,
  HDSM_ARG_IN = 2,
  HDSM_ARG_OUT = 3,
  HDSM_ARG_INOUT = 4
} hdsm_arg_kind;
typedef struct hdsm_arg {
  hdsm_arg_kind kind;
  const void* data; /* VALUE: the value's bytes; else the pointer itself */
  size_t size;      /* VALUE: the value's size; else 0 */
} hdsm_arg;
/* C99 compound literals, for C programs; C++ writes the braces itself: hdsm_arg{HDSM_ARG_IN, p, 0}. */
#define HDSM_VALUE(lvalue) ((hdsm_arg){HDSM_ARG_VALUE, &(lvalue), sizeof(lvalue)})
#define HDSM_POINTER(p) ((hdsm_arg){HDSM_ARG_POINTER, (p), 0})
#define HDSM_IN(p) ((hdsm_arg){HDSM_ARG_IN, (p), 0})
#define HDSM_OUT(p) ((hdsm_arg){HDSM_ARG_OUT, (p), 0})
#define HDSM_INOUT(p) ((hdsm_arg){HDSM_ARG_INOUT, (p), 0})
/* Releases, then launches `kernel` asynchronously on `grid` blocks of `block` threads with
 * `shared_bytes` of dynamic shared memory (the OpenCL body's trailing __local argument), on the
 * device hosting its first shared-pointer argument (the default device with none); hdsm_sync
 * waits for it. Launch limits are CUDA's, on every backend. */
hdsm_status hdsm_call(hdsm_kernel kernel, hdsm_dim3 grid, hdsm_dim3 block, size_t shared_bytes,
                      const hdsm_arg* args, size_t count);

/* GMAC's adsmSafeAlloc and adsmSafe. hdsm_safe_alloc is hdsm_alloc: hdsm translates every pointer
 * argument of a kernel call, so every object is already what GMAC calls a safe allocation.
 * hdsm_safe gives the address kernels of the hosting device see for `pointer` (which may point inside
 * an object), to store in shared data that kernels follow; never dereference it on the host. */
hdsm_status hdsm_safe_alloc(size_t bytes, int device, void** out);
hdsm_status hdsm_safe(const void* pointer, void** out);

/* Bulk memory on any mix of host memory and shared objects (hdsm::Runtime::memcpy): blocks whose
 * host copy is invalid are filled or copied on the device, never fetched; no page fault is raised.
 * A shared range must lie in live objects (HDSM_INVALID_ARGUMENT otherwise, nothing written). Under
 * HDSM_PROTOCOL=um and host-mapped a freed object's memory is unmapped, and a range in it faults as
 * after free(). hdsm_memcpy accepts overlapping ranges. */
hdsm_status hdsm_memcpy(void* dst, const void* src, size_t bytes);
hdsm_status hdsm_memmove(void* dst, const void* src, size_t bytes);
hdsm_status hdsm_memset(void* dst, int value, size_t bytes);

/* The asynchronous form of hdsm_memcpy (hdsm::Runtime::memcpy_async): the copy is planned and started
 * (peer DMA, or double-buffered staging through pinned chunks) and `*out` names its completion.
 * Until the event completes, the source must not change and neither range may be read or written.
 * Overlapping ranges are allowed; such a copy goes through a bounce buffer and is complete on return.
 * Every event must be given to hdsm_event_destroy, which does not wait: the copy still finishes. */
typedef struct hdsm_event_s* hdsm_event;
hdsm_status hdsm_memcpy_async(void* dst, const void* src, size_t bytes, hdsm_event* out);
/* *done = 1 once the copy has finished (successfully or not), 0 while it runs. */
hdsm_status hdsm_event_query(hdsm_event event, int* done);
/* Waits for the copy; a failed copy returns its error here (the event stays valid). */
hdsm_status hdsm_event_wait(hdsm_event event);
/* NULL: no-op. */
hdsm_status hdsm_event_destroy(hdsm_event event);

/* I/O with buffers in shared memory (hdsm::Runtime::read and the rest): the libc calls' arguments,
 * results and errno, on the default runtime. A buffer range leaving the live shared objects gives -1
 * and EFAULT (hdsm_fread/hdsm_fwrite: 0) before anything moves; a device failure gives -1 and EIO,
 * with the message in hdsm_last_error(). Host-memory buffers go straight to libc.
 * A program linked with libhdsm gets the same for its plain read, write, pread, pwrite, readv, writev,
 * preadv, pwritev, fread and fwrite calls (symbol interposition, whichever runtime owns the buffer); running
 * it with LD_PRELOAD=libhdsm_preload.so does so for memcpy, memmove and memset too. */
ssize_t hdsm_read(int fd, void* buf, size_t bytes);
ssize_t hdsm_write(int fd, const void* buf, size_t bytes);
ssize_t hdsm_pread(int fd, void* buf, size_t bytes, off_t offset);
ssize_t hdsm_pwrite(int fd, const void* buf, size_t bytes, off_t offset);
ssize_t hdsm_readv(int fd, const struct iovec* iov, int count);
ssize_t hdsm_writev(int fd, const struct iovec* iov, int count);
ssize_t hdsm_preadv(int fd, const struct iovec* iov, int count, off_t offset);
ssize_t hdsm_pwritev(int fd, const struct iovec* iov, int count, off_t offset);
size_t hdsm_fread(void* buf, size_t size, size_t count, FILE* stream);
size_t hdsm_fwrite(const void* buf, size_t size, size_t count, FILE* stream);

HDSM_VISIBLE_END

#ifdef __cplusplus
}
#endif

#endif /* HDSM_HDSM_H */
