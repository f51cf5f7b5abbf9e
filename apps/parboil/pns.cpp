// pns: Parboil's Petri net simulation (seed 000, Table 2). The CPU builds a token-conserving net
// (transitions with two input and two output places), writes every replica's initial marking and
// RNG seed into shared memory, then launches the simulation kernel many times with no CPU access in
// between: each call fires `steps` random transitions per replica and adds the marking to the
// replica's running sums (one sample per call). Only at the end does the CPU read the sums and the
// final markings to compute per-place statistics. Markings and sums are tens of MiB at full scale
// and stay on the device between calls, so batch-update, which moves every object on every call and
// sync, is the seed's worst case (65x in Fig. 7). Integer state and one xorshift stream per replica
// make the output bit-reproducible.
#include "apps/cuda.hpp"
#include "apps/opencl.hpp"
#include "apps/parboil/parboil.hpp"
#include "apps/parboil/pns_kernel.hpp"
#include "apps/random.hpp"

#include <hdsm/hdsm.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace hdsm::apps::parboil {
namespace {

using namespace pns_kernel;

constexpr std::uint32_t kBlock = 128;
constexpr std::size_t kSampled = 2048;  // per-replica sums sampled into the output

struct Sizes {
  std::uint32_t replicas, transitions, calls, steps;
};

Sizes sizes(Scale scale) {
  return by_scale<Sizes>(scale, {1024, 24, 6, 8}, {16384, 48, 40, 16}, {98304, 48, 48, 12});
}

inline std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Transition t takes a token from places arcs[4t] and arcs[4t+1] and puts one on arcs[4t+2] and
// arcs[4t+3] (distinct per side); m0 is the base marking the replicas perturb.
struct Net {
  std::vector<std::int32_t> arcs, m0;
};

Net build_net(const Sizes& s) {
  Net net{std::vector<std::int32_t>(std::size_t{4} * s.transitions), std::vector<std::int32_t>(kPlaces)};
  Xorshift64 rng{0x9e75eedULL};
  const auto place = [&] { return static_cast<std::int32_t>(rng.next() % kPlaces); };
  for (std::uint32_t t = 0; t < s.transitions; ++t)
    for (int side = 0; side < 2; ++side) {
      const std::int32_t a = place();
      std::int32_t b = place();
      while (b == a) b = place();
      net.arcs[4 * t + 2 * side] = a;
      net.arcs[4 * t + 2 * side + 1] = b;
    }
  for (auto& m : net.m0) m = static_cast<std::int32_t>(rng.next() % 5);
  return net;
}

void init_replicas(const Net& net, const Sizes& s, std::int32_t* marking, std::uint64_t* seeds) {
  for (std::uint32_t r = 0; r < s.replicas; ++r) {
    const std::uint64_t h = splitmix(r);
    for (std::uint32_t p = 0; p < kPlaces; ++p)
      marking[std::size_t{r} * kPlaces + p] = net.m0[p] + static_cast<std::int32_t>((h >> (2 * p)) & 1);
  }
  for (std::uint32_t r = 0; r < s.replicas; ++r) seeds[r] = splitmix(r ^ 0xabcdefULL) | 1;
}

// The OpenCL body: simulate() of pns_kernel.hpp, with Xorshift64's step and below() written out.
std::string simulate_opencl() {
  return cl_define("PLACES", kPlaces) + R"(
__kernel void pns_simulate(__global const int* arcs, __global int* marking, __global ulong* rng,
                           __global uint* sums, uint replicas, uint transitions, uint steps) {
  const ulong r = get_global_id(0);
  if (r >= replicas) return;
  __global int* mark = marking + r * PLACES;
  __global uint* sum = sums + r * PLACES;
  int m[PLACES];
  for (uint p = 0; p < PLACES; ++p) m[p] = mark[p];
  ulong s = rng[r];
  for (uint i = 0; i < steps; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    __global const int* a = arcs + 4 * (uint)(((s >> 32) * transitions) >> 32);
    const int fire = (m[a[0]] > 0) & (m[a[1]] > 0);
    m[a[0]] -= fire;
    m[a[1]] -= fire;
    m[a[2]] += fire;
    m[a[3]] += fire;
  }
  rng[r] = s;
  for (uint p = 0; p < PLACES; ++p) mark[p] = m[p];
  for (uint p = 0; p < PLACES; ++p) sum[p] += (uint)m[p];
})";
}

// One thread per replica (the CUDA body is apps/cuda/pns.cu).
const auto& simulate_kernel() {
  static const auto k = hdsm::with_opencl(
      opencl_source(simulate_opencl()),
      per_thread("pns_simulate", [](const Thread& t, const std::int32_t* arcs, std::int32_t* marking,
                                    std::uint64_t* rng, std::uint32_t* sums, std::uint32_t replicas,
                                    std::uint32_t transitions, std::uint32_t steps) {
        if (const std::uint64_t r = t.global_x(); r < replicas)
          simulate(arcs, marking + r * kPlaces, rng[r], sums + r * kPlaces, transitions, steps);
      }));
  return k;
}

