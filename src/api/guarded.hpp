// How the C API and the interposed libc calls turn hdsm exceptions into a status (and the calling
// thread's last error message) or, for I/O, into libc's -1 and errno.
#pragma once

#include <hdsm/hdsm.h>
#include <hdsm/error.hpp>

#include <cerrno>
#include <exception>
#include <new>
#include <string>

namespace hdsm::api {

/// The calling thread's last error message (hdsm_last_error).
std::string& last_error();

hdsm_status status_of(Errc code);

template <class F>
hdsm_status guarded(F&& f) {
  try {
    f();
    return HDSM_SUCCESS;
  } catch (const Error& e) {
    last_error() = e.what();
    return status_of(e.code());
  } catch (const std::bad_alloc&) {
    last_error() = "out of host memory";
    return HDSM_ERROR_SYSTEM;
  } catch (const std::exception& e) {
    last_error() = e.what();
    return HDSM_ERROR_UNKNOWN;
  }
}

/// An I/O call: its result, or `failed` with errno EIO (and the message kept) when hdsm throws.
template <class R, class F>
R io_guarded(R failed, F&& f) {
  R result = failed;
  int saved = 0;  // errno as the call left it; guarded's bookkeeping must not change it
  const hdsm_status status = guarded([&] {
    result = f();
    saved = errno;
  });
  errno = status == HDSM_SUCCESS ? saved : EIO;
  return result;
}

}  // namespace hdsm::api
