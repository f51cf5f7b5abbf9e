// What mri-q and mri-fhd share: the same inputs (k-space samples with per-sample weights, voxel
// coordinates) and the same second phase, where the CPU packs k-space chunks into a small buffer
// (Parboil's constant memory) and one call per chunk adds the chunk's contribution to two sums per
// voxel. Each app keeps its own kernels and value layout; the second-phase kernels share their loop
// over the chunk (accumulate_kernel) and differ in what they add per sample.
#pragma once

#include "apps/app.hpp"
#include "apps/cuda.hpp"
#include "apps/grid.hpp"
#include "apps/opencl.hpp"
#include "apps/parboil/mri_kernel.hpp"
#include "apps/random.hpp"

#include <hdsm/hdsm.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hdsm::apps::parboil::mri {

struct Shape {
  std::uint32_t voxels, samples;
  std::uint32_t chunk;  // k-space samples per call
};

constexpr std::uint32_t kWeightThreads = 512, kChunkThreads = 256;

// Only the test size differs between the two apps.
inline Shape shape(Scale scale, const Shape& test) {
  return by_scale<Shape>(scale, test, {65536, 64, 16}, {262144, 96, 16});
}

// Where the inputs go: host memory or shared objects, written in the same order either way.
// `weights` are the per-sample values the first call combines (phi, and d in mri-fhd).
template <std::size_t N>
struct Inputs {
  float *kx, *ky, *kz;
  std::array<float*, N> weights;
  float *x, *y, *z;
};

// Each array has its own seed, counting up from `seed` in the order of Inputs.
template <std::size_t N>
void generate(const Shape& s, std::uint64_t seed, const Inputs<N>& in) {
  for (float* p : {in.kx, in.ky, in.kz}) fill(p, s.samples, seed++, -4, 4);
  for (float* p : in.weights) fill(p, s.samples, seed++, -1, 1);
  for (float* p : {in.x, in.y, in.z}) fill(p, s.voxels, seed++, -0.5f, 0.5f);
}

// The inputs in host memory, generated.
template <std::size_t N>
struct HostInputs {
  std::vector<float> kx, ky, kz;
  std::array<std::vector<float>, N> weights;
  std::vector<float> x, y, z;

  HostInputs(const Shape& s, std::uint64_t seed)
      : kx(s.samples), ky(s.samples), kz(s.samples), x(s.voxels), y(s.voxels), z(s.voxels) {
    Inputs<N> in{kx.data(), ky.data(), kz.data(), {}, x.data(), y.data(), z.data()};
    for (std::size_t i = 0; i < N; ++i) {
      weights[i].resize(s.samples);
      in.weights[i] = weights[i].data();
    }
    generate(s, seed, in);
  }
};

// The output: every voxel's real sums, then its imaginary ones.
inline Output read_sums(const float* re, const float* im, std::uint32_t voxels) {
  Output out;
  out.values.reserve(2 * std::size_t{voxels});
  out.values.assign(re, re + voxels);
  out.values.insert(out.values.end(), im, im + voxels);
  return out;
}

// The adsm version's objects. k-space stays in host memory, since only the CPU reads it (to pack the
// chunks); the rest are shared objects: the weights, the first call's results from them, voxels,
// sums (zero-filled) and the chunk buffer, allocated in that order and generated on construction.
template <std::size_t N, std::size_t M, class KValue>
class SharedObjects {
 public:
  SharedObjects(Runtime& rt, int device, const Shape& s, std::uint64_t seed)
      : kx(s.samples), ky(s.samples), kz(s.samples), rt_(rt) {
    for (float*& p : weights) p = rt.alloc<float>(s.samples, device);
    for (float*& p : results) p = rt.alloc<float>(s.samples, device);
    for (float** p : {&x, &y, &z, &re, &im}) *p = rt.alloc<float>(s.voxels, device);
    chunk = rt.alloc<KValue>(s.chunk, device);
    generate<N>(s, seed, {kx.data(), ky.data(), kz.data(), weights, x, y, z});
  }
  SharedObjects(const SharedObjects&) = delete;
  SharedObjects& operator=(const SharedObjects&) = delete;
  ~SharedObjects() {
    for (float* p : weights) rt_.free(p);
    for (float* p : results) rt_.free(p);
    for (float* p : {x, y, z, re, im}) rt_.free(p);
    rt_.free(chunk);
  }

