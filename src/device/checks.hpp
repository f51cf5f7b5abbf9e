// Argument checks the OpenCL and CUDA backends make before they enqueue anything, with one wording.
#pragma once

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <cstddef>
#include <string>

namespace hdsm {

/// InvalidArgument when a copy of `bytes` > 0 bytes has a null host pointer.
inline void require_host(const void* p, std::size_t bytes, const char* what, const std::string& device) {
  if (p == nullptr && bytes != 0) throw InvalidArgument(fmt::format("{} on {}: the host pointer is null", what, device));
}

/// InvalidArgument unless [offset, offset + bytes) lies inside a buffer of `size` bytes.
inline void require_range(const std::string& what, const std::string& device, std::size_t offset, std::size_t bytes,
                          std::size_t size) {
  if (offset > size || bytes > size - offset)
    throw InvalidArgument(fmt::format("{} on {}: bytes [{}, {}) are past the end of a {}-byte buffer", what, device,
                                      offset, offset + bytes, size));
}

}  // namespace hdsm
