// mri-fhd: the image-specific vector F^H d of non-Cartesian 3D MRI reconstruction (Parboil's
// mri-fhd). The CPU generates K k-space samples (kx, ky, kz, phi, d as real/imaginary pairs) and X
// voxel coordinates. A first call computes rhoPhi = conj(phi) * d on the device; the CPU reads it
// back and, chunk by chunk, packs (kx, ky, kz, rhoPhi) into a small buffer (Parboil's constant
// memory) for one call each that accumulates rFhD and iFhD of every voxel, which stay on the
// device until the CPU reads them.
#include "apps/cuda.hpp"
#include "apps/opencl.hpp"
#include "apps/parboil/mri_common.hpp"
#include "apps/parboil/parboil.hpp"

#include <hdsm/hdsm.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

namespace hdsm::apps::parboil {
namespace {

using mri::kTwoPi;
using mri::rho_imag;
using mri::rho_real;
using KValue = mri::FhdValue;

constexpr std::uint64_t kSeed = 21;

mri::Shape shape(Scale scale) { return mri::shape(scale, {2048, 160, 48}); }

const char* const kRhoPhiOpencl = R"(
__kernel void mrifhd_rho_phi(__global const float* phi_r, __global const float* phi_i, __global const float* d_r,
                             __global const float* d_i, __global float* rho_r, __global float* rho_i, uint n) {
  const ulong i = get_global_id(0);
  if (i < n) {
    rho_r[i] = phi_r[i] * d_r[i] + phi_i[i] * d_i[i];
    rho_i[i] = phi_r[i] * d_i[i] - phi_i[i] * d_r[i];
  }
})";

const auto& rho_phi_kernel() {
  static const auto k = hdsm::with_opencl(
      opencl_source(kRhoPhiOpencl),
      per_thread("mrifhd_rho_phi",
                 [](const Thread& t, const float* phi_r, const float* phi_i, const float* d_r,
                    const float* d_i, float* rho_r, float* rho_i, std::uint32_t n) {
                   if (const auto i = t.global_x(); i < n) {
                     rho_r[i] = rho_real(phi_r[i], phi_i[i], d_r[i], d_i[i]);
                     rho_i[i] = rho_imag(phi_r[i], phi_i[i], d_r[i], d_i[i]);
                   }
                 }));
  return k;
}

// What fhd_kernel adds per sample (mri::AddFhd), in OpenCL C.
const char* const kFhdAddOpencl = R"(
    const float c = cos(arg), sn = sin(arg);
    r += kv[k].rho_r * c - kv[k].rho_i * sn;
    im += kv[k].rho_i * c + kv[k].rho_r * sn;)";

const auto& fhd_kernel() {
  static const auto k = mri::accumulate_kernel<KValue>("mrifhd_compute_fh", "kx, ky, kz, rho_r, rho_i",
                                                       kFhdAddOpencl, mri::AddFhd{});
  return k;
}

Output run_reference(Scale scale) {
  const mri::Shape s = shape(scale);
  const mri::HostInputs<4> in{s, kSeed};
  const auto& [phi_r, phi_i, d_r, d_i] = in.weights;
  std::vector<float> rfhd(s.voxels, 0.0f), ifhd(s.voxels, 0.0f);
  for (std::uint32_t i = 0; i < s.voxels; ++i)
    for (std::uint32_t k = 0; k < s.samples; ++k) {
      const float rr = rho_real(phi_r[k], phi_i[k], d_r[k], d_i[k]);
      const float ri = rho_imag(phi_r[k], phi_i[k], d_r[k], d_i[k]);
      const float arg = kTwoPi * (in.kx[k] * in.x[i] + in.ky[k] * in.y[i] + in.kz[k] * in.z[i]);
      const float c = std::cos(arg), sn = std::sin(arg);
      rfhd[i] += rr * c - ri * sn;
      ifhd[i] += ri * c + rr * sn;
    }
  return mri::read_sums(rfhd.data(), ifhd.data(), s.voxels);
}

