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

/// One step at point (x, y) of plane `local_z` of a slab of the volume `s` (planes of nx * ny points;
/// the multi-device stencil keeps a halo plane on each side of its slab), whose global plane is
/// `global_z`: boundary points of the volume keep their value.
HDSM_APPS_HD inline void step_slab_point(const float* u, float* next, const Shape& s, std::uint32_t x,
                                         std::uint32_t y, std::uint32_t local_z, std::uint32_t global_z) {
  const std::size_t sx = s.nx, sxy = std::size_t{s.nx} * s.ny, i = local_z * sxy + y * sx + x;
  next[i] = boundary(x, y, global_z, s) ? u[i] : update(u, i, sx, sxy);
}

/// One step at point (x, y, z) of the volume: boundary points keep their value.
HDSM_APPS_HD inline void step_point(const float* u, float* next, const Shape& s, std::uint32_t x,
                                    std::uint32_t y, std::uint32_t z) {
  step_slab_point(u, next, s, x, y, z, z);
}

/// Which planes a launch of the slab kernel updates: block z of the grid is local plane
/// first + z, whose global plane is origin + first + z (origin: the global plane of local plane 0,
/// -1 for the first slab, whose halo plane lies outside the volume).
struct Planes {
  std::uint32_t first;
  std::int32_t origin;
};

}  // namespace hdsm::apps::stencil_kernel