  std::vector<float> kx, ky, kz;
  std::array<float*, N> weights{};
  std::array<float*, M> results{};
  float *x = nullptr, *y = nullptr, *z = nullptr, *re = nullptr, *im = nullptr;
  KValue* chunk = nullptr;

 private:
  Runtime& rt_;
};

// The second-phase kernel `name`, with the arguments accumulate() passes: every voxel adds the
// chunk's samples to its sums (accumulate_voxel with `add`, one of mri_kernel.hpp's, as the CUDA
// body in apps/cuda/mri.cu). The OpenCL body is the same loop with `opencl_add` (the same statements
// in OpenCL C, over r, im, kv[k] and arg) and a KValue struct of the float fields `kvalue` ("kx, ky,
// kz, ...").
template <class KValue, class Add>
auto accumulate_kernel(const std::string& name, std::string_view kvalue, std::string_view opencl_add,
                       Add add) {
  std::string source = cl_define("TWO_PI", kTwoPi);
  source.append("typedef struct { float ").append(kvalue).append("; } KValue;\n__kernel void ").append(name);
  source.append(R"((__global const float* x, __global const float* y, __global const float* z,
                   __global float* re, __global float* im_sums, __global const KValue* kv, uint count,
                   uint voxels) {
  const ulong i = get_global_id(0);
  if (i >= voxels) return;
  const float xi = x[i], yi = y[i], zi = z[i];
  float r = re[i], im = im_sums[i];
  for (uint k = 0; k < count; ++k) {
    const float arg = TWO_PI * (kv[k].kx * xi + kv[k].ky * yi + kv[k].kz * zi);)");
  source.append(opencl_add).append(R"(
  }
  re[i] = r;
  im_sums[i] = im;
})");
  return hdsm::with_opencl(
      opencl_source(source),
      per_thread(name, [add](const Thread& t, const float* x, const float* y, const float* z, float* re,
                             float* im_sums, const KValue* kv, std::uint32_t count, std::uint32_t voxels) {
        accumulate_voxel(x, y, z, re, im_sums, kv, count, voxels, t.global_x(), add);
      }));
}

// The second phase on shared objects: chunk[k] = pack(sample), then one call of `kernel` that adds the
// chunk to the sums re and im.
template <std::size_t N, std::size_t M, class KValue, class Pack, class K>
void accumulate(Runtime& rt, const K& kernel, const Shape& s, const SharedObjects<N, M, KValue>& o,
                const Pack& pack) {
  for (std::uint32_t start = 0; start < s.samples; start += s.chunk) {
    const std::uint32_t count = std::min(s.chunk, s.samples - start);
    for (std::uint32_t k = 0; k < count; ++k) o.chunk[k] = pack(start + k);
    rt.call(kernel, cover(s.voxels, kChunkThreads), o.x, o.y, o.z, o.re, o.im, o.chunk, count, s.voxels);
    rt.sync();  // the next chunk overwrites the buffer this call reads
  }
}

