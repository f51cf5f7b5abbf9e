// What the stencil's kernel bodies share (see apps/host_device.hpp): the shape argument, the
// weights, and the update of one point, which the reference computes with the same function.
#pragma once

#include "apps/host_device.hpp"

#include <cstddef>
#include <cstdint>

namespace hdsm::apps::stencil_kernel {

constexpr float kCentre = 0.4f, kNeighbour = 0.1f;

struct Shape {
  std::uint32_t nx, ny, nz;
};

HDSM_APPS_HD inline float update(const float* u, std::size_t i, std::size_t sx, std::size_t sxy) {
  return kCentre * u[i] +
         kNeighbour * (((u[i - 1] + u[i + 1]) + (u[i - sx] + u[i + sx])) + (u[i - sxy] + u[i + sxy]));
}

HDSM_APPS_HD inline bool boundary(std::uint32_t x, std::uint32_t y, std::uint32_t z, const Shape& s) {
  return x == 0 || y == 0 || z == 0 || x + 1 == s.nx || y + 1 == s.ny || z + 1 == s.nz;
}

/// One step at point (x, y, z) of the volume: boundary points keep their value.
HDSM_APPS_HD inline void step_point(const float* u, float* next, const Shape& s, std::uint32_t x,
                                    std::uint32_t y, std::uint32_t z) {
  const std::size_t sx = s.nx, sxy = std::size_t{s.nx} * s.ny, i = z * sxy + y * sx + x;
  next[i] = boundary(x, y, z, s) ? u[i] : update(u, i, sx, sxy);
}

}  // namespace hdsm::apps::stencil_kernel
