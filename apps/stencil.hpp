// The 3D stencil of seed 000, Fig. 9: a 7-point diffusion stencil over a volume, ping-ponging
// between two volumes on the device. Every step the CPU introduces a source (a small emitter: one
// point of the volume) before the kernel call, and every `output_every` steps it writes the whole
// volume to a file. Lazy-update moves the whole volume for the source introduction; rolling-update
// moves only the block the CPU touches, which is the point of the figure.
#pragma once

#include "apps/app.hpp"
#include "apps/stencil_kernel.hpp"

#include <hdsm/kernel.hpp>

#include <cstddef>
#include <vector>

namespace hdsm::apps {

struct StencilProblem {
  unsigned nx = 64, ny = 64, nz = 64;
  unsigned steps = 8;
  unsigned output_every = 4;  // 0: never
  std::size_t points() const { return std::size_t{nx} * ny * nz; }
};

/// The output is a sample of the final volume (at most ~64 Ki values, the source point included).
/// The volume is written to `output_fd` (a file descriptor the caller owns) every output_every steps.
Output stencil_adsm(Runtime& runtime, int device, const StencilProblem& problem, int output_fd);
Output stencil_explicit(Device& device, const StencilProblem& problem, int output_fd);
Output stencil_reference(const StencilProblem& problem);
inline constexpr double kStencilTolerance = 1e-5;

/// The kernel of the multi-device stencil (apps/stencil_multi.cpp) and of the MPI test: one step of
/// the planes `Planes` names of a slab.
const KernelOf<const float*, float*, stencil_kernel::Shape, stencil_kernel::Planes>& stencil_slab_kernel();
/// Its launch over `planes` planes of the volume `shape`.
Launch stencil_slab_launch(const stencil_kernel::Shape& shape, std::uint32_t planes);

/// The multi-device stencil's problem (multi_device_apps() "stencil", and the MPI test that splits
/// it over ranks): a cube of `size` points (the nearest cube) holding random values in [0, 1),
/// kStencilCubeSteps steps, no source.
stencil_kernel::Shape stencil_cube(std::size_t size);
std::vector<float> stencil_cube_volume(const stencil_kernel::Shape& shape);
inline constexpr unsigned kStencilCubeSteps = 6;

}  // namespace hdsm::apps
