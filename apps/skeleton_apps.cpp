#include "apps/skeleton_apps.hpp"

#include <hdsm/hdsm.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

namespace hdsm::apps {
namespace {

// How the app's containers are made: on `rt`, pinned as `where` says.
ContainerOptions options(Runtime& rt, const Where& where) { return ContainerOptions{&rt, where.pinned, {}}; }

// Points a skeleton at `where`.
template <class S>
S& placed(S& skeleton, const Where& where) {
  skeleton.backend(where.backend);
  if (!where.devices.empty()) skeleton.devices(where.devices);
  return skeleton;
}

// --- Mandelbrot: one MapIndex call, each pixel's escape iteration count from its index. ---

HDSM_USER_FUNCTION(mandelbrot_pixel, int,
                   (unsigned long i, unsigned long width, unsigned long height, int limit), {
                     const unsigned long row = i / width;
                     const float x0 = -2.0f + 3.0f * (float)(i % width) / (float)width;
                     const float y0 = -1.25f + 2.5f * (float)row / (float)height;
                     float x = 0.0f;
                     float y = 0.0f;
                     int k = 0;
                     while (k < limit && x * x + y * y <= 4.0f) {
                       const float t = x * x - y * y + x0;
                       y = 2.0f * x * y + y0;
                       x = t;
                       ++k;
                     }
                     return k;
                   })

struct Image {
  unsigned long width, height;
  int limit;
};
Image mandelbrot_size(Scale scale) {
  return by_scale<Image>(scale, {96, 64, 64}, {512, 384, 128}, {1024, 768, 256});
}

Output mandelbrot_output(const int* iterations, const Image& im) {
  double total = 0;
  for (std::size_t i = 0; i < im.width * im.height; ++i) total += iterations[i];
  Output out{{total}};
  for (std::size_t i = 0; i < im.width * im.height; i += im.width * im.height / 32 + 1)
    out.values.push_back(iterations[i]);
  return out;
}

Output mandelbrot(Runtime& rt, const Where& where, Scale scale) {
  const Image im = mandelbrot_size(scale);
  Vector<int> image(im.width * im.height, options(rt, where));
  MapIndex<mandelbrot_pixel> pixels;
  placed(pixels, where)(image, im.width, im.height, im.limit);
  return mandelbrot_output(image.data(), im);
}

Output mandelbrot_reference(Scale scale) {
  const Image im = mandelbrot_size(scale);
  std::vector<int> image(im.width * im.height);
  for (std::size_t i = 0; i < image.size(); ++i)
    image[i] = mandelbrot_pixel::call(i, im.width, im.height, im.limit);
  return mandelbrot_output(image.data(), im);
}

// --- MSE: one MapReduce call over two images. ---

HDSM_USER_FUNCTION(squared_difference, float, (float a, float b), {
  const float d = a - b;
  return d * d;
})
HDSM_USER_FUNCTION(add_floats, float, (float a, float b), { return a + b; })
HDSM_USER_FUNCTION(multiply, float, (float a, float b), { return a * b; })
HDSM_USER_FUNCTION(square, float, (float a), { return a * a; })
HDSM_USER_FUNCTION(identity, float, (float a), { return a; })

std::size_t pixels(Scale scale) { return by_scale<std::size_t>(scale, 20'000, 1 << 20, 4 << 20); }
// Two related images: b is a with noise, both in [0, 1).
float image_a(std::size_t i) { return static_cast<float>((i * 2654435761u) % 1000) / 1000.0f; }
float image_b(std::size_t i) { return image_a(i) * 0.75f + static_cast<float>((i * 40503u) % 97) / 400.0f; }

struct Images {
  Vector<float> a, b;
};
Images images(Runtime& rt, const Where& where, std::size_t n) {
  Images im{Vector<float>(n, options(rt, where)), Vector<float>(n, options(rt, where))};
  for (std::size_t i = 0; i < n; ++i) {
    im.a(i) = image_a(i);
    im.b(i) = image_b(i);
  }
  return im;
}

Output mse(Runtime& rt, const Where& where, Scale scale) {
  const std::size_t n = pixels(scale);
  Images im = images(rt, where, n);
  MapReduce<squared_difference, add_floats> sum;
  return Output{{static_cast<double>(placed(sum, where)(im.a, im.b)) / static_cast<double>(n)}};
}

Output mse_reference(Scale scale) {
  const std::size_t n = pixels(scale);
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += squared_difference::call(image_a(i), image_b(i));
  return Output{{sum / static_cast<double>(n)}};
}

// --- PPMCC: Pearson's correlation of two images from five MapReduce calls on the same containers. ---

double pearson(double n, double sx, double sy, double sxy, double sxx, double syy) {
  return (n * sxy - sx * sy) / std::sqrt((n * sxx - sx * sx) * (n * syy - sy * sy));
}

Output ppmcc(Runtime& rt, const Where& where, Scale scale) {
  const std::size_t n = pixels(scale);
  Images im = images(rt, where, n);
  MapReduce<identity, add_floats> sum;
  MapReduce<multiply, add_floats> dot;
  MapReduce<square, add_floats> squares;
  placed(sum, where);
  placed(dot, where);
  placed(squares, where);
  const double sx = sum(im.a), sy = sum(im.b), sxy = dot(im.a, im.b), sxx = squares(im.a),
               syy = squares(im.b);
  return Output{{pearson(static_cast<double>(n), sx, sy, sxy, sxx, syy)}};
}

Output ppmcc_reference(Scale scale) {
  const std::size_t n = pixels(scale);
  double sx = 0, sy = 0, sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = image_a(i), y = image_b(i);
    sx += x;
    sy += y;
    sxy += x * y;
    sxx += x * x;
    syy += y * y;
  }
  return Output{{pearson(static_cast<double>(n), sx, sy, sxy, sxx, syy)}};
}

// Flushes the containers after a call when `where` asks for it (the initial mechanism's rule).
template <class... C>
void settle(const Where& where, C&... containers) {
  if (where.flush) (containers.flush(), ...);
}

// --- NBody: one MapArray call a step, every body pulled by all the others (softened gravity), the
// array and the output swapping roles each step (seed 001 Listing 1). ---

HDSM_USER_TYPE(Body, float x; float y; float z; float vx; float vy; float vz; float mass;)

HDSM_USER_FUNCTION(nbody_move, Body, (HDSM_GLOBAL const Body* all, Body b, unsigned long n, float dt), {
  float ax = 0.0f;
  float ay = 0.0f;
  float az = 0.0f;
  for (unsigned long j = 0; j < n; ++j) {
    const float dx = all[j].x - b.x;
    const float dy = all[j].y - b.y;
    const float dz = all[j].z - b.z;
    const float d2 = dx * dx + dy * dy + dz * dz + 0.01f;
    const float inv = 1.0f / sqrt(d2);
    const float s = all[j].mass * inv * inv * inv;
    ax += s * dx;
    ay += s * dy;
    az += s * dz;
  }
  Body r = b;
  r.vx = b.vx + dt * ax;
  r.vy = b.vy + dt * ay;
  r.vz = b.vz + dt * az;
  r.x = b.x + dt * r.vx;
  r.y = b.y + dt * r.vy;
  r.z = b.z + dt * r.vz;
  return r;
})

constexpr int kNbodySteps = 50;
constexpr float kNbodyDt = 0.001f;

Body body(std::size_t i, std::size_t n) {
  const auto coord = [&](std::size_t salt) {
    return static_cast<float>((i * 2654435761u + salt * 40503u) % 2048) / 1024.0f - 1.0f;
  };
  return Body{coord(1),
              coord(2),
              coord(3),
              coord(4) * 0.1f,
              coord(5) * 0.1f,
              coord(6) * 0.1f,
              1.0f / static_cast<float>(n)};
}

Output bodies_output(const Body* b, std::size_t n) {
  double x = 0, y = 0, z = 0, v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    x += b[i].x;
    y += b[i].y;
    z += b[i].z;
    v += std::fabs(b[i].vx) + std::fabs(b[i].vy) + std::fabs(b[i].vz);
  }
  Output out{{x, y, z, v}};
  for (std::size_t i = 0; i < n; i += n / 8 + 1)
    out.values.insert(out.values.end(), {b[i].x, b[i].y, b[i].z});
  return out;
}

Output nbody_sized(Runtime& rt, const Where& where, std::size_t n) {
  Vector<Body> a(n, options(rt, where)), b(n, options(rt, where));
  for (std::size_t i = 0; i < n; ++i) a(i) = body(i, n);
  MapArray<nbody_move> move;
  placed(move, where);
  for (int step = 0; step < kNbodySteps; step += 2) {
    move(b, a, a, std::uint64_t{n}, kNbodyDt);
    settle(where, a, b);
    move(a, b, b, std::uint64_t{n}, kNbodyDt);
    settle(where, a, b);
  }
  return bodies_output(a.data(), n);
}

Output nbody_reference_sized(std::size_t n) {
  std::vector<Body> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = body(i, n);
  for (int step = 0; step < kNbodySteps; ++step) {
    for (std::size_t i = 0; i < n; ++i) b[i] = nbody_move::call(a.data(), a[i], n, kNbodyDt);
    a.swap(b);
  }
  return bodies_output(a.data(), n);
}

std::size_t nbody_size(Scale scale) { return by_scale<std::size_t>(scale, 256, 1024, 2048); }
Output nbody(Runtime& rt, const Where& where, Scale scale) {
  return nbody_sized(rt, where, nbody_size(scale));
}
Output nbody_reference(Scale scale) { return nbody_reference_sized(nbody_size(scale)); }

// --- SPH: smoothed-particle hydrodynamics of a block of fluid falling in a box; a step is two MapArray
// calls over all pairs, density and pressure, then forces and integration. ---

HDSM_USER_TYPE(Fluid, float x; float y; float z; float vx; float vy; float vz; float rho; float p;)

// Particles of mass 0.125 on a lattice 0.05 apart: about the rest density, 1000. Pressure 3 (rho -
// 1000); kernels of radius h (poly6 for density, spiky for pressure, viscosity).
HDSM_USER_FUNCTION(sph_density, Fluid, (HDSM_GLOBAL const Fluid* all, Fluid f, unsigned long n, float h), {
  const float h2 = h * h;
  const float poly6 = 315.0f / (64.0f * 3.14159265f * h2 * h2 * h2 * h2 * h);
  float rho = 0.0f;
  for (unsigned long j = 0; j < n; ++j) {
    const float dx = all[j].x - f.x;
    const float dy = all[j].y - f.y;
    const float dz = all[j].z - f.z;
    const float r2 = dx * dx + dy * dy + dz * dz;
    if (r2 < h2) {
      const float w = h2 - r2;
      rho += 0.125f * poly6 * w * w * w;
    }
  }
  Fluid g = f;
  g.rho = rho;
  g.p = 3.0f * (rho - 1000.0f);
  return g;
})

HDSM_USER_FUNCTION(sph_move, Fluid,
                   (HDSM_GLOBAL const Fluid* all, Fluid f, unsigned long n, float h, float dt), {
                     const float spiky = -45.0f / (3.14159265f * h * h * h * h * h * h);
                     const float viscous = 45.0f / (3.14159265f * h * h * h * h * h * h);
                     float fx = 0.0f;
                     float fy = 0.0f;
                     float fz = 0.0f;
                     for (unsigned long j = 0; j < n; ++j) {
                       const float dx = f.x - all[j].x;
                       const float dy = f.y - all[j].y;
                       const float dz = f.z - all[j].z;
                       const float r = sqrt(dx * dx + dy * dy + dz * dz);
                       if (r > 0.0f && r < h) {
                         const float q = h - r;
                         const float push =
                             -0.125f * (f.p + all[j].p) / (2.0f * all[j].rho) * spiky * q * q / r;
                         fx += push * dx;
                         fy += push * dy;
                         fz += push * dz;
                         const float drag = 0.5f * 0.125f / all[j].rho * viscous * q;
                         fx += drag * (all[j].vx - f.vx);
                         fy += drag * (all[j].vy - f.vy);
                         fz += drag * (all[j].vz - f.vz);
                       }
                     }
                     Fluid g = f;
                     g.vx = f.vx + dt * fx / f.rho;
                     g.vy = f.vy + dt * (fy / f.rho - 9.8f);
                     g.vz = f.vz + dt * fz / f.rho;
                     g.x = f.x + dt * g.vx;
                     g.y = f.y + dt * g.vy;
                     g.z = f.z + dt * g.vz;
                     // The box [0, 1]^3: a particle that leaves it comes back with half its speed.
                     if (g.x < 0.0f || g.x > 1.0f) {
                       g.x = fmin(fmax(g.x, 0.0f), 1.0f);
                       g.vx = -0.5f * g.vx;
                     }
                     if (g.y < 0.0f || g.y > 1.0f) {
                       g.y = fmin(fmax(g.y, 0.0f), 1.0f);
                       g.vy = -0.5f * g.vy;
                     }
                     if (g.z < 0.0f || g.z > 1.0f) {
                       g.z = fmin(fmax(g.z, 0.0f), 1.0f);
                       g.vz = -0.5f * g.vz;
                     }
                     return g;
                   })

constexpr int kSphSteps = 20;
constexpr float kSphH = 0.1f;
constexpr float kSphDt = 0.002f;

// A cube of particles on a lattice 0.05 apart in a corner of the box, slightly jittered.
Fluid fluid(std::size_t i, std::size_t n) {
  auto side = static_cast<std::size_t>(std::lround(std::cbrt(static_cast<double>(n))));
  while (side * side * side < n) ++side;
  const auto at = [&](std::size_t k, std::size_t salt) {
    return 0.05f + 0.05f * static_cast<float>(k) + static_cast<float>((i * 2654435761u + salt) % 17) * 1e-4f;
  };
  return Fluid{at(i % side, 1), at(i / side % side, 2), at(i / (side * side), 3), 0, 0, 0, 1000.0f, 0};
}

Output fluid_output(const Fluid* f, std::size_t n) {
  double x = 0, y = 0, z = 0, rho = 0;
  for (std::size_t i = 0; i < n; ++i) {
    x += f[i].x;
    y += f[i].y;
    z += f[i].z;
    rho += f[i].rho;
  }
  Output out{{x, y, z, rho}};
  for (std::size_t i = 0; i < n; i += n / 8 + 1)
    out.values.insert(out.values.end(), {f[i].x, f[i].y, f[i].z});
  return out;
}

Output sph_sized(Runtime& rt, const Where& where, std::size_t n) {
  Vector<Fluid> a(n, options(rt, where)), b(n, options(rt, where));
  for (std::size_t i = 0; i < n; ++i) a(i) = fluid(i, n);
  MapArray<sph_density> density;
  MapArray<sph_move> move;
  placed(density, where);
  placed(move, where);
  for (int step = 0; step < kSphSteps; ++step) {
    density(b, a, a, std::uint64_t{n}, kSphH);
    settle(where, a, b);
    move(a, b, b, std::uint64_t{n}, kSphH, kSphDt);
    settle(where, a, b);
  }
  return fluid_output(a.data(), n);
}

Output sph_reference_sized(std::size_t n) {
  std::vector<Fluid> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = fluid(i, n);
  for (int step = 0; step < kSphSteps; ++step) {
    for (std::size_t i = 0; i < n; ++i) b[i] = sph_density::call(a.data(), a[i], n, kSphH);
    for (std::size_t i = 0; i < n; ++i) a[i] = sph_move::call(b.data(), b[i], n, kSphH, kSphDt);
  }
  return fluid_output(a.data(), n);
}

std::size_t sph_size(Scale scale) { return by_scale<std::size_t>(scale, 216, 1000, 2744); }
Output sph(Runtime& rt, const Where& where, Scale scale) { return sph_sized(rt, where, sph_size(scale)); }
Output sph_reference(Scale scale) { return sph_reference_sized(sph_size(scale)); }

// --- LU: Doolittle factorization without pivoting of a diagonally dominant n x n matrix, one
// MapArrayIndex call per column k: element (i, j) of the next matrix from the current one; the two
// matrices swap roles every step. The result holds U on and above the diagonal, L's multipliers
// below. ---

HDSM_USER_FUNCTION(lu_step, float,
                   (unsigned long e, HDSM_GLOBAL const float* a, unsigned long n, unsigned long k), {
                     const unsigned long i = e / n;
                     const unsigned long j = e % n;
                     if (i <= k || j < k) return a[e];
                     const float l = a[i * n + k] / a[k * n + k];
                     if (j == k) return l;
                     return a[e] - l * a[k * n + j];
                   })

float lu_element(std::size_t i, std::size_t j, std::size_t n) {
  const float noise = static_cast<float>((i * 2654435761u + j * 40503u) % 1000) / 1000.0f;
  return i == j ? static_cast<float>(n) + noise : noise;
}

Output lu_output(const float* a, std::size_t n) {
  double upper = 0, lower = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) (j >= i ? upper : lower) += a[i * n + j];
  Output out{{upper, lower}};
  for (std::size_t e = 0; e < n * n; e += n * n / 16 + 1) out.values.push_back(a[e]);
  return out;
}

Output lu_sized(Runtime& rt, const Where& where, std::size_t n) {
  Vector<float> a(n * n, options(rt, where)), b(n * n, options(rt, where));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) a(i * n + j) = lu_element(i, j, n);
  MapArrayIndex<lu_step> step;
  placed(step, where);
  Vector<float>* from = &a;
  Vector<float>* to = &b;
  for (std::size_t k = 0; k + 1 < n; ++k) {
    step(*to, *from, std::uint64_t{n}, std::uint64_t{k});
    settle(where, a, b);
    std::swap(from, to);
  }
  return lu_output(from->data(), n);
}

