// cp: Coulombic potential on one plane of a 3D lattice (Parboil's cuenergy, from VMD's cionize).
// The CPU generates randomly placed point charges. The potential plane lives on the device for the
// whole run; the atoms go through a small buffer chunk by chunk (Parboil copies 4000 atoms at a
// time into constant memory), each chunk followed by one kernel call that adds the chunk's
// contribution to every grid point. The CPU reads the whole plane at the end.
#include "apps/cuda.hpp"
#include "apps/opencl.hpp"
#include "apps/parboil/cp_kernel.hpp"
#include "apps/parboil/parboil.hpp"
#include "apps/random.hpp"

#include <hdsm/hdsm.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace hdsm::apps::parboil {
namespace {

using namespace cp_kernel;

struct Atom {
  float x, y, z, q;
};

struct Shape {
  std::uint32_t nx, ny;  // grid points of the plane
  std::uint32_t atoms;
  std::uint32_t chunk;  // atoms per call
};

constexpr Dim3 kBlock{16, 8};

Shape shape(Scale scale) {
  return by_scale<Shape>(scale, {128, 32, 300, 64}, {512, 256, 240, 40}, {1024, 512, 384, 32});
}

float plane_z(const Shape& s) { return 0.5f * kSpacing * static_cast<float>(std::min(s.nx, s.ny)) / 4; }

// Atoms fill a box over the plane's footprint, a quarter as deep as the plane is wide.
std::vector<Atom> make_atoms(const Shape& s) {
  Xorshift64 rng{0xC0FFEE'0B5EEDULL};
  const float w = kSpacing * static_cast<float>(s.nx), h = kSpacing * static_cast<float>(s.ny);
  const float depth = 2 * plane_z(s);
  std::vector<Atom> atoms(s.atoms);
  for (Atom& a : atoms) {
    a.x = rng.uniform() * w;
    a.y = rng.uniform() * h;
    a.z = rng.uniform() * depth;
    a.q = 2 * rng.uniform() - 1;
  }
  return atoms;
}

AtomInfo info(const Atom& a, float z) {
  const float dz = z - a.z;
  return {a.x, a.y, dz * dz, a.q};
}

Launch energy_launch(const Shape& s) {
  return {Dim3{s.nx / (kBlock.x * kUnroll), s.ny / kBlock.y}, kBlock, 0};
}

// The OpenCL body: add_energy of cp_kernel.hpp.
std::string energy_opencl() {
  return cl_define("UNROLL", kUnroll) + cl_define("SPACING", kSpacing) + R"(
typedef struct { float x, y, dz2, q; } AtomInfo;

__kernel void cp_energy(__global float* grid, __global const AtomInfo* atoms, uint count, uint nx) {
  const ulong x0 = get_global_id(0) * UNROLL, y = get_global_id(1);
  const float py = SPACING * (float)y;
  float px[UNROLL], e[UNROLL];
  for (uint k = 0; k < UNROLL; ++k) {
    px[k] = SPACING * (float)(x0 + k);
    e[k] = 0.0f;
  }
  for (uint i = 0; i < count; ++i) {
    const AtomInfo a = atoms[i];
    const float dy = py - a.y;
    const float dyz2 = dy * dy + a.dz2;
    for (uint k = 0; k < UNROLL; ++k) {
      const float dx = px[k] - a.x;
      e[k] += a.q / sqrt(dx * dx + dyz2);
    }
  }
  __global float* row = grid + y * nx + x0;
  for (uint k = 0; k < UNROLL; ++k) row[k] += e[k];
})";
}

// Each thread owns kUnroll consecutive points of one row and adds the chunk's potential to them
// (add_energy; the CUDA body is apps/cuda/cp.cu).
const auto& energy_kernel() {
  static const auto k =
      hdsm::with_opencl(opencl_source(energy_opencl()),
                        per_thread("cp_energy", [](const Thread& t, float* grid, const AtomInfo* atoms,
                                                   std::uint32_t count, std::uint32_t nx) {
                          add_energy(grid, atoms, count, nx, t.global_x() * kUnroll, t.global_y());
                        }));
  return k;
}

Output read_plane(const float* grid, const Shape& s) {
  return {std::vector<double>(grid, grid + std::size_t{s.nx} * s.ny)};
}

Output run_reference(Scale scale) {
  const Shape s = shape(scale);
  const std::vector<Atom> atoms = make_atoms(s);
  const float z = plane_z(s);
  std::vector<float> grid(std::size_t{s.nx} * s.ny, 0.0f);
  for (std::uint32_t start = 0; start < s.atoms; start += s.chunk) {
    const std::uint32_t end = std::min(s.atoms, start + s.chunk);
    for (std::uint32_t y = 0; y < s.ny; ++y)
      for (std::uint32_t x = 0; x < s.nx; ++x) {
        const float px = kSpacing * static_cast<float>(x), py = kSpacing * static_cast<float>(y);
        float e = 0;
        for (std::uint32_t i = start; i < end; ++i) {
          const float dz = z - atoms[i].z, dy = py - atoms[i].y, dx = px - atoms[i].x;
          e += atoms[i].q / std::sqrt(dx * dx + (dy * dy + dz * dz));
        }
        grid[std::size_t{y} * s.nx + x] += e;
      }
  }
  return read_plane(grid.data(), s);
}

Output run_adsm(Runtime& rt, int device, Scale scale) {
  const Shape s = shape(scale);
  const std::vector<Atom> atoms = make_atoms(s);
  const float z = plane_z(s);
  float* grid = rt.alloc<float>(std::size_t{s.nx} * s.ny, device);  // zero-filled
  AtomInfo* chunk = rt.alloc<AtomInfo>(s.chunk, device);
  for (std::uint32_t start = 0; start < s.atoms; start += s.chunk) {
    const std::uint32_t count = std::min(s.chunk, s.atoms - start);
    for (std::uint32_t i = 0; i < count; ++i) chunk[i] = info(atoms[start + i], z);
    rt.call(energy_kernel(), energy_launch(s), grid, chunk, count, s.nx);
    rt.sync();  // the next chunk overwrites the buffer this call reads
  }
  Output out = read_plane(grid, s);
  rt.free(chunk);
  rt.free(grid);
  return out;
}

Output run_explicit(Device& d, Scale scale) {
  const Shape s = shape(scale);
  const std::vector<Atom> atoms = make_atoms(s);
  const float z = plane_z(s);
  // Every chunk is staged up front: an asynchronous copy's source must stay unchanged until it ran.
  std::vector<AtomInfo> staged(s.atoms);
  for (std::uint32_t i = 0; i < s.atoms; ++i) staged[i] = info(atoms[i], z);
  const std::size_t grid_bytes = std::size_t{s.nx} * s.ny * sizeof(float);
  const DeviceBuffer grid = d.alloc(grid_bytes);
  const DeviceBuffer chunk = d.alloc(s.chunk * sizeof(AtomInfo));
  auto queue = d.create_queue();
  queue->fill(grid, 0, grid_bytes, 0);
  for (std::uint32_t start = 0; start < s.atoms; start += s.chunk) {
    const std::uint32_t count = std::min(s.chunk, s.atoms - start);
    queue->copy_to_device(chunk, 0, staged.data() + start, count * sizeof(AtomInfo));
    const KernelArg args[] = {KernelArg::buffer(grid), KernelArg::buffer(chunk), KernelArg::value(count),
                              KernelArg::value(s.nx)};
    queue->launch(energy_kernel(), energy_launch(s), args);
  }
  std::vector<float> host(std::size_t{s.nx} * s.ny);
  queue->copy_to_host(host.data(), grid, 0, grid_bytes);
  queue->synchronize();
  d.free(chunk);
  d.free(grid);
  return read_plane(host.data(), s);
}

}  // namespace

