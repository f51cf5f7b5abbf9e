// Failures of MPI calls as hdsm errors, for the runtimes that talk MPI themselves (crc's engine, the
// cluster's transport). The words describing the object are made only on a failure: nothing is
// allocated before a call (a rank out of memory there would leave the others in a collective), nor
// on every poll of a request.
#pragma once

#include <hdsm/error.hpp>

#include <fmt/format.h>
#include <mpi.h>

#include <string>
#include <string_view>
#include <type_traits>

namespace hdsm::mpi_detail {

/// `check(rc, "MPI_Send", "page 3 to rank 1")`, or with a callable that makes the words. Throws
/// Error(Errc::system) "<who>: <call> (<what>) failed: <MPI's text>" when rc is not MPI_SUCCESS.
struct CallCheck {
  const char* who;  // "crc over MPI"

  [[noreturn]] void fail(int rc, const char* call, std::string_view what) const {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    // The profiling entry point: past libhdsm_mpi's interposition, which has no business here.
    if (PMPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
    const std::string why = length > 0 ? std::string(text, static_cast<std::size_t>(length))
                                       : fmt::format("MPI error code {}", rc);
    throw Error(Errc::system, fmt::format("{}: {} ({}) failed: {}", who, call, what, why));
  }
  void operator()(int rc, const char* call, std::string_view what) const {
    if (rc != MPI_SUCCESS) fail(rc, call, what);
  }
  template <class Describe>
  requires std::is_invocable_r_v<std::string, Describe&>
  void operator()(int rc, const char* call, Describe&& describe) const {
    if (rc != MPI_SUCCESS) fail(rc, call, describe());
  }
};

}  // namespace hdsm::mpi_detail
