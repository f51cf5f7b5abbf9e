// What cp's kernel bodies share (see apps/host_device.hpp): the atom argument, the lattice
// constants and the work of one thread.
#pragma once

#include "apps/host_device.hpp"

#include <cmath>
#include <cstdint>

namespace hdsm::apps::parboil::cp_kernel {

// One atom as the kernel sees it: the squared distance to the plane is precomputed by the CPU, as
// Parboil's copyatomstoconstbuf does.
struct AtomInfo {
  float x, y, dz2, q;
};

constexpr float kSpacing = 0.1f;
constexpr std::uint32_t kUnroll = 8;  // grid points per thread along x (Parboil's UNROLLX)

/// The thread that owns the kUnroll consecutive points of row y from x0 on adds the potential of
/// atoms[0, count) to them.
HDSM_APPS_HD inline void add_energy(float* grid, const AtomInfo* atoms, std::uint32_t count, std::uint32_t nx,
                                    std::uint64_t x0, std::uint64_t y) {
  const float py = kSpacing * static_cast<float>(y);
  float px[kUnroll], e[kUnroll] = {};
  for (std::uint32_t k = 0; k < kUnroll; ++k) px[k] = kSpacing * static_cast<float>(x0 + k);
  for (std::uint32_t i = 0; i < count; ++i) {
    const AtomInfo a = atoms[i];
    const float dy = py - a.y;
    const float dyz2 = dy * dy + a.dz2;
    for (std::uint32_t k = 0; k < kUnroll; ++k) {
      const float dx = px[k] - a.x;
      e[k] += a.q / std::sqrt(dx * dx + dyz2);
    }
  }
  float* row = grid + y * nx + x0;
  for (std::uint32_t k = 0; k < kUnroll; ++k) row[k] += e[k];
}

}  // namespace hdsm::apps::parboil::cp_kernel