Output lu_reference_sized(std::size_t n) {
  std::vector<float> a(n * n), b(n * n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) a[i * n + j] = lu_element(i, j, n);
  for (std::size_t k = 0; k + 1 < n; ++k) {
    for (std::size_t e = 0; e < n * n; ++e) b[e] = lu_step::call(e, a.data(), n, k);
    a.swap(b);
  }
  return lu_output(a.data(), n);
}

std::size_t lu_size(Scale scale) { return by_scale<std::size_t>(scale, 48, 192, 384); }
Output lu(Runtime& rt, const Where& where, Scale scale) { return lu_sized(rt, where, lu_size(scale)); }
Output lu_reference(Scale scale) { return lu_reference_sized(lu_size(scale)); }

}  // namespace

std::span<const SkeletonApp> skeleton_apps() {
  static const std::array<SkeletonApp, 6> apps{{
      {"mandelbrot", "MapIndex: each pixel's escape count from its position", mandelbrot,
       mandelbrot_reference, 0},
      // Float sums in chunks on the devices against a double loop: a few units in the 6th digit.
      {"mse", "MapReduce(squared difference, +) over two images", mse, mse_reference, 1e-4},
      {"ppmcc", "five MapReduce calls (sums, dot product, squares) over the same two images", ppmcc,
       ppmcc_reference, 1e-3},
      // The iterative three compute the same float operations in the same order as their references
      // (no contraction): the tolerance covers OpenCL's and CUDA's sqrt and division.
      {"nbody", "MapArray per step (50 steps): every body from all bodies, array and output swapping", nbody,
       nbody_reference, 1e-4},
      {"sph", "two MapArray calls per step (density and pressure; forces and motion)", sph, sph_reference,
       1e-4},
      {"lu", "MapArrayIndex per column: the next matrix from the current one", lu, lu_reference, 1e-4},
  }};
  return apps;
}

std::vector<SizedRun> table1_apps(Scale scale) {
  const auto app = [](std::string_view name) {
    for (const SkeletonApp& a : skeleton_apps())
      if (a.name == name) return &a;
    return static_cast<const SkeletonApp*>(nullptr);
  };
  // Three sizes each, the largest the app's own at `scale`.
  const auto sizes = [&](std::size_t largest, std::size_t step) {
    return std::vector<std::size_t>{largest / step / step, largest / step, largest};
  };
  return {
      {app("lu"), sizes(lu_size(scale), 2), lu_sized},
      {app("nbody"), sizes(nbody_size(scale), 2), nbody_sized},
      {app("sph"), sizes(sph_size(scale), 2), sph_sized},
  };
}

}  // namespace hdsm::apps