Output run_adsm(Runtime& rt, int device, Scale scale) {
  const mri::Shape s = shape(scale);
  const mri::SharedObjects<4, 2, KValue> o{rt, device, s, kSeed};
  const auto& [phi_r, phi_i, d_r, d_i] = o.weights;
  const auto& [rho_r, rho_i] = o.results;
  rt.call(rho_phi_kernel(), cover(s.samples, mri::kWeightThreads), phi_r, phi_i, d_r, d_i, rho_r, rho_i,
          s.samples);
  rt.sync();
  const float* const re = rho_r;  // a lambda cannot capture a structured binding (before C++20 in clang)
  const float* const im = rho_i;
  const auto pack = [&](std::uint32_t j) { return KValue{o.kx[j], o.ky[j], o.kz[j], re[j], im[j]}; };
  mri::accumulate(rt, fhd_kernel(), s, o, pack);
  return mri::read_sums(o.re, o.im, s.voxels);
}

Output run_explicit(Device& d, Scale scale) {
  const mri::Shape s = shape(scale);
  const mri::HostInputs<4> in{s, kSeed};
  const auto& [phi_r, phi_i, d_r, d_i] = in.weights;
  const std::size_t kbytes = s.samples * sizeof(float);
  auto queue = d.create_queue();

  const DeviceBuffer phi_r_d = d.alloc(kbytes), phi_i_d = d.alloc(kbytes), d_r_d = d.alloc(kbytes),
                     d_i_d = d.alloc(kbytes), rho_r_d = d.alloc(kbytes), rho_i_d = d.alloc(kbytes);
  queue->copy_to_device(phi_r_d, 0, phi_r.data(), kbytes);
  queue->copy_to_device(phi_i_d, 0, phi_i.data(), kbytes);
  queue->copy_to_device(d_r_d, 0, d_r.data(), kbytes);
  queue->copy_to_device(d_i_d, 0, d_i.data(), kbytes);
  const KernelArg rho_args[] = {KernelArg::buffer(phi_r_d), KernelArg::buffer(phi_i_d),
                                KernelArg::buffer(d_r_d),   KernelArg::buffer(d_i_d),
                                KernelArg::buffer(rho_r_d), KernelArg::buffer(rho_i_d),
                                KernelArg::value(s.samples)};
  queue->launch(rho_phi_kernel(), cover(s.samples, mri::kWeightThreads), rho_args);
  std::vector<float> rho_r(s.samples), rho_i(s.samples);
  queue->copy_to_host(rho_r.data(), rho_r_d, 0, kbytes);
  queue->copy_to_host(rho_i.data(), rho_i_d, 0, kbytes);
  queue->synchronize();
  for (DeviceBuffer b : {phi_r_d, phi_i_d, d_r_d, d_i_d, rho_r_d, rho_i_d}) d.free(b);

  std::vector<KValue> kvals(s.samples);
  for (std::uint32_t k = 0; k < s.samples; ++k) kvals[k] = {in.kx[k], in.ky[k], in.kz[k], rho_r[k], rho_i[k]};
  return mri::accumulate(d, *queue, fhd_kernel(), s, kvals, in);
}

}  // namespace

Output mri_fhd_grid(GridTarget& g, Scale scale) {
  const mri::Shape s = shape(scale);
  const mri::HostInputs<4> in{s, kSeed};
  std::vector<float> rho_r, rho_i;
  {
    const mri::GridWeights<4, 2> w(g, s, in);
    g.call(rho_phi_kernel(), cover(s.samples, mri::kWeightThreads), w.weights[0], w.weights[1], w.weights[2],
           w.weights[3], w.results[0], w.results[1], s.samples);
    rho_r = w.read(0, s);
    rho_i = w.read(1, s);
  }
  std::vector<KValue> kvals(s.samples);
  for (std::uint32_t k = 0; k < s.samples; ++k) kvals[k] = {in.kx[k], in.ky[k], in.kz[k], rho_r[k], rho_i[k]};
  return mri::accumulate(g, fhd_kernel(), s, kvals, in);
}

App mri_fhd() {
  return {"mri-fhd",
          "CPU writes k-space, phi, d and voxels into shared objects; one call computes rhoPhi, which "
          "the CPU reads to pack k-space chunks into a shared buffer, one call per chunk accumulates "
          "FhD on the device; CPU reads rFhD and iFhD",
          run_adsm,
          run_explicit,
          run_reference,
          1e-3};
}

}  // namespace hdsm::apps::parboil
