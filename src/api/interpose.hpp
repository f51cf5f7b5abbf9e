// Interposition (seed 000 §4.4): libhdsm.so defines read, write, pread, pwrite, readv, writev, fread
// and fwrite, so a program linked with it has its I/O on shared objects done by hdsm (no fault, no
// restarted system call) without calling hdsm's own I/O; libhdsm_preload.so adds memcpy, memmove
// and memset. Calls on host memory cost one range check (SharedRanges::may_touch) and go to the next
// definition of the symbol, libc's, found with dlsym(RTLD_NEXT).
#pragma once

#include <hdsm/export.h>

#include <cstddef>

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

}  // namespace hdsm::api

HDSM_VISIBLE_END
