// mri-q: the scanner-configuration matrix Q of non-Cartesian 3D MRI reconstruction (Parboil's
// mri-q). The CPU generates K k-space samples (kx, ky, kz, phiR, phiI) and X voxel coordinates.
// A first call computes phiMag = |phi|^2 on the device; the CPU reads phiMag back and, chunk by
// chunk, packs (kx, ky, kz, phiMag) into a small buffer (Parboil's constant memory) for one call
// each that accumulates Qr and Qi of every voxel, which stay on the device until the CPU reads them.
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
using KValue = mri::QValue;

constexpr std::uint64_t kSeed = 11;

mri::Shape shape(Scale scale) { return mri::shape(scale, {2048, 192, 64}); }

const char* const kPhiMagOpencl = R"(
__kernel void mriq_phi_mag(__global const float* phi_r, __global const float* phi_i, __global float* phi_mag,
                           uint n) {
  const ulong i = get_global_id(0);
  if (i < n) phi_mag[i] = phi_r[i] * phi_r[i] + phi_i[i] * phi_i[i];
})";

const auto& phi_mag_kernel() {
  static const auto k =
      hdsm::with_opencl(opencl_source(kPhiMagOpencl),
                        per_thread("mriq_phi_mag", [](const Thread& t, const float* phi_r, const float* phi_i,
                                                      float* phi_mag, std::uint32_t n) {
                          if (const auto i = t.global_x(); i < n)
                            phi_mag[i] = mri::phi_magnitude(phi_r[i], phi_i[i]);
                        }));
  return k;
}

// What q_kernel adds per sample (mri::AddQ), in OpenCL C.
const char* const kQAddOpencl = R"(
    r += kv[k].phi_mag * cos(arg);
    im += kv[k].phi_mag * sin(arg);)";

const auto& q_kernel() {
  static const auto k =
      mri::accumulate_kernel<KValue>("mriq_compute_q", "kx, ky, kz, phi_mag", kQAddOpencl, mri::AddQ{});
  return k;
}

Output run_reference(Scale scale) {
  const mri::Shape s = shape(scale);
  const mri::HostInputs<2> in{s, kSeed};
  const auto& [phi_r, phi_i] = in.weights;
  std::vector<float> qr(s.voxels, 0.0f), qi(s.voxels, 0.0f);
  for (std::uint32_t i = 0; i < s.voxels; ++i)
    for (std::uint32_t k = 0; k < s.samples; ++k) {
      const float mag = mri::phi_magnitude(phi_r[k], phi_i[k]);
      const float arg = kTwoPi * (in.kx[k] * in.x[i] + in.ky[k] * in.y[i] + in.kz[k] * in.z[i]);
      qr[i] += mag * std::cos(arg);
      qi[i] += mag * std::sin(arg);
    }
  return mri::read_sums(qr.data(), qi.data(), s.voxels);
}

Output run_adsm(Runtime& rt, int device, Scale scale) {
  const mri::Shape s = shape(scale);
  const mri::SharedObjects<2, 1, KValue> o{rt, device, s, kSeed};
  const auto& [phi_r, phi_i] = o.weights;
  float* phi_mag = o.results[0];
  rt.call(phi_mag_kernel(), cover(s.samples, mri::kWeightThreads), phi_r, phi_i, phi_mag, s.samples);
  rt.sync();
  const auto pack = [&](std::uint32_t j) { return KValue{o.kx[j], o.ky[j], o.kz[j], phi_mag[j]}; };
  mri::accumulate(rt, q_kernel(), s, o, pack);
  return mri::read_sums(o.re, o.im, s.voxels);
}

Output run_explicit(Device& d, Scale scale) {
  const mri::Shape s = shape(scale);
  const mri::HostInputs<2> in{s, kSeed};
  const auto& [phi_r, phi_i] = in.weights;
  const std::size_t kbytes = s.samples * sizeof(float);
  auto queue = d.create_queue();

  const DeviceBuffer phi_r_d = d.alloc(kbytes), phi_i_d = d.alloc(kbytes), phi_mag_d = d.alloc(kbytes);
  queue->copy_to_device(phi_r_d, 0, phi_r.data(), kbytes);
  queue->copy_to_device(phi_i_d, 0, phi_i.data(), kbytes);
  const KernelArg mag_args[] = {KernelArg::buffer(phi_r_d), KernelArg::buffer(phi_i_d),
                                KernelArg::buffer(phi_mag_d), KernelArg::value(s.samples)};
  queue->launch(phi_mag_kernel(), cover(s.samples, mri::kWeightThreads), mag_args);
  std::vector<float> phi_mag(s.samples);
  queue->copy_to_host(phi_mag.data(), phi_mag_d, 0, kbytes);
  queue->synchronize();
  for (DeviceBuffer b : {phi_r_d, phi_i_d, phi_mag_d}) d.free(b);

  std::vector<KValue> kvals(s.samples);
  for (std::uint32_t k = 0; k < s.samples; ++k) kvals[k] = {in.kx[k], in.ky[k], in.kz[k], phi_mag[k]};
  return mri::accumulate(d, *queue, q_kernel(), s, kvals, in);
}

}  // namespace

Output mri_q_grid(GridTarget& g, Scale scale) {
  const mri::Shape s = shape(scale);
  const mri::HostInputs<2> in{s, kSeed};
  std::vector<float> phi_mag;
  {
    const mri::GridWeights<2, 1> w(g, s, in);
    g.call(phi_mag_kernel(), cover(s.samples, mri::kWeightThreads), w.weights[0], w.weights[1], w.results[0],
           s.samples);
    phi_mag = w.read(0, s);
  }
  std::vector<KValue> kvals(s.samples);
  for (std::uint32_t k = 0; k < s.samples; ++k) kvals[k] = {in.kx[k], in.ky[k], in.kz[k], phi_mag[k]};
  return mri::accumulate(g, q_kernel(), s, kvals, in);
}

App mri_q() {
  return {"mri-q",
          "CPU writes k-space and voxels into shared objects; one call computes phiMag, which the CPU "
          "reads to pack k-space chunks into a shared buffer, one call per chunk accumulates Q on the "
          "device; CPU reads Qr and Qi",
          run_adsm,
          run_explicit,
          run_reference,
          1e-3};
}

}  // namespace hdsm::apps::parboil
