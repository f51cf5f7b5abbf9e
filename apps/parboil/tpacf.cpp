// tpacf: Parboil's two-point angular correlation function (seed 000, Table 2 and section 5.3). The
// CPU reads a data catalogue and R random catalogues (right ascension, declination) and converts
// them into one shared array of unit vectors in three passes, x, then y, then z, each sweeping the
// whole array: the pattern behind the seed's Fig. 12, where small rolling sizes evict a block after
// one pass and every later pass faults it back. Then one histogram call per pair of sets (DD once,
// DR and RR per random set); after each sync the CPU reads that call's per-block histograms and
// accumulates them. Each point of the first set is paired with a window of `partners` points of the
// second, a sampled estimator that keeps the O(n^2) pair count within the bench's time budget.
#include "apps/cuda.hpp"
#include "apps/opencl.hpp"
#include "apps/parboil/parboil.hpp"
#include "apps/parboil/tpacf_kernel.hpp"
#include "apps/random.hpp"

#include <hdsm/hdsm.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

namespace hdsm::apps::parboil {
namespace {

using namespace tpacf_kernel;

constexpr std::uint32_t kBlock = 128;

struct Sizes {
  std::uint32_t points;    // per catalogue
  std::uint32_t randoms;   // random catalogues
  std::uint32_t partners;  // points of the second set each point is paired with
};

Sizes sizes(Scale scale) { return by_scale<Sizes>(scale, {2048, 2, 24}, {32768, 3, 24}, {131072, 5, 24}); }

// The catalogue files as Parboil reads them: degrees, data catalogue first. The data is clustered
// around a few hundred centres over a uniform background, so DD differs from RR.
struct Sky {
  std::vector<double> ra, dec;
};

Sky read_catalogues(const Sizes& s) {
  const std::size_t total = std::size_t{s.points} * (s.randoms + 1);
  Sky sky{std::vector<double>(total), std::vector<double>(total)};
  Xorshift64Star rng{0x7ac0f5eedULL};
  const auto uniform_dec = [&] { return std::asin(2 * rng.uniform() - 1) * 180 / std::numbers::pi; };
  std::vector<double> cra(256), cdec(256);
  for (std::size_t c = 0; c < cra.size(); ++c) {
    cra[c] = 360 * rng.uniform();
    cdec[c] = uniform_dec();
  }
  const auto bump = [&] { return (rng.uniform() + rng.uniform() + rng.uniform() - 1.5) * 1.2; };
  for (std::size_t i = 0; i < total; ++i) {
    if (i < s.points && (rng.next() & 1) != 0) {
      const std::size_t c = rng.next() % cra.size();
      sky.dec[i] = cdec[c] + bump();
      sky.ra[i] = cra[c] + bump() / std::max(0.05, std::cos(cdec[c] * std::numbers::pi / 180));
    } else {
      sky.ra[i] = 360 * rng.uniform();
      sky.dec[i] = uniform_dec();
    }
  }
  return sky;
}

// Three sweeps, one coordinate each, as Parboil's reader fills its arrays.
void convert(Point* p, const Sky& sky) {
  constexpr double rad = std::numbers::pi / 180;
  const std::size_t n = sky.ra.size();
  for (std::size_t i = 0; i < n; ++i)
    p[i].x = static_cast<float>(std::cos(sky.dec[i] * rad) * std::cos(sky.ra[i] * rad));
  for (std::size_t i = 0; i < n; ++i)
    p[i].y = static_cast<float>(std::cos(sky.dec[i] * rad) * std::sin(sky.ra[i] * rad));
  for (std::size_t i = 0; i < n; ++i) p[i].z = static_cast<float>(std::sin(sky.dec[i] * rad));
}

// Cosines of angles from 4 to 8000 arcminutes, log-spaced: descending.
void bin_bounds(float* binb) {
  for (int k = 0; k < kBounds; ++k) {
    const double arcmin = 4 * std::pow(2000.0, static_cast<double>(k) / (kBounds - 1));
    binb[k] = static_cast<float>(std::cos(arcmin / 60 * std::numbers::pi / 180));
  }
}

// A histogram as count_pairs counts into it (in the host body and the reference).
struct CountInto {
  std::uint64_t* hist;
  void operator()(int bin) const { ++hist[bin]; }
};

// The OpenCL body: count_pairs and bin_of of tpacf_kernel.hpp. Its threads run at once, so they
// count into the block histogram with local atomics, in 32 bits (a block counts at most block size
// * partners pairs); the sums are integers, the same whatever the order.
std::string histogram_opencl() {
  return cl_define("BOUNDS", kBounds) + cl_define("SLOTS", kSlots) + R"(
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef struct { float x, y, z; } Point;

__kernel void tpacf_histogram(__global const Point* set1, uint n, __global const Point* set2, uint partners,
                              uint self, __global const float* binb, __global ulong* hist) {
  __local uint h[SLOTS];
  __local float bounds[BOUNDS];
  const uint size = (uint)(get_local_size(0) * get_local_size(1) * get_local_size(2));
  const uint rank =
      (uint)((get_local_id(2) * get_local_size(1) + get_local_id(1)) * get_local_size(0) + get_local_id(0));
  for (uint k = rank; k < SLOTS; k += size) h[k] = 0;
  for (uint k = rank; k < BOUNDS; k += size) bounds[k] = binb[k];
  barrier(CLK_LOCAL_MEM_FENCE);
  const ulong i = get_global_id(0);
  if (i < n) {
    const Point p = set1[i];
    ulong j = self != 0 ? i + 1 : i;
    for (uint k = 0; k < partners; ++k, ++j) {
      const Point q = set2[j < n ? j : j - n];
      const double dot = (double)p.x * q.x + (double)p.y * q.y + (double)p.z * q.z;
      const float d = (float)dot;
      int bin = 0;
      for (int b = 0; b < BOUNDS; ++b) bin += bounds[b] > d ? 1 : 0;
      atomic_inc(&h[bin]);
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint k = rank; k < SLOTS; k += size) hist[get_group_id(0) * SLOTS + k] = h[k];
})";
}

// One block histogram in shared memory, written out per block: no atomics, deterministic. The CUDA
// body (apps/cuda/tpacf.cu) counts as the OpenCL body does.
const auto& histogram_kernel() {
  static const auto k = hdsm::with_opencl(
      opencl_source(histogram_opencl()),
      per_block("tpacf_histogram",
                [](Block& b, const Point* set1, std::uint32_t n, const Point* set2, std::uint32_t partners,
                   std::uint32_t self, const float* binb, std::uint64_t* hist) {
                  std::uint64_t* h = b.shared<std::uint64_t>(kSlots);
                  float* bounds = b.shared<float>(kBounds);
                  std::fill(h, h + kSlots, std::uint64_t{0});
                  std::copy(binb, binb + kBounds, bounds);
                  b.threads([&](const Thread& t) {
                    if (const std::uint64_t i = t.global_x(); i < n)
                      count_pairs(CountInto{h}, bounds, set1[i], i, set2, n, partners, self);
                  });
                  std::copy(h, h + kSlots, hist + std::size_t{b.index().x} * kSlots);
                }));
  return k;
}

// The calls of one run: {first set, second set}; set 0 is the data catalogue.
std::vector<std::array<std::uint32_t, 2>> pairings(const Sizes& s) {
  std::vector<std::array<std::uint32_t, 2>> out{{0, 0}};
  for (std::uint32_t r = 1; r <= s.randoms; ++r) {
    out.push_back({0, r});
    out.push_back({r, r});
  }
  return out;
}

// Call 0 is DD, odd calls DR and even ones RR: the output is DD, then DR and RR summed over the
// random sets.
void add_blocks(Output& out, std::size_t call, const std::uint64_t* hist, std::size_t blocks) {
  const std::size_t section = call == 0 ? 0 : (call % 2 == 1 ? 1 : 2);
  for (std::size_t blk = 0; blk < blocks; ++blk)
    for (int k = 0; k < kSlots; ++k)
      out.values[section * kSlots + k] += static_cast<double>(hist[blk * kSlots + k]);
}

struct SharedInput {
  Point* points;
  float* binb;
  std::uint64_t* hist;
  std::size_t blocks;
};

SharedInput init_shared(Runtime& rt, int device, const Sizes& s) {
  const std::size_t blocks = cover(s.points, kBlock).grid.x;
  SharedInput in{rt.alloc<Point>(std::size_t{s.points} * (s.randoms + 1), device),
                 rt.alloc<float>(kBounds, device), rt.alloc<std::uint64_t>(blocks * kSlots, device), blocks};
  convert(in.points, read_catalogues(s));
  bin_bounds(in.binb);
  return in;
}

void histogram_call(Runtime& rt, const SharedInput& in, const Sizes& s, std::array<std::uint32_t, 2> sets) {
  rt.call(histogram_kernel(), cover(s.points, kBlock), in.points + std::size_t{sets[0]} * s.points, s.points,
          in.points + std::size_t{sets[1]} * s.points, s.partners, std::uint32_t{sets[0] == sets[1]}, in.binb,
          in.hist);
  rt.sync();
}

void free_shared(Runtime& rt, const SharedInput& in) {
  rt.free(in.points);
  rt.free(in.binb);
  rt.free(in.hist);
}

Output run_adsm(Runtime& rt, int device, Scale scale) {
  const Sizes s = sizes(scale);
  const SharedInput in = init_shared(rt, device, s);
  Output out{std::vector<double>(std::size_t{3} * kSlots, 0.0)};
  const auto calls = pairings(s);
  for (std::size_t c = 0; c < calls.size(); ++c) {
    histogram_call(rt, in, s, calls[c]);
    add_blocks(out, c, in.hist, in.blocks);
  }
  free_shared(rt, in);
  return out;
}

Output run_explicit(Device& d, Scale scale) {
  const Sizes s = sizes(scale);
  const Launch launch = cover(s.points, kBlock);
  const std::size_t blocks = launch.grid.x;
  std::vector<Point> points(std::size_t{s.points} * (s.randoms + 1));
  convert(points.data(), read_catalogues(s));
  std::vector<float> binb(kBounds);
  bin_bounds(binb.data());
  std::vector<std::uint64_t> hist(blocks * kSlots);

  const std::size_t point_bytes = points.size() * sizeof(Point),
                    set_bytes = std::size_t{s.points} * sizeof(Point);
  const DeviceBuffer d_points = d.alloc(point_bytes), d_binb = d.alloc(kBounds * sizeof(float)),
                     d_hist = d.alloc(hist.size() * sizeof(std::uint64_t));
  auto q = d.create_queue();
  q->copy_to_device(d_points, 0, points.data(), point_bytes);
  q->copy_to_device(d_binb, 0, binb.data(), kBounds * sizeof(float));
  Output out{std::vector<double>(std::size_t{3} * kSlots, 0.0)};
  const auto calls = pairings(s);
  for (std::size_t c = 0; c < calls.size(); ++c) {
    const KernelArg args[] = {KernelArg::buffer(d_points, calls[c][0] * set_bytes),
                              KernelArg::value(s.points),
                              KernelArg::buffer(d_points, calls[c][1] * set_bytes),
                              KernelArg::value(s.partners),
                              KernelArg::value(std::uint32_t{calls[c][0] == calls[c][1]}),
                              KernelArg::buffer(d_binb),
                              KernelArg::buffer(d_hist)};
    q->launch(histogram_kernel(), launch, args);
    q->copy_to_host(hist.data(), d_hist, 0, hist.size() * sizeof(std::uint64_t));
    q->synchronize();
    add_blocks(out, c, hist.data(), blocks);
  }
  d.free(d_points);
  d.free(d_binb);
  d.free(d_hist);
  return out;
}

Output run_reference(Scale scale) {
  const Sizes s = sizes(scale);
  std::vector<Point> points(std::size_t{s.points} * (s.randoms + 1));
  convert(points.data(), read_catalogues(s));
  float binb[kBounds];
  bin_bounds(binb);
  Output out{std::vector<double>(std::size_t{3} * kSlots, 0.0)};
  const auto calls = pairings(s);
  for (std::size_t c = 0; c < calls.size(); ++c) {
    std::uint64_t hist[kSlots] = {};
    const Point* set1 = points.data() + std::size_t{calls[c][0]} * s.points;
    const Point* set2 = points.data() + std::size_t{calls[c][1]} * s.points;
    for (std::uint64_t i = 0; i < s.points; ++i)
      count_pairs(CountInto{hist}, binb, set1[i], i, set2, s.points, s.partners,
                  std::uint32_t{calls[c][0] == calls[c][1]});
    add_blocks(out, c, hist, 1);
  }
  return out;
}

}  // namespace

// The points in global memory; each pairing's launch writes every block's histogram into global
// memory, which the host copies out and adds up.
Output tpacf_grid(GridTarget& g, Scale scale) {
  const Sizes s = sizes(scale);
  const Launch launch = cover(s.points, kBlock);
  const std::size_t blocks = launch.grid.x;
  std::vector<Point> points(std::size_t{s.points} * (s.randoms + 1));
  convert(points.data(), read_catalogues(s));
  std::vector<float> binb(kBounds);
  bin_bounds(binb.data());
  std::vector<std::uint64_t> hist(blocks * kSlots);
  Point* d_points = g.alloc<Point>(points.size());
  std::uint64_t* d_hist = g.alloc<std::uint64_t>(hist.size());
  g.to_global(d_points, points.data(), points.size() * sizeof(Point));
  Output out{std::vector<double>(std::size_t{3} * kSlots, 0.0)};
  const auto calls = pairings(s);
  for (std::size_t c = 0; c < calls.size(); ++c) {
    g.call(histogram_kernel(), launch, d_points + std::size_t{calls[c][0]} * s.points, s.points,
           d_points + std::size_t{calls[c][1]} * s.points, s.partners,
           std::uint32_t{calls[c][0] == calls[c][1]}, binb.data(), d_hist);
    g.from_global(hist.data(), d_hist, hist.size() * sizeof(std::uint64_t));
    add_blocks(out, c, hist.data(), blocks);
  }
  g.free(d_hist);
  g.free(d_points);
  return out;
}

Output tpacf_init_adsm(Runtime& rt, int device, Scale scale) {
  const Sizes s = sizes(scale);
  const SharedInput in = init_shared(rt, device, s);
  Output out{std::vector<double>(std::size_t{3} * kSlots, 0.0)};
  histogram_call(rt, in, s, {0, 0});
  add_blocks(out, 0, in.hist, in.blocks);
  free_shared(rt, in);
  out.values.resize(kSlots);
  return out;
}

App tpacf() {
  return {"tpacf",
          "CPU converts catalogues into shared points in 3 passes (x, y, z); DD, DR, RR histogram calls, "
          "CPU reads each histogram after its sync",
          run_adsm,
          run_explicit,
          run_reference,
          1e-6};
}

}  // namespace hdsm::apps::parboil
