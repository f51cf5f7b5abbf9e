// The CUDA bodies of mri-q and mri-fhd (apps/parboil/mri_q.cpp, mri_fhd.cpp, mri_common.hpp).
#include "apps/cuda/common.cuh"
#include "apps/parboil/mri_kernel.hpp"

#include <cstdint>

namespace hdsm::apps::cuda {
namespace {

using namespace parboil::mri;

__global__ void mriq_phi_mag(const float* phi_r, const float* phi_i, float* phi_mag, std::uint32_t n) {
  if (const std::uint64_t i = global_x(); i < n) phi_mag[i] = phi_magnitude(phi_r[i], phi_i[i]);
}

__global__ void mriq_compute_q(const float* x, const float* y, const float* z, float* re, float* im_sums,
                               const QValue* kv, std::uint32_t count, std::uint32_t voxels) {
  accumulate_voxel(x, y, z, re, im_sums, kv, count, voxels, global_x(), AddQ{});
}

__global__ void mrifhd_rho_phi(const float* phi_r, const float* phi_i, const float* d_r, const float* d_i,
                               float* rho_r, float* rho_i, std::uint32_t n) {
  if (const std::uint64_t i = global_x(); i < n) {
    rho_r[i] = rho_real(phi_r[i], phi_i[i], d_r[i], d_i[i]);
    rho_i[i] = rho_imag(phi_r[i], phi_i[i], d_r[i], d_i[i]);
  }
}

__global__ void mrifhd_compute_fh(const float* x, const float* y, const float* z, float* re, float* im_sums,
                                  const FhdValue* kv, std::uint32_t count, std::uint32_t voxels) {
  accumulate_voxel(x, y, z, re, im_sums, kv, count, voxels, global_x(), AddFhd{});
}

}  // namespace

// The kernels of the same names find them (<hdsm/cuda.hpp>).
HDSM_CUDA_KERNEL(mriq_phi_mag);
HDSM_CUDA_KERNEL(mriq_compute_q);
HDSM_CUDA_KERNEL(mrifhd_rho_phi);
HDSM_CUDA_KERNEL(mrifhd_compute_fh);

}  // namespace hdsm::apps::cuda
