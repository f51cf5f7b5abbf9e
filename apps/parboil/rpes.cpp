// rpes: Parboil's Rys polynomial equation solver (seed 000, Table 2), reduced to contracted s-type
// shells, where the one-root Rys quadrature is exactly the Boys function F0. The CPU writes the
// shells (centre, exponents, contraction coefficients) into shared memory; a first call computes the
// Gaussian product data of every primitive pair on the device; then many calls, one per batch of
// bra shell pairs, each write the (ij|kl) integrals of their batch (kl <= ij) into one large shared
// output array. The CPU reads the whole output only at the end. Every call of batch-update moves the
// whole output both ways, which is why rpes is the seed's second-worst case (18x in Fig. 7).
#include "apps/cuda.hpp"
#include "apps/opencl.hpp"
#include "apps/parboil/parboil.hpp"
#include "apps/parboil/rpes_kernel.hpp"
#include "apps/random.hpp"

#include <hdsm/hdsm.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace hdsm::apps::parboil {
namespace {

using namespace rpes_kernel;

constexpr std::uint32_t kBlock = 64;
constexpr std::size_t kSampled = 4096;

struct Sizes {
  std::uint32_t shells, batch;  // batch: bra shell pairs per call
  std::uint64_t pairs() const { return std::uint64_t{shells} * (shells + 1) / 2; }
  std::uint64_t quartets() const { return pairs() * (pairs() + 1) / 2; }
};

Sizes sizes(Scale scale) { return by_scale<Sizes>(scale, {12, 16}, {48, 32}, {72, 48}); }

// Four shells per atom, from tight to diffuse, atoms scattered in a box a few bohr across; the
// tightest (core) shell is a contraction of two primitives, as in split-valence basis sets.
void make_shells(const Sizes& s, Shell* shells) {
  Xorshift64Star rng{0x59e11ULL};
  const double box = 3.0 * std::cbrt(s.shells / 4.0);
  float ax = 0, ay = 0, az = 0;
  for (std::uint32_t i = 0; i < s.shells; ++i) {
    if (i % 4 == 0) {
      ax = static_cast<float>(box * rng.uniform());
      ay = static_cast<float>(box * rng.uniform());
      az = static_cast<float>(box * rng.uniform());
    }
    const double tight = std::pow(10.0, 1.5 - 0.6 * (i % 4) + 0.3 * rng.uniform());
    const double c = i % 4 == 0 ? 0.3 + 0.4 * rng.uniform() : 1.0;
    shells[i] = Shell{ax,
                      ay,
                      az,
                      {static_cast<float>(tight), static_cast<float>(tight / (2.5 + rng.uniform()))},
                      {static_cast<float>(c), static_cast<float>(1 - c)},
                      i % 4 == 0 ? 2u : 1u};
  }
}

// The OpenCL bodies: the types and functions of rpes_kernel.hpp, and the constants they use.
const char* const kRpesOpencl = R"(
typedef struct {
  float x, y, z;
  float alpha[MAX_PRIMS];
  float coef[MAX_PRIMS];
  uint prims;
} Shell;
typedef struct { float p, x, y, z, k; } PrimPair;
typedef struct {
  PrimPair prim[MAX_PRIMS * MAX_PRIMS];
  uint prims;
} ShellPair;

ulong pair_index(ulong i, ulong j) { return i * (i + 1) / 2 + j; }

void make_pair(const Shell a, const Shell b, __global ShellPair* out) {
  const float dx = a.x - b.x, dy = a.y - b.y, dz = a.z - b.z, r2 = dx * dx + dy * dy + dz * dz;
  out->prims = a.prims * b.prims;
  for (uint u = 0; u < a.prims; ++u)
    for (uint v = 0; v < b.prims; ++v) {
      const float al = a.alpha[u], be = b.alpha[v], p = al + be;
      const float norm = pow(TWO_OVER_PI * al, 0.75f) * pow(TWO_OVER_PI * be, 0.75f);
      __global PrimPair* out_pp = &out->prim[u * b.prims + v];
      out_pp->p = p;
      out_pp->x = (al * a.x + be * b.x) / p;
      out_pp->y = (al * a.y + be * b.y) / p;
      out_pp->z = (al * a.z + be * b.z) / p;
      out_pp->k = a.coef[u] * b.coef[v] * norm * exp(-al * be / p * r2);
    }
}

float boys0(float t) {
  if (t < 1e-3f) return 1 - t / 3 + t * t / 10;
  const float r = sqrt(t);
  return 0.5f * SQRT_PI * erf(r) / r;
}

float eri(__global const ShellPair* bra, __global const ShellPair* ket) {
  float acc = 0;
  for (uint a = 0; a < bra->prims; ++a)
    for (uint b = 0; b < ket->prims; ++b) {
      const PrimPair P = bra->prim[a];
      const PrimPair Q = ket->prim[b];
      const float dx = P.x - Q.x, dy = P.y - Q.y, dz = P.z - Q.z, pq = P.p + Q.p;
      const float t = P.p * Q.p / pq * (dx * dx + dy * dy + dz * dz);
      acc += P.k * Q.k * boys0(t) / (P.p * Q.p * sqrt(pq));
    }
  return ERI_SCALE * acc;
}

__kernel void rpes_pairs(__global const Shell* shells, __global ShellPair* pairs, uint n) {
  const ulong j = get_global_id(0), i = get_global_id(1);
  if (i < n && j <= i) make_pair(shells[i], shells[j], &pairs[pair_index(i, j)]);
}

__kernel void rpes_eri(__global const ShellPair* pairs, __global float* out, ulong first, ulong npairs) {
  const ulong kl = get_global_id(0), ij = first + get_global_id(1);
  if (ij < npairs && kl <= ij) out[pair_index(ij, kl)] = eri(&pairs[ij], &pairs[kl]);
})";

