// What rpes's kernel bodies share (see apps/host_device.hpp): shells and their Gaussian products,
// the constants, and the integral code, which the reference runs too.
#pragma once

#include "apps/host_device.hpp"

#include <cmath>
#include <cstdint>

namespace hdsm::apps::parboil::rpes_kernel {

constexpr int kMaxPrims = 2;  // primitives of a contracted (core) shell; valence shells have one
// std::numbers::pi (<numbers> is C++20; nvcc compiles this header as C++17).
constexpr double kPi = 3.141592653589793238462643383279502884;

struct Shell {
  float x, y, z;
  float alpha[kMaxPrims];
  float coef[kMaxPrims];
  std::uint32_t prims;
};

// A Gaussian product: exponent p, centre P, and prefactor K (coefficients, normalisation, overlap).
struct PrimPair {
  float p, x, y, z, k;
};

struct ShellPair {
  PrimPair prim[kMaxPrims * kMaxPrims];
  std::uint32_t prims;
};

// The constants of make_pair, boys0 and eri (also the OpenCL body's #defines).
HDSM_APPS_HD inline float two_over_pi() { return static_cast<float>(2 / kPi); }
HDSM_APPS_HD inline float sqrt_pi() { return std::sqrt(static_cast<float>(kPi)); }
HDSM_APPS_HD inline float eri_scale() { return static_cast<float>(2 * std::pow(kPi, 2.5)); }

HDSM_APPS_HD inline std::uint64_t pair_index(std::uint64_t i, std::uint64_t j) { return i * (i + 1) / 2 + j; }

HDSM_APPS_HD inline void make_pair(const Shell& a, const Shell& b, ShellPair& out) {
  const float dx = a.x - b.x, dy = a.y - b.y, dz = a.z - b.z, r2 = dx * dx + dy * dy + dz * dz;
  out.prims = a.prims * b.prims;
  for (std::uint32_t u = 0; u < a.prims; ++u)
    for (std::uint32_t v = 0; v < b.prims; ++v) {
      const float al = a.alpha[u], be = b.alpha[v], p = al + be;
      const float norm = std::pow(two_over_pi() * al, 0.75f) * std::pow(two_over_pi() * be, 0.75f);
      out.prim[u * b.prims + v] =
          PrimPair{p, (al * a.x + be * b.x) / p, (al * a.y + be * b.y) / p, (al * a.z + be * b.z) / p,
                   a.coef[u] * b.coef[v] * norm * std::exp(-al * be / p * r2)};
    }
}

// F0(t) = integral of exp(-t u^2) over [0, 1]: a short series near 0, the erf form elsewhere.
HDSM_APPS_HD inline float boys0(float t) {
  if (t < 1e-3f) return 1 - t / 3 + t * t / 10;
  const float r = std::sqrt(t);
  return 0.5f * sqrt_pi() * std::erf(r) / r;
}

HDSM_APPS_HD inline float eri(const ShellPair& bra, const ShellPair& ket) {
  float acc = 0;
  for (std::uint32_t a = 0; a < bra.prims; ++a)
    for (std::uint32_t b = 0; b < ket.prims; ++b) {
      const PrimPair& P = bra.prim[a];
      const PrimPair& Q = ket.prim[b];
      const float dx = P.x - Q.x, dy = P.y - Q.y, dz = P.z - Q.z, pq = P.p + Q.p;
      const float t = P.p * Q.p / pq * (dx * dx + dy * dy + dz * dz);
      acc += P.k * Q.k * boys0(t) / (P.p * Q.p * std::sqrt(pq));
    }
  return eri_scale() * acc;
}

}  // namespace hdsm::apps::parboil::rpes_kernel