// The plane in global memory; each chunk of atoms is constant data (every rank computes it the same
// way) that one launch adds to every grid point.
Output cp_grid(GridTarget& g, Scale scale) {
  const Shape s = shape(scale);
  const std::vector<Atom> atoms = make_atoms(s);
  const float z = plane_z(s);
  std::vector<AtomInfo> staged(s.atoms);
  for (std::uint32_t i = 0; i < s.atoms; ++i) staged[i] = info(atoms[i], z);
  const std::size_t points = std::size_t{s.nx} * s.ny;
  float* grid = g.alloc<float>(points);
  for (std::uint32_t start = 0; start < s.atoms; start += s.chunk) {
    const std::uint32_t count = std::min(s.chunk, s.atoms - start);
    g.call(energy_kernel(), energy_launch(s), grid, staged.data() + start, count, s.nx);
  }
  std::vector<float> host(points);
  g.from_global(host.data(), grid, points * sizeof(float));
  g.free(grid);
  return read_plane(host.data(), s);
}

App cp() {
  return {"cp",
          "CPU writes each atom chunk into a shared buffer, one call per chunk accumulates into the "
          "device-resident potential plane; CPU reads the plane at the end",
          run_adsm,
          run_explicit,
          run_reference,
          1e-3};
}

}  // namespace hdsm::apps::parboil