std::string rpes_opencl() {
  return cl_define("MAX_PRIMS", kMaxPrims) + cl_define("TWO_OVER_PI", two_over_pi()) +
         cl_define("SQRT_PI", sqrt_pi()) + cl_define("ERI_SCALE", eri_scale()) + kRpesOpencl;
}

// The CUDA bodies of both kernels are apps/cuda/rpes.cu.
const auto& pair_kernel() {
  static const auto k = hdsm::with_opencl(
      opencl_source(rpes_opencl()),
      per_thread("rpes_pairs", [](const Thread& t, const Shell* shells, ShellPair* pairs, std::uint32_t n) {
        const std::uint64_t j = t.global_x(), i = t.global_y();
        if (i < n && j <= i) make_pair(shells[i], shells[j], pairs[pair_index(i, j)]);
      }));
  return k;
}

const auto& eri_kernel() {
  static const auto k =
      hdsm::with_opencl(opencl_source(rpes_opencl()),
                        per_thread("rpes_eri", [](const Thread& t, const ShellPair* pairs, float* out,
                                                  std::uint64_t first, std::uint64_t npairs) {
                          const std::uint64_t kl = t.global_x(), ij = first + t.global_y();
                          if (ij < npairs && kl <= ij) out[pair_index(ij, kl)] = eri(pairs[ij], pairs[kl]);
                        }));
  return k;
}

Launch pair_launch(const Sizes& s) { return {Dim3{(s.shells + 31) / 32, s.shells}, Dim3{32}, 0}; }

// Bra pairs [first, first + batch) against every ket pair up to the last bra of the batch.
Launch batch_launch(const Sizes& s, std::uint64_t first) {
  const std::uint64_t last = std::min<std::uint64_t>(first + s.batch, s.pairs());
  return {Dim3{static_cast<std::uint32_t>((last + kBlock - 1) / kBlock),
               static_cast<std::uint32_t>(last - first)},
          Dim3{kBlock}, 0};
}

