// What the kernel bodies of mri-q and mri-fhd share (see apps/host_device.hpp): the packed k-space
// values, the first calls' per-sample arithmetic and the second phase's work of one voxel.
#pragma once

#include "apps/host_device.hpp"

#include <cmath>
#include <cstdint>

namespace hdsm::apps::parboil::mri {

constexpr float kTwoPi = 6.2831853071795864769f;

/// mri-q's first call: |phi|^2.
HDSM_APPS_HD inline float phi_magnitude(float re, float im) { return re * re + im * im; }
/// mri-fhd's first call: rhoPhi = conj(phi) * d.
HDSM_APPS_HD inline float rho_real(float pr, float pi, float dr, float di) { return pr * dr + pi * di; }
HDSM_APPS_HD inline float rho_imag(float pr, float pi, float dr, float di) { return pr * di - pi * dr; }

/// One k-space sample as mri-q's second phase sees it, and what it adds per sample.
struct QValue {
  float kx, ky, kz, phi_mag;
};
struct AddQ {
  HDSM_APPS_HD void operator()(float& r, float& im, const QValue& kv, float arg) const {
    r += kv.phi_mag * std::cos(arg);
    im += kv.phi_mag * std::sin(arg);
  }
};

/// The same for mri-fhd.
struct FhdValue {
  float kx, ky, kz, rho_r, rho_i;
};
struct AddFhd {
  HDSM_APPS_HD void operator()(float& r, float& im, const FhdValue& kv, float arg) const {
    const float c = std::cos(arg), sn = std::sin(arg);
    r += kv.rho_r * c - kv.rho_i * sn;
    im += kv.rho_i * c + kv.rho_r * sn;
  }
};

/// The second phase at voxel i (no-op past the last voxel): the chunk's samples kv[0, count) added
/// to its sums re[i] and im_sums[i], add(r, im, kv[k], arg) for sample k at phase arg.
template <class KValue, class Add>
HDSM_APPS_HD inline void accumulate_voxel(const float* x, const float* y, const float* z, float* re,
                                          float* im_sums, const KValue* kv, std::uint32_t count,
                                          std::uint32_t voxels, std::uint64_t i, const Add& add) {
  if (i >= voxels) return;
  const float xi = x[i], yi = y[i], zi = z[i];
  float r = re[i], im = im_sums[i];
  for (std::uint32_t k = 0; k < count; ++k) {
    const float arg = kTwoPi * (kv[k].kx * xi + kv[k].ky * yi + kv[k].kz * zi);
    add(r, im, kv[k], arg);
  }
  re[i] = r;
  im_sums[i] = im;
}

}  // namespace hdsm::apps::parboil::mri