// Per place: mean tokens over replicas and samples, mean final tokens; then sampled replica sums.
Output statistics(const Sizes& s, const std::uint32_t* sums, const std::int32_t* marking) {
  const std::size_t cells = std::size_t{s.replicas} * kPlaces;
  Output out{std::vector<double>(2 * std::size_t{kPlaces}, 0.0)};
  for (std::size_t i = 0; i < cells; ++i) {
    out.values[i % kPlaces] += sums[i];
    out.values[kPlaces + i % kPlaces] += marking[i];
  }
  for (std::uint32_t p = 0; p < kPlaces; ++p) {
    out.values[p] /= static_cast<double>(s.replicas) * s.calls;
    out.values[kPlaces + p] /= s.replicas;
  }
  const std::size_t stride = cells > kSampled ? cells / kSampled : 1;
  for (std::size_t i = 0; i < cells; i += stride) out.values.push_back(sums[i]);
  return out;
}

Output run_adsm(Runtime& rt, int device, Scale scale) {
  const Sizes s = sizes(scale);
  const Net net = build_net(s);
  const std::size_t cells = std::size_t{s.replicas} * kPlaces;
  auto* arcs = rt.alloc<std::int32_t>(net.arcs.size(), device);
  auto* marking = rt.alloc<std::int32_t>(cells, device);
  auto* rng = rt.alloc<std::uint64_t>(s.replicas, device);
  auto* sums = rt.alloc<std::uint32_t>(cells, device);
  std::copy(net.arcs.begin(), net.arcs.end(), arcs);
  init_replicas(net, s, marking, rng);
  for (std::uint32_t c = 0; c < s.calls; ++c) {
    rt.call(simulate_kernel(), cover(s.replicas, kBlock), arcs, marking, rng, sums, s.replicas, s.transitions,
            s.steps);
    rt.sync();
  }
  Output out = statistics(s, sums, marking);
  rt.free(arcs);
  rt.free(marking);
  rt.free(rng);
  rt.free(sums);
  return out;
}

Output run_explicit(Device& d, Scale scale) {
  const Sizes s = sizes(scale);
  const Net net = build_net(s);
  const std::size_t cells = std::size_t{s.replicas} * kPlaces;
  std::vector<std::int32_t> marking(cells);
  std::vector<std::uint64_t> rng(s.replicas);
  std::vector<std::uint32_t> sums(cells);
  init_replicas(net, s, marking.data(), rng.data());

  const std::size_t arc_bytes = net.arcs.size() * sizeof(std::int32_t), cell_bytes = cells * 4;
  const DeviceBuffer d_arcs = d.alloc(arc_bytes), d_marking = d.alloc(cell_bytes),
                     d_rng = d.alloc(rng.size() * sizeof(std::uint64_t)), d_sums = d.alloc(cell_bytes);
  auto q = d.create_queue();
  q->copy_to_device(d_arcs, 0, net.arcs.data(), arc_bytes);
  q->copy_to_device(d_marking, 0, marking.data(), cell_bytes);
  q->copy_to_device(d_rng, 0, rng.data(), rng.size() * sizeof(std::uint64_t));
  q->fill(d_sums, 0, cell_bytes, 0);
  const KernelArg args[] = {KernelArg::buffer(d_arcs),    KernelArg::buffer(d_marking),
                            KernelArg::buffer(d_rng),     KernelArg::buffer(d_sums),
                            KernelArg::value(s.replicas), KernelArg::value(s.transitions),
                            KernelArg::value(s.steps)};
  // One wait per call, as the adsm version's sync: the Parboil program waits for every kernel (which
  // is what makes batch-update move every object per call); only the data movement differs.
  for (std::uint32_t c = 0; c < s.calls; ++c) {
    q->launch(simulate_kernel(), cover(s.replicas, kBlock), args);
    q->synchronize();
  }
  q->copy_to_host(sums.data(), d_sums, 0, cell_bytes);
  q->copy_to_host(marking.data(), d_marking, 0, cell_bytes);
  q->synchronize();
  d.free(d_arcs);
  d.free(d_marking);
  d.free(d_rng);
  d.free(d_sums);
  return statistics(s, sums.data(), marking.data());
}

Output run_reference(Scale scale) {
  const Sizes s = sizes(scale);
  const Net net = build_net(s);
  const std::size_t cells = std::size_t{s.replicas} * kPlaces;
  std::vector<std::int32_t> marking(cells);
  std::vector<std::uint64_t> rng(s.replicas);
  std::vector<std::uint32_t> sums(cells, 0);
  init_replicas(net, s, marking.data(), rng.data());
  for (std::uint32_t c = 0; c < s.calls; ++c)
    for (std::uint32_t r = 0; r < s.replicas; ++r)
      simulate(net.arcs.data(), marking.data() + std::size_t{r} * kPlaces, rng[r],
               sums.data() + std::size_t{r} * kPlaces, s.transitions, s.steps);
  return statistics(s, sums.data(), marking.data());
}

}  // namespace

App pns() {
  return {"pns",
          "CPU writes net, markings and seeds; many simulation calls with no CPU access between them; CPU "
          "reads all sums and markings at the end",
          run_adsm,
          run_explicit,
          run_reference,
          1e-12};
}

}  // namespace hdsm::apps::parboil