// A deterministic sample of the integrals, then their sum and largest value.
Output summarise(const float* out, std::uint64_t n) {
  Output o;
  const std::uint64_t stride = n > kSampled ? n / kSampled : 1;
  for (std::uint64_t i = 0; i < n; i += stride) o.values.push_back(out[i]);
  double sum = 0, max = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    sum += out[i];
    max = std::max(max, static_cast<double>(out[i]));
  }
  o.values.push_back(sum);
  o.values.push_back(max);
  return o;
}

Output run_adsm(Runtime& rt, int device, Scale scale) {
  const Sizes s = sizes(scale);
  auto* shells = rt.alloc<Shell>(s.shells, device);
  auto* pairs = rt.alloc<ShellPair>(s.pairs(), device);
  auto* out = rt.alloc<float>(s.quartets(), device);
  make_shells(s, shells);
  rt.call(pair_kernel(), pair_launch(s), shells, pairs, s.shells);
  rt.sync();
  for (std::uint64_t first = 0; first < s.pairs(); first += s.batch) {
    rt.call(eri_kernel(), batch_launch(s, first), pairs, out, first, s.pairs());
    rt.sync();
  }
  Output o = summarise(out, s.quartets());
  rt.free(shells);
  rt.free(pairs);
  rt.free(out);
  return o;
}

Output run_explicit(Device& d, Scale scale) {
  const Sizes s = sizes(scale);
  std::vector<Shell> shells(s.shells);
  std::vector<float> out(s.quartets());
  make_shells(s, shells.data());
  const DeviceBuffer d_shells = d.alloc(shells.size() * sizeof(Shell)),
                     d_pairs = d.alloc(s.pairs() * sizeof(ShellPair)),
                     d_out = d.alloc(out.size() * sizeof(float));
  auto q = d.create_queue();
  q->copy_to_device(d_shells, 0, shells.data(), shells.size() * sizeof(Shell));
  const KernelArg pair_args[] = {KernelArg::buffer(d_shells), KernelArg::buffer(d_pairs),
                                 KernelArg::value(s.shells)};
  // One wait per call, as the adsm version's sync after every call: only the data movement differs.
  q->launch(pair_kernel(), pair_launch(s), pair_args);
  q->synchronize();
  for (std::uint64_t first = 0; first < s.pairs(); first += s.batch) {
    const KernelArg args[] = {KernelArg::buffer(d_pairs), KernelArg::buffer(d_out), KernelArg::value(first),
                              KernelArg::value(s.pairs())};
    q->launch(eri_kernel(), batch_launch(s, first), args);
    q->synchronize();
  }
  q->copy_to_host(out.data(), d_out, 0, out.size() * sizeof(float));
  q->synchronize();
  d.free(d_shells);
  d.free(d_pairs);
  d.free(d_out);
  return summarise(out.data(), out.size());
}

Output run_reference(Scale scale) {
  const Sizes s = sizes(scale);
  std::vector<Shell> shells(s.shells);
  make_shells(s, shells.data());
  std::vector<ShellPair> pairs(s.pairs());
  for (std::uint64_t i = 0; i < s.shells; ++i)
    for (std::uint64_t j = 0; j <= i; ++j) make_pair(shells[i], shells[j], pairs[pair_index(i, j)]);
  std::vector<float> out(s.quartets());
  for (std::uint64_t ij = 0; ij < s.pairs(); ++ij)
    for (std::uint64_t kl = 0; kl <= ij; ++kl) out[pair_index(ij, kl)] = eri(pairs[ij], pairs[kl]);
  return summarise(out.data(), out.size());
}

}  // namespace

App rpes() {
  return {"rpes",
          "CPU writes shells; a pair call, then one call per batch of bra pairs writing a large integral "
          "array; CPU reads the whole array at the end",
          run_adsm,
          run_explicit,
          run_reference,
          1e-4};
}

}  // namespace hdsm::apps::parboil