// The second phase with explicit copies, from every sample's packed value; returns read_sums' output.
template <class KValue, std::size_t N>
Output accumulate(Device& d, Queue& queue, const Kernel& kernel, const Shape& s,
                  const std::vector<KValue>& kvals, const HostInputs<N>& in) {
  const std::size_t xbytes = s.voxels * sizeof(float);
  const DeviceBuffer x_d = d.alloc(xbytes), y_d = d.alloc(xbytes), z_d = d.alloc(xbytes);
  const DeviceBuffer re_d = d.alloc(xbytes), im_d = d.alloc(xbytes);
  const DeviceBuffer chunk_d = d.alloc(s.chunk * sizeof(KValue));
  queue.copy_to_device(x_d, 0, in.x.data(), xbytes);
  queue.copy_to_device(y_d, 0, in.y.data(), xbytes);
  queue.copy_to_device(z_d, 0, in.z.data(), xbytes);
  queue.fill(re_d, 0, xbytes, 0);
  queue.fill(im_d, 0, xbytes, 0);
  for (std::uint32_t start = 0; start < s.samples; start += s.chunk) {
    const std::uint32_t count = std::min(s.chunk, s.samples - start);
    queue.copy_to_device(chunk_d, 0, kvals.data() + start, count * sizeof(KValue));
    const KernelArg args[] = {KernelArg::buffer(x_d),  KernelArg::buffer(y_d),    KernelArg::buffer(z_d),
                              KernelArg::buffer(re_d), KernelArg::buffer(im_d),   KernelArg::buffer(chunk_d),
                              KernelArg::value(count), KernelArg::value(s.voxels)};
    queue.launch(kernel, cover(s.voxels, kChunkThreads), args);
  }
  std::vector<float> re(s.voxels), im(s.voxels);
  queue.copy_to_host(re.data(), re_d, 0, xbytes);
  queue.copy_to_host(im.data(), im_d, 0, xbytes);
  queue.synchronize();
  for (DeviceBuffer b : {x_d, y_d, z_d, re_d, im_d, chunk_d}) d.free(b);
  return read_sums(re.data(), im.data(), s.voxels);
}

// The second phase on a GridTarget: voxels and sums in global memory, every chunk constant data.
template <class KValue, std::size_t N, class K>
Output accumulate(GridTarget& g, const K& kernel, const Shape& s, const std::vector<KValue>& kvals,
                  const HostInputs<N>& in) {
  const std::size_t xbytes = s.voxels * sizeof(float);
  float *x = g.alloc<float>(s.voxels), *y = g.alloc<float>(s.voxels), *z = g.alloc<float>(s.voxels);
  float *re = g.alloc<float>(s.voxels), *im = g.alloc<float>(s.voxels);
  g.to_global(x, in.x.data(), xbytes);
  g.to_global(y, in.y.data(), xbytes);
  g.to_global(z, in.z.data(), xbytes);
  for (std::uint32_t start = 0; start < s.samples; start += s.chunk) {
    const std::uint32_t count = std::min(s.chunk, s.samples - start);
    g.call(kernel, cover(s.voxels, kChunkThreads), x, y, z, re, im, kvals.data() + start, count, s.voxels);
  }
  std::vector<float> re_h(s.voxels), im_h(s.voxels);
  g.from_global(re_h.data(), re, xbytes);
  g.from_global(im_h.data(), im, xbytes);
  for (float* p : {x, y, z, re, im}) g.free(p);
  return read_sums(re_h.data(), im_h.data(), s.voxels);
}

/// The first phase's inputs on a GridTarget: the weights into global memory, and `results` arrays
/// of one float a sample for the first kernel to write.
template <std::size_t N, std::size_t M>
struct GridWeights {
  GridWeights(GridTarget& g, const Shape& s, const HostInputs<N>& in) : g_(g) {
    for (std::size_t i = 0; i < N; ++i) {
      weights[i] = g.alloc<float>(s.samples);
      g.to_global(weights[i], in.weights[i].data(), s.samples * sizeof(float));
    }
    for (float*& p : results) p = g.alloc<float>(s.samples);
  }
  GridWeights(const GridWeights&) = delete;
  GridWeights& operator=(const GridWeights&) = delete;
  ~GridWeights() {
    for (float* p : weights) g_.free(p);
    for (float* p : results) g_.free(p);
  }
  /// results[i] copied out.
  std::vector<float> read(std::size_t i, const Shape& s) const {
    std::vector<float> out(s.samples);
    g_.from_global(out.data(), results[i], s.samples * sizeof(float));
    return out;
  }
  std::array<float*, N> weights{};
  std::array<float*, M> results{};

 private:
  GridTarget& g_;
};

}  // namespace hdsm::apps::parboil::mri
