// The 3D stencil over several devices (seed 003 §2.2, §5.3): the volume is split along z into one
// slab per device, each with a halo plane on either side. Every step a device first computes its
// two boundary planes, then its interior while the boundary planes go to the neighbours' halos.
// The 7-point update is the single-device stencil's (stencil_kernel.hpp), without the CPU source.
#include "apps/multi.hpp"
#include "apps/random.hpp"
#include "apps/stencil.hpp"
#include "apps/stencil_kernel.hpp"

#include <hdsm/hdsm.hpp>

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

namespace hdsm::apps {
namespace {

using stencil_kernel::Planes;
using stencil_kernel::Shape;

constexpr unsigned kSteps = kStencilCubeSteps;
Shape shape_of(std::size_t size) { return stencil_cube(size); }
std::vector<float> initial_volume(const Shape& s) { return stencil_cube_volume(s); }

/// One device's part: `planes` planes from global plane `z0`, stored with a halo plane either side.
struct Slab {
  std::uint32_t z0, planes;
  std::size_t plane_points;
  std::size_t points() const { return (planes + 2) * plane_points; }
  std::size_t plane_bytes() const { return plane_points * sizeof(float); }
  std::int32_t origin() const { return static_cast<std::int32_t>(z0) - 1; }
};

Slab slab_of(const Shape& s, std::size_t devices, std::size_t d) {
  if (s.nz % devices != 0 || s.nz / devices < 2)
    throw std::invalid_argument(
        fmt::format("stencil: {} planes do not split into {} slabs of at least 2 planes", s.nz, devices));
  const auto planes = static_cast<std::uint32_t>(s.nz / devices);
  return {static_cast<std::uint32_t>(d) * planes, planes, std::size_t{s.nx} * s.ny};
}

/// The slab's initial contents: its planes and the halos (zero outside the volume).
std::vector<float> initial_slab(const std::vector<float>& volume, const Shape& s, const Slab& slab) {
  std::vector<float> v(slab.points(), 0.0f);
  for (std::uint32_t local = 0; local < slab.planes + 2; ++local) {
    const std::int32_t z = slab.origin() + static_cast<std::int32_t>(local);
    if (z < 0 || z >= static_cast<std::int32_t>(s.nz)) continue;
    std::copy_n(volume.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(z) * slab.plane_points),
                slab.plane_points, v.begin() + static_cast<std::ptrdiff_t>(local * slab.plane_points));
  }
  return v;
}

/// The launches of one step: the boundary planes (1 and `planes`), then the interior (2..planes-1).
struct Part {
  Planes planes;
  std::uint32_t count;
};
Part boundary_part(const Slab& slab, bool right) { return {{right ? slab.planes : 1u, slab.origin()}, 1}; }
Part interior_part(const Slab& slab) { return {{2, slab.origin()}, slab.planes - 2}; }

Output output_of(const std::vector<float>& volume) { return sampled(std::span<const float>(volume)); }

MultiRun run_hdsm(Runtime& rt, std::span<const unsigned> devices, std::size_t size) {
  const Shape s = shape_of(size);
  const std::size_t n = devices.size();
  const std::vector<float> volume = initial_volume(s);
  // Two volumes per device that trade roles every step: step t reads buffer[t % 2] and writes
  // buffer[(t + 1) % 2]. Indexing by the step's parity, not swapping pointers, lets every member find
  // its neighbours' objects of any step without waiting for them to swap.
  std::array<std::vector<float*>, 2> buffer{std::vector<float*>(n), std::vector<float*>(n)};
  std::vector<Slab> slabs;
  for (std::size_t d = 0; d < n; ++d) {
    slabs.push_back(slab_of(s, n, d));
    for (auto& b : buffer) b[d] = rt.alloc<float>(slabs[d].points(), static_cast<int>(devices[d]));
    const std::vector<float> init = initial_slab(volume, s, slabs[d]);
    rt.memcpy(buffer[0][d], init.data(), init.size() * sizeof(float));
  }
  std::vector<ExchangeTimer> timers(n);
  ExchangeTimer total;
  run_team(n, [&](std::size_t d, Team& team) {
    const Slab& slab = slabs[d];
    const std::size_t plane = slab.plane_points;
    team.arrive_and_wait();
    if (d == 0) total.start();
    for (unsigned step = 0; step < kSteps; ++step) {
      float* const u = buffer[step % 2][d];
      const std::vector<float*>& next = buffer[(step + 1) % 2];
      // A part reads planes [first - 1, first + count] of u and writes planes [first, first + count)
      // of next: the ranges let the interior run while the boundary planes are copied out of next and
      // the neighbours' planes into its halos, and let the next step's parts wait for exactly the
      // copies into the halos they read.
      const auto launch = [&](const Part& p) {
        const std::uint32_t first = p.planes.first;
        rt.call(stencil_slab_kernel(), stencil_slab_launch(s, p.count),
                hdsm::in(u, (first - 1) * plane, (p.count + 2) * plane),
                hdsm::inout(next[d], first * plane, p.count * plane), s, p.planes);
      };
      launch(boundary_part(slab, false));
      launch(boundary_part(slab, true));
      wait_for_device(rt, next[d]);  // the boundary planes are computed: the exchange is timed from here
      timers[d].start();
      // Boundary planes to the neighbours' halos (Listing 4: the runtime moves them, peer or staged),
      // while the interior computes.
      std::vector<Event> sent;
      if (d > 0)
        sent.push_back(rt.memcpy_async(next[d - 1] + (slabs[d - 1].planes + 1) * plane, next[d] + plane,
                                       slab.plane_bytes()));
      if (d + 1 < n)
        sent.push_back(rt.memcpy_async(next[d + 1], next[d] + slab.planes * plane, slab.plane_bytes()));
      // Every copy of this step has started, so none waits for a neighbour's interior; and a member's
      // next step, whose parts read the halos, finds the copies into them to wait for.
      team.arrive_and_wait();
      if (slab.planes > 2) launch(interior_part(slab));
      for (const Event& e : sent) e.wait();
      timers[d].stop();
    }
    team.arrive_and_wait();  // every member has issued its last step
    if (d == 0) {
      rt.sync();
      total.stop();
    }
  });
  const std::vector<float*>& u = buffer[kSteps % 2];
  std::vector<float> result(volume.size());
  for (std::size_t d = 0; d < n; ++d) {
    const Slab& slab = slabs[d];
    rt.memcpy(result.data() + slab.z0 * slab.plane_points, u[d] + slab.plane_points,
              slab.planes * slab.plane_bytes());
    for (auto& b : buffer) rt.free(b[d]);
  }
  return multi_run(output_of(result), total, timers);
}

MultiRun run_explicit(std::span<Device* const> devices, std::size_t size) {
  const Shape s = shape_of(size);
  const std::size_t n = devices.size();
  const std::vector<float> volume = initial_volume(s);
  std::vector<float> result(volume.size());
  const Slab first = slab_of(s, n, 0);
  // Listing 1's host buffers: each device's left and right boundary plane.
  std::vector<std::unique_ptr<PinnedBuffer>> left_bound, right_bound;
  for (Device* device : devices) {
    left_bound.push_back(std::make_unique<PinnedBuffer>(*device, first.plane_bytes()));
    right_bound.push_back(std::make_unique<PinnedBuffer>(*device, first.plane_bytes()));
  }
  std::vector<ExchangeTimer> timers(n);
  ExchangeTimer total;
  run_team(n, [&](std::size_t d, Team& team) {
    Device& device = *devices[d];
    const Slab slab = slab_of(s, n, d);
    const std::size_t plane = slab.plane_bytes();
    DeviceArray a(device, slab.points() * sizeof(float)), b(device, slab.points() * sizeof(float));
    DeviceBuffer u = a.get(), next = b.get();
    auto compute = device.create_queue(), copies = device.create_queue();
    const std::vector<float> init = initial_slab(volume, s, slab);
    compute->copy_to_device(u, 0, init.data(), init.size() * sizeof(float));
    compute->fill(next, 0, slab.points() * sizeof(float), 0);
    compute->synchronize();
    const auto launch = [&](const Part& p) {
      const KernelArg args[] = {KernelArg::buffer(u), KernelArg::buffer(next), KernelArg::value(s),
                                KernelArg::value(p.planes)};
      compute->launch(stencil_slab_kernel(), stencil_slab_launch(s, p.count), args);
    };
    team.arrive_and_wait();
    if (d == 0) total.start();
    for (unsigned step = 0; step < kSteps; ++step) {
      launch(boundary_part(slab, false));
      launch(boundary_part(slab, true));
      const Event boundary = compute->record();
      if (slab.planes > 2) launch(interior_part(slab));
      boundary.wait();
      timers[d].start();
      // (1a, 1b) boundaries to host, while the interior computes.
      if (d > 0) copies->copy_to_host(left_bound[d]->get(), next, plane, plane);
      if (d + 1 < n) copies->copy_to_host(right_bound[d]->get(), next, slab.planes * plane, plane);
      copies->synchronize();
      team.arrive_and_wait();  // (2a, 2b, 3a, 3b) every boundary is on the host
      // (4a, 4b) the neighbours' boundaries into this device's halos.
      if (d > 0) copies->copy_to_device(next, 0, right_bound[d - 1]->get(), plane);
      if (d + 1 < n) copies->copy_to_device(next, (slab.planes + 1) * plane, left_bound[d + 1]->get(), plane);
      copies->synchronize();
      timers[d].stop();
      compute->synchronize();
      team.arrive_and_wait();  // (5, 6) every host buffer has been read: the next step may refill it
      std::swap(u, next);
    }
    if (d == 0) total.stop();
    compute->copy_to_host(result.data() + slab.z0 * slab.plane_points, u, plane, slab.planes * plane);
    compute->synchronize();
  });
  return multi_run(output_of(result), total, timers);
}

Output run_reference(std::size_t size) {
  const Shape s = shape_of(size);
  std::vector<float> u = initial_volume(s), next(u.size(), 0.0f);
  for (unsigned step = 0; step < kSteps; ++step) {
    for (std::uint32_t z = 0; z < s.nz; ++z)
      for (std::uint32_t y = 0; y < s.ny; ++y)
        for (std::uint32_t x = 0; x < s.nx; ++x)
          stencil_kernel::step_point(u.data(), next.data(), s, x, y, z);
    std::swap(u, next);
  }
  return output_of(u);
}

std::vector<std::size_t> sizes(Scale scale) {
  const auto cube = [](std::size_t side) { return side * side * side; };
  return by_scale<std::vector<std::size_t>>(scale, {cube(16)}, {cube(64)}, {cube(64), cube(96), cube(128)});
}

}  // namespace

Shape stencil_cube(std::size_t size) {
  const auto side = static_cast<std::uint32_t>(std::llround(std::cbrt(static_cast<double>(size))));
  return {side, side, side};
}

std::vector<float> stencil_cube_volume(const Shape& s) {
  std::vector<float> v(std::size_t{s.nx} * s.ny * s.nz);
  Xorshift64 random(0x57e9c11u);
  for (float& x : v) x = random.uniform();
  return v;
}

MultiApp stencil_multi_app() {
  return {"stencil",
          "a cube split along z into one slab per device; every step the boundary planes are computed first "
          "and go to the neighbours' halo planes while the interior computes",
          sizes,
          [](std::size_t size) { return size * sizeof(float); },
          run_hdsm,
          run_explicit,
          run_reference,
          kStencilTolerance};
}

}  // namespace hdsm::apps
