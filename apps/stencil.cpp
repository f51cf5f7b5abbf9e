#include "apps/stencil.hpp"

#include "apps/cuda.hpp"
#include "apps/opencl.hpp"
#include "apps/stencil_kernel.hpp"

#include <hdsm/hdsm.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

namespace hdsm::apps {
namespace {

using namespace stencil_kernel;

constexpr std::uint32_t kRow = 64;
constexpr std::size_t kStagingBytes = std::size_t{1} << 20;

Shape shape_of(const StencilProblem& p) { return {p.nx, p.ny, p.nz}; }
std::size_t source_index(const StencilProblem& p) {
  return (std::size_t{p.nz} / 2 * p.ny + p.ny / 3) * p.nx + p.nx / 4;
}
float source_value(unsigned step) { return std::sin(0.3f * static_cast<float>(step + 1)); }

// The OpenCL bodies: step_slab_point() of stencil_kernel.hpp, in the same order, for the whole
// volume (stencil7) and for a slab with halo planes (stencil_slab).
std::string stencil_opencl() {
  return cl_define("CENTRE", kCentre) + cl_define("NEIGHBOUR", kNeighbour) + R"(
typedef struct { uint nx, ny, nz; } Shape;
typedef struct { uint first; int origin; } Planes;

void step_slab_point(__global const float* u, __global float* next, Shape s, uint x, uint y, uint local_z,
                     uint global_z) {
  const ulong sx = s.nx, sxy = (ulong)s.nx * s.ny, i = local_z * sxy + y * sx + x;
  if (x == 0 || y == 0 || global_z == 0 || x + 1 == s.nx || y + 1 == s.ny || global_z + 1 == s.nz)
    next[i] = u[i];
  else
    next[i] = CENTRE * u[i] +
              NEIGHBOUR * (((u[i - 1] + u[i + 1]) + (u[i - sx] + u[i + sx])) + (u[i - sxy] + u[i + sxy]));
}

__kernel void stencil7(__global const float* u, __global float* next, Shape s) {
  const uint x = (uint)get_global_id(0);
  if (x >= s.nx) return;
  const uint z = (uint)get_group_id(2);
  step_slab_point(u, next, s, x, (uint)get_group_id(1), z, z);
}

__kernel void stencil_slab(__global const float* u, __global float* next, Shape s, Planes p) {
  const uint x = (uint)get_global_id(0);
  if (x >= s.nx) return;
  const uint z = p.first + (uint)get_group_id(2);
  step_slab_point(u, next, s, x, (uint)get_group_id(1), z, (uint)((int)z + p.origin));
})";
}

// One block is up to kRow points of one row (y, z); the CUDA body is apps/cuda/stencil.cu.
const Kernel& stencil7_kernel() {
  static const auto k =
      hdsm::with_opencl(opencl_source(stencil_opencl()),
                        per_thread("stencil7", [](const Thread& t, const float* u, float* next, Shape s) {
                          const auto x = static_cast<std::uint32_t>(t.global_x());
                          if (x < s.nx) step_point(u, next, s, x, t.block.y, t.block.z);
                        }));
  return k;
}

void write_all(int fd, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw SystemError("write", fmt::format("stencil output (fd {})", fd), errno);
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

// The CPU reads the volume through a staging buffer, as a program formatting its output would.
void write_volume(int fd, const float* volume, std::size_t points, std::vector<char>& staging) {
  const std::size_t bytes = points * sizeof(float);
  for (std::size_t at = 0; at < bytes; at += staging.size()) {
    const std::size_t n = std::min(staging.size(), bytes - at);
    std::memcpy(staging.data(), reinterpret_cast<const char*>(volume) + at, n);
    if (fd >= 0) write_all(fd, staging.data(), n);
  }
}

Output sample(const float* volume, const StencilProblem& p) {
  const std::size_t stride = std::max<std::size_t>(1, p.points() / 65536);
  Output out;
  for (std::size_t i = 0; i < p.points(); i += stride) out.values.push_back(volume[i]);
  out.values.push_back(volume[source_index(p)]);
  return out;
}

}  // namespace

const KernelOf<const float*, float*, Shape, Planes>& stencil_slab_kernel() {
  static const auto k = hdsm::with_opencl(
      opencl_source(stencil_opencl()),
      per_thread("stencil_slab", [](const Thread& t, const float* u, float* next, Shape s, Planes p) {
        const auto x = static_cast<std::uint32_t>(t.global_x());
        const std::uint32_t z = p.first + t.block.z;
        if (x < s.nx)
          step_slab_point(u, next, s, x, t.block.y, z,
                          static_cast<std::uint32_t>(static_cast<std::int32_t>(z) + p.origin));
      }));
  return k;
}

Launch stencil_slab_launch(const stencil_kernel::Shape& s, std::uint32_t planes) {
  return {Dim3{(s.nx + kRow - 1) / kRow, s.ny, planes}, Dim3{kRow}, 0};
}

Output stencil_adsm(Runtime& rt, int device, const StencilProblem& p, int output_fd) {
  float* u = rt.alloc<float>(p.points(), device);
  float* next = rt.alloc<float>(p.points(), device);
  std::vector<char> staging(kStagingBytes);
  for (unsigned step = 0; step < p.steps; ++step) {
    u[source_index(p)] += source_value(step);
    rt.call(stencil7_kernel(), stencil_slab_launch(shape_of(p), p.nz), u, next, shape_of(p));
    rt.sync();
    std::swap(u, next);
    if (p.output_every != 0 && (step + 1) % p.output_every == 0)
      write_volume(output_fd, u, p.points(), staging);
  }
  Output out = sample(u, p);
  rt.free(u);
  rt.free(next);
  return out;
}

Output stencil_explicit(Device& d, const StencilProblem& p, int output_fd) {
  const std::size_t bytes = p.points() * sizeof(float);
  std::vector<float> host(p.points());
  DeviceBuffer u = d.alloc(bytes), next = d.alloc(bytes);
  auto queue = d.create_queue();
  queue->fill(u, 0, bytes, 0);
  queue->fill(next, 0, bytes, 0);
  const std::size_t at = source_index(p) * sizeof(float);
  std::vector<char> staging(kStagingBytes);
  float value = 0;  // an asynchronous copy reads it after the call: it must outlive the iteration
  for (unsigned step = 0; step < p.steps; ++step) {
    queue->copy_to_host(&value, u, at, sizeof value);
    queue->synchronize();
    value += source_value(step);
    queue->copy_to_device(u, at, &value, sizeof value);
    const KernelArg args[] = {KernelArg::buffer(u), KernelArg::buffer(next), KernelArg::value(shape_of(p))};
    queue->launch(stencil7_kernel(), stencil_slab_launch(shape_of(p), p.nz), args);
    std::swap(u, next);
    if (p.output_every != 0 && (step + 1) % p.output_every == 0) {
      queue->copy_to_host(host.data(), u, 0, bytes);
      queue->synchronize();
      write_volume(output_fd, host.data(), p.points(), staging);
    }
  }
  queue->copy_to_host(host.data(), u, 0, bytes);
  queue->synchronize();
  d.free(u);
  d.free(next);
  return sample(host.data(), p);
}

Output stencil_reference(const StencilProblem& p) {
  std::vector<float> u(p.points(), 0.0f), next(p.points(), 0.0f);
  const Shape s = shape_of(p);
  for (unsigned step = 0; step < p.steps; ++step) {
    u[source_index(p)] += source_value(step);
    for (std::uint32_t z = 0; z < s.nz; ++z)
      for (std::uint32_t y = 0; y < s.ny; ++y)
        for (std::uint32_t x = 0; x < s.nx; ++x) step_point(u.data(), next.data(), s, x, y, z);
    std::swap(u, next);
  }
  return sample(u.data(), p);
}

}  // namespace hdsm::apps
