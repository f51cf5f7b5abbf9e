#include "apps/crc_apps.hpp"

#include <hdsm/error.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

namespace hdsm::apps::crc_apps {
namespace crc = hdsm::crc;

namespace {

// Local runs of a shared array: f(local pointer, first index, count) over [first, last), page by
// page, through the localized access of `version`.
template <class T, class F>
void each_local_read(const T* a, std::size_t first, std::size_t last, F&& f) {
  for (std::size_t i = first; i < last;) {
    const crc::Local<const T> l = crc::read_only_local(&a[i]);
    const std::size_t n = std::min(l.count, last - i);
    f(l.data, i, n);
    i += n;
  }
}

// Writes `value` to a[i] for a worker whose share of `a` is [share.first, share.second): as the single
// writer (`single`: the optimized versions) where i's page lies inside the share, through the protocol
// where another worker's share ends in the same page (even shares split pages).
void put_in_share(double* a, std::pair<std::size_t, std::size_t> share, std::size_t i, double value,
                  bool single, std::size_t page_bytes) {
  double* p = &a[i];
  const auto page = reinterpret_cast<std::uintptr_t>(p) & ~(std::uintptr_t{page_bytes} - 1);
  if (single && page >= reinterpret_cast<std::uintptr_t>(&a[share.first]) &&
      page + page_bytes <= reinterpret_cast<std::uintptr_t>(&a[share.second]))
    crc::write_single(p, value);
  else
    crc::write(p, value);
}

// ---------------------------------------------------------------------------------------------
// STREAM (HPCC): copy, scale, add and triad over three arrays, ntimes.
struct StreamSize {
  std::size_t n;
  int times;
};
StreamSize stream_size(Scale s) {
  return by_scale(s, StreamSize{1 << 14, 2}, StreamSize{1 << 19, 4}, StreamSize{1 << 21, 8});
}
constexpr double kScalar = 3.0;

Output stream_output(const double* a, const double* b, const double* c, std::size_t n) {
  double sa = 0, sb = 0, sc = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sa += a[i];
    sb += b[i];
    sc += c[i];
  }
  return {{sa, sb, sc, a[0], b[n / 2], c[n - 1]}};
}

void stream_init(double* a, double* b, double* c, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = 1.0 + static_cast<double>(i % 7);
    b[i] = 2.0;
    c[i] = 0.0;
  }
}

Output stream_reference(Scale s) {
  const StreamSize size = stream_size(s);  // named, not bound: lambdas capture them
  const std::size_t n = size.n;
  const int times = size.times;
  std::vector<double> a(n), b(n), c(n);
  stream_init(a.data(), b.data(), c.data(), n);
  for (int k = 0; k < times; ++k) {
    for (std::size_t i = 0; i < n; ++i) c[i] = a[i];
    for (std::size_t i = 0; i < n; ++i) b[i] = kScalar * c[i];
    for (std::size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
    for (std::size_t i = 0; i < n; ++i) a[i] = b[i] + kScalar * c[i];
  }
  return stream_output(a.data(), b.data(), c.data(), n);
}

Output stream_openmp(int threads, Scale s) {
  const StreamSize size = stream_size(s);  // named, not bound: lambdas capture them
  const std::size_t n = size.n;
  const int times = size.times;
  std::vector<double> a(n), b(n), c(n);
  const auto sn = static_cast<std::int64_t>(n);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t i = 0; i < sn; ++i) {
    a[static_cast<std::size_t>(i)] = 1.0 + static_cast<double>(i % 7);
    b[static_cast<std::size_t>(i)] = 2.0;
    c[static_cast<std::size_t>(i)] = 0.0;
  }
  for (int k = 0; k < times; ++k) {
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
      for (std::int64_t i = 0; i < sn; ++i) c[static_cast<std::size_t>(i)] = a[static_cast<std::size_t>(i)];
#pragma omp for schedule(static)
      for (std::int64_t i = 0; i < sn; ++i)
        b[static_cast<std::size_t>(i)] = kScalar * c[static_cast<std::size_t>(i)];
#pragma omp for schedule(static)
      for (std::int64_t i = 0; i < sn; ++i)
        c[static_cast<std::size_t>(i)] = a[static_cast<std::size_t>(i)] + b[static_cast<std::size_t>(i)];
#pragma omp for schedule(static)
      for (std::int64_t i = 0; i < sn; ++i)
        a[static_cast<std::size_t>(i)] =
            b[static_cast<std::size_t>(i)] + kScalar * c[static_cast<std::size_t>(i)];
    }
  }
  return stream_output(a.data(), b.data(), c.data(), n);
}

Output stream_crc(crc::Runtime& rt, Version v, Scale s) {
  const StreamSize size = stream_size(s);  // named, not bound: lambdas capture them
  const std::size_t n = size.n;
  const int times = size.times;
  double* a = rt.alloc<double>(n);
  double* b = rt.alloc<double>(n);
  double* c = rt.alloc<double>(n);
  // The home initializes and reads the shared space; under MPI the other ranks only run the task.
  if (rt.is_home()) stream_init(a, b, c, n);
  const std::size_t granule = rt.page_size() / sizeof(double);
  rt.run([&] {
    if (v == Version::plain) {
      const std::pair<std::size_t, std::size_t> lo_hi = crc::share(n);
      const std::size_t lo = lo_hi.first, hi = lo_hi.second;
      for (int k = 0; k < times; ++k) {
        for (std::size_t i = lo; i < hi; ++i) crc::write(&c[i], crc::read(&a[i]));
        crc::barrier();
        for (std::size_t i = lo; i < hi; ++i) crc::write(&b[i], kScalar * crc::read(&c[i]));
        crc::barrier();
        for (std::size_t i = lo; i < hi; ++i) crc::write(&c[i], crc::read(&a[i]) + crc::read(&b[i]));
        crc::barrier();
        for (std::size_t i = lo; i < hi; ++i)
          crc::write(&a[i], crc::read(&b[i]) + kScalar * crc::read(&c[i]));
        crc::barrier();
      }
      return;
    }
    // Page-aligned shares: every page has one writer; sources are read-only in each phase.
    const std::pair<std::size_t, std::size_t> lo_hi = crc::share(n, granule);
    const std::size_t lo = lo_hi.first, hi = lo_hi.second;
    // dst[i] = f(x[i], y[i]) page by page in the local store.
    const auto kernel = [&](double* dst, const double* x, const double* y, auto f) {
      for (std::size_t i = lo; i < hi;) {
        // The destination's pages are this worker's and written whole: not fetched.
        const crc::Local<double> d = crc::overwrite_local(&dst[i]);
        const crc::Local<const double> lx = crc::read_only_local(&x[i]);
        const crc::Local<const double> ly = crc::read_only_local(&y[i]);
        const std::size_t m = std::min({d.count, lx.count, ly.count, hi - i});
        for (std::size_t k = 0; k < m; ++k) d.data[k] = f(lx.data[k], ly.data[k]);
        i += m;
      }
      crc::barrier();
    };
    for (int k = 0; k < times; ++k) {
      kernel(c, a, a, [](double x, double) { return x; });
      kernel(b, c, c, [](double x, double) { return kScalar * x; });
      kernel(c, a, b, [](double x, double y) { return x + y; });
      kernel(a, b, c, [](double x, double y) { return x + kScalar * y; });
    }
  });
  Output out = rt.is_home() ? stream_output(a, b, c, n) : Output{};
  rt.free(a);
  rt.free(b);
  rt.free(c);
  return out;
}

// ---------------------------------------------------------------------------------------------
// jacobi (OpenMP sample): Helmholtz equation on an n x n grid, fixed iterations, Jacobi relaxation.
struct JacobiSize {
  std::size_t n;
  int iterations;
};
JacobiSize jacobi_size(Scale s) {
  return by_scale(s, JacobiSize{64, 4}, JacobiSize{500, 20}, JacobiSize{1000, 40});
}
constexpr double kAlpha = 0.0543, kRelax = 1.0;

struct JacobiCoefficients {
  double ax, ay, b;
};
JacobiCoefficients jacobi_coefficients(std::size_t n) {
  const double dx = 2.0 / static_cast<double>(n - 1), dy = dx;
  return {1.0 / (dx * dx), 1.0 / (dy * dy), -2.0 / (dx * dx) - 2.0 / (dy * dy) - kAlpha};
}

void jacobi_init(double* u, double* f, std::size_t n) {
  const double dx = 2.0 / static_cast<double>(n - 1), dy = dx;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      const double xx = -1.0 + dx * static_cast<double>(i), yy = -1.0 + dy * static_cast<double>(j);
      u[i * n + j] = 0.0;
      f[i * n + j] =
          -kAlpha * (1.0 - xx * xx) * (1.0 - yy * yy) - 2.0 * (1.0 - xx * xx) - 2.0 * (1.0 - yy * yy);
    }
}

bool interior(std::size_t k, std::size_t n) {
  const std::size_t i = k / n, j = k % n;
  return i > 0 && i + 1 < n && j > 0 && j + 1 < n;
}

// One point's residual from uold's neighbours.
template <class Get>
double jacobi_resid(const JacobiCoefficients& c, std::size_t k, std::size_t n, const double* f, Get uold) {
  return (c.ax * (uold(k - n) + uold(k + n)) + c.ay * (uold(k - 1) + uold(k + 1)) + c.b * uold(k) - f[k]) /
         c.b;
}

Output jacobi_output(const double* u, std::size_t n, double error) {
  double sum = 0;
  for (std::size_t k = 0; k < n * n; ++k) sum += u[k];
  return {{sum, u[(n / 2) * n + n / 2], error}};
}

Output jacobi_reference(Scale s) {
  const JacobiSize size = jacobi_size(s);  // named, not bound: lambdas capture them
  const std::size_t n = size.n;
  const int iters = size.iterations;
  const JacobiCoefficients c = jacobi_coefficients(n);
  std::vector<double> u(n * n), uold(n * n), f(n * n);
  jacobi_init(u.data(), f.data(), n);
  double error = 0;
  for (int it = 0; it < iters; ++it) {
    uold = u;
    error = 0;
    for (std::size_t k = 0; k < n * n; ++k)
      if (interior(k, n)) {
        const double r = jacobi_resid(c, k, n, f.data(), [&](std::size_t q) { return uold[q]; });
        u[k] = uold[k] - kRelax * r;
        error += r * r;
      }
    error = std::sqrt(error) / static_cast<double>(n * n);
  }
  return jacobi_output(u.data(), n, error);
}

Output jacobi_openmp(int threads, Scale s) {
  const JacobiSize size = jacobi_size(s);  // named, not bound: lambdas capture them
  const std::size_t n = size.n;
  const int iters = size.iterations;
  const JacobiCoefficients c = jacobi_coefficients(n);
  std::vector<double> u(n * n), uold(n * n), f(n * n);
  jacobi_init(u.data(), f.data(), n);
  const auto total = static_cast<std::int64_t>(n * n);
  double error = 0;
  for (int it = 0; it < iters; ++it) {
    error = 0;
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
      for (std::int64_t k = 0; k < total; ++k)
        uold[static_cast<std::size_t>(k)] = u[static_cast<std::size_t>(k)];
#pragma omp for schedule(static) reduction(+ : error)
      for (std::int64_t sk = 0; sk < total; ++sk) {
        const auto k = static_cast<std::size_t>(sk);
        if (!interior(k, n)) continue;
        const double r = jacobi_resid(c, k, n, f.data(), [&](std::size_t q) { return uold[q]; });
        u[k] = uold[k] - kRelax * r;
        error += r * r;
      }
    }
    error = std::sqrt(error) / static_cast<double>(n * n);
  }
  return jacobi_output(u.data(), n, error);
}

Output jacobi_crc(crc::Runtime& rt, Version v, Scale s) {
  const JacobiSize size = jacobi_size(s);  // named, not bound: lambdas capture them
  const std::size_t n = size.n;
  const int iters = size.iterations;
  const JacobiCoefficients c = jacobi_coefficients(n);
  double* u = rt.alloc<double>(n * n);
  double* uold = rt.alloc<double>(n * n);
  double* f = rt.alloc<double>(n * n);
  double* partial = rt.alloc<double>(static_cast<std::size_t>(rt.workers()));
  if (rt.is_home()) jacobi_init(u, f, n);
  const std::size_t granule = rt.page_size() / sizeof(double);
  rt.run([&] {
    const bool opt = v == Version::optimized;
    const std::pair<std::size_t, std::size_t> lo_hi = opt ? crc::share(n * n, granule) : crc::share(n * n);
    const std::size_t lo = lo_hi.first, hi = lo_hi.second;
    const auto w = static_cast<std::size_t>(crc::worker_id());
    // Optimized: the worker's points live in private memory, laid out as uold[h_lo, h_hi): its share
    // with a row of halo on each side; its part of f too. Each sweep writes uold's share whole from
    // there, fetches only the two halo rows, and computes into the second buffer. u's share is
    // written once, after the last sweep (nobody reads it before).
    std::vector<double> cur, next, f_mine;
    const std::size_t h_lo = lo >= n ? lo - n : 0, h_hi = std::min(n * n, hi + n);
    const auto into = [&](std::vector<double>& to) {
      return [&to, h_lo](const double* p, std::size_t first, std::size_t m) {
        std::copy_n(p, m, to.data() + (first - h_lo));
      };
    };
    if (opt) {
      cur.resize(h_hi - h_lo);
      next.resize(h_hi - h_lo);
      f_mine.resize(hi - lo);
      each_local_read(u, lo, hi, into(cur));
      each_local_read(f, lo, hi, [&](const double* p, std::size_t first, std::size_t m) {
        std::copy_n(p, m, f_mine.data() + (first - lo));
      });
    }
    const auto write_out = [&](double* dst) {
      for (std::size_t k = lo; k < hi;) {
        const crc::Local<double> d = crc::overwrite_local(&dst[k]);
        const std::size_t m = std::min(d.count, hi - k);
        std::copy_n(cur.data() + (k - h_lo), m, d.data);
        k += m;
      }
    };
    for (int it = 0; it < iters; ++it) {
      double local_error = 0;
      if (opt) {
        write_out(uold);
        crc::barrier();
        each_local_read(uold, h_lo, lo, into(cur));
        each_local_read(uold, hi, h_hi, into(cur));
        const double* old = cur.data();  // old[q] is uold[h_lo + q]
        double* fresh = next.data();
        double error = 0;  // in a register: local_error's address is taken by crc::write below
        for (std::size_t k = lo; k < hi; ++k) {
          const std::size_t q = k - h_lo;
          if (!interior(k, n)) {
            fresh[q] = old[q];
            continue;
          }
          const double r = (c.ax * (old[q - n] + old[q + n]) + c.ay * (old[q - 1] + old[q + 1]) +
                            c.b * old[q] - f_mine[k - lo]) /
                           c.b;
          fresh[q] = old[q] - kRelax * r;
          error += r * r;
        }
        local_error = error;
        cur.swap(next);
        if (it + 1 == iters) write_out(u);
      } else {
        for (std::size_t k = lo; k < hi; ++k) crc::write(&uold[k], crc::read(&u[k]));
        crc::barrier();
        for (std::size_t k = lo; k < hi; ++k) {
          if (!interior(k, n)) continue;
          const auto g = [&](std::size_t q) { return crc::read(&uold[q]); };
          const double r =
              (c.ax * (g(k - n) + g(k + n)) + c.ay * (g(k - 1) + g(k + 1)) + c.b * g(k) - crc::read(&f[k])) /
              c.b;
          crc::write(&u[k], crc::read(&uold[k]) - kRelax * r);
          local_error += r * r;
        }
      }
      // The sweep's residual, per worker; the home sums the last sweep's in worker order.
      crc::write(&partial[w], local_error);
      crc::barrier();
    }
  });
  Output out;
  if (rt.is_home()) {
    double sum = 0;
    for (int x = 0; x < rt.workers(); ++x) sum += partial[x];
    out = jacobi_output(u, n, std::sqrt(sum) / static_cast<double>(n * n));
  }
  for (double* p : {u, uold, f, partial}) rt.free(p);
  return out;
}

// ---------------------------------------------------------------------------------------------
// md (OpenMP sample): particles in a box with a pair potential, velocity Verlet; O(n^2) forces.
struct MdSize {
  std::size_t particles;
  int steps;
};
MdSize md_size(Scale s) { return by_scale(s, MdSize{256, 2}, MdSize{2048, 4}, MdSize{8192, 4}); }
constexpr int kDims = 3;
constexpr double kMass = 1.0, kDt = 1.0e-4, kHalfPi = 1.57079632679489661923;

double md_v(double x) {
  const double s = std::sin(std::min(x, kHalfPi));
  return s * s;
}
double md_dv(double x) { return 2.0 * std::sin(std::min(x, kHalfPi)) * std::cos(std::min(x, kHalfPi)); }

// Structure of arrays, dimension-major: pos[d * np + i].
struct MdState {
  std::vector<double> pos, vel, acc, force;
};

void md_init(double* pos, double* vel, double* acc, std::size_t np) {
  std::uint64_t seed = 123456789;
  for (std::size_t k = 0; k < kDims * np; ++k) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    pos[k] = 10.0 * static_cast<double>(seed >> 11) / 9007199254740992.0;
    vel[k] = 0.0;
    acc[k] = 0.0;
  }
}

// Force on particle i and its potential energy, from all positions through `pos`.
template <class Pos>
double md_force(std::size_t i, std::size_t np, Pos pos, double* f) {
  double potential = 0;
  for (int d = 0; d < kDims; ++d) f[d] = 0;
  const double pi[3] = {pos(0 * np + i), pos(1 * np + i), pos(2 * np + i)};
  for (std::size_t j = 0; j < np; ++j) {
    if (j == i) continue;
    double rij[3];
    double dist2 = 0;
    for (int d = 0; d < kDims; ++d) {
      rij[d] = pi[d] - pos(static_cast<std::size_t>(d) * np + j);
      dist2 += rij[d] * rij[d];
    }
    const double dist = std::sqrt(dist2);
    potential += 0.5 * md_v(dist);
    for (int d = 0; d < kDims; ++d) f[d] -= rij[d] * md_dv(dist) / dist;
  }
  return potential;
}

Output md_output(const double* pos, std::size_t np, double potential, double kinetic) {
  double sum = 0;
  for (std::size_t k = 0; k < kDims * np; ++k) sum += pos[k];
  return {{sum, potential, kinetic, pos[0], pos[kDims * np - 1]}};
}

Output md_reference(Scale s) {
  const MdSize size = md_size(s);  // named, not bound: lambdas capture them
  const std::size_t np = size.particles;
  const int steps = size.steps;
  std::vector<double> pos(kDims * np), vel(kDims * np), acc(kDims * np), force(kDims * np);
  md_init(pos.data(), vel.data(), acc.data(), np);
  double potential = 0, kinetic = 0;
  for (int step = 0; step < steps; ++step) {
    potential = kinetic = 0;
    for (std::size_t i = 0; i < np; ++i) {
      double f[3];
      potential += md_force(
          i, np, [&](std::size_t q) { return pos[q]; }, f);
      for (int d = 0; d < kDims; ++d) {
        force[static_cast<std::size_t>(d) * np + i] = f[d];
        kinetic += vel[static_cast<std::size_t>(d) * np + i] * vel[static_cast<std::size_t>(d) * np + i];
      }
    }
    kinetic *= 0.5 * kMass;
    for (std::size_t k = 0; k < kDims * np; ++k) {
      pos[k] += vel[k] * kDt + 0.5 * kDt * kDt * acc[k];
      vel[k] += 0.5 * kDt * (force[k] / kMass + acc[k]);
      acc[k] = force[k] / kMass;
    }
  }
  return md_output(pos.data(), np, potential, kinetic);
}

Output md_openmp(int threads, Scale s) {
  const MdSize size = md_size(s);  // named, not bound: lambdas capture them
  const std::size_t np = size.particles;
  const int steps = size.steps;
  std::vector<double> pos(kDims * np), vel(kDims * np), acc(kDims * np), force(kDims * np);
  md_init(pos.data(), vel.data(), acc.data(), np);
  double potential = 0, kinetic = 0;
  const auto snp = static_cast<std::int64_t>(np);
  for (int step = 0; step < steps; ++step) {
    double pot = 0, kin = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : pot, kin)
    for (std::int64_t si = 0; si < snp; ++si) {
      const auto i = static_cast<std::size_t>(si);
      double f[3];
      pot += md_force(
          i, np, [&](std::size_t q) { return pos[q]; }, f);
      for (int d = 0; d < kDims; ++d) {
        force[static_cast<std::size_t>(d) * np + i] = f[d];
        kin += vel[static_cast<std::size_t>(d) * np + i] * vel[static_cast<std::size_t>(d) * np + i];
      }
    }
    potential = pot;
    kinetic = 0.5 * kMass * kin;
    const auto total = static_cast<std::int64_t>(kDims * np);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t sk = 0; sk < total; ++sk) {
      const auto k = static_cast<std::size_t>(sk);
      pos[k] += vel[k] * kDt + 0.5 * kDt * kDt * acc[k];
      vel[k] += 0.5 * kDt * (force[k] / kMass + acc[k]);
      acc[k] = force[k] / kMass;
    }
  }
  return md_output(pos.data(), np, potential, kinetic);
}

Output md_crc(crc::Runtime& rt, Version v, Scale s) {
  const MdSize size = md_size(s);  // named, not bound: lambdas capture them
  const std::size_t np = size.particles;
  const int steps = size.steps;
  double* pos = rt.alloc<double>(kDims * np);
  double* vel = rt.alloc<double>(kDims * np);
  double* acc = rt.alloc<double>(kDims * np);
  double* force = rt.alloc<double>(kDims * np);
  double* partial = rt.alloc<double>(2 * static_cast<std::size_t>(rt.workers()));
  if (rt.is_home()) md_init(pos, vel, acc, np);
  const std::size_t page_bytes = rt.page_size();
  const std::size_t granule = page_bytes / sizeof(double);
  rt.run([&] {
    const bool opt = v == Version::optimized;
    const auto w = static_cast<std::size_t>(crc::worker_id());
    // The O(n^2) forces in even shares: in whole pages, 8192 particles of 4 KiB pages are 16
    // granules, and 15 workers would wait for the one with two. The O(n) updates in page-aligned
    // shares (optimized: one writer per page of every dimension's array).
    const std::pair<std::size_t, std::size_t> even = crc::share(np);
    const std::pair<std::size_t, std::size_t> lo_hi = opt ? crc::share(np, granule) : even;
    const std::size_t lo = lo_hi.first, hi = lo_hi.second;
    // Dimension d of `array`, element i: single-writer where its page lies inside this worker's
    // share of that dimension. The forces' even shares split pages, and so do page-aligned shares of
    // the dimensions after the first when np is not a whole number of pages.
    const auto put_in = [&](double* array, std::pair<std::size_t, std::size_t> mine, std::size_t d,
                            std::size_t i,
                            double x) { put_in_share(array + d * np, mine, i, x, opt, page_bytes); };
    std::vector<double> local_pos;
    for (int step = 0; step < steps; ++step) {
      double pot = 0, kin = 0;
      if (opt) {
        // Every position once into private memory (read-only pages), then the O(n^2) loop on it.
        local_pos.resize(kDims * np);
        each_local_read(pos, 0, kDims * np, [&](const double* p, std::size_t first, std::size_t m) {
          std::copy_n(p, m, local_pos.data() + first);
        });
      }
      for (std::size_t i = even.first; i < even.second; ++i) {
        double f[3];
        pot += opt ? md_force(
                         i, np, [&](std::size_t q) { return local_pos[q]; }, f)
                   : md_force(
                         i, np, [&](std::size_t q) { return crc::read(&pos[q]); }, f);
        for (int d = 0; d < kDims; ++d) {
          const std::size_t k = static_cast<std::size_t>(d) * np + i;
          put_in(force, even, static_cast<std::size_t>(d), i, f[d]);
          const double vk = opt ? crc::read_only(&vel[k]) : crc::read(&vel[k]);
          kin += vk * vk;
        }
      }
      // The energies of the last step stay in `partial` for the home.
      crc::write(&partial[2 * w], pot);
      crc::write(&partial[2 * w + 1], kin);
      crc::barrier();
      for (int d = 0; d < kDims; ++d)
        for (std::size_t i = lo; i < hi; ++i) {
          const std::size_t k = static_cast<std::size_t>(d) * np + i;
          const double fk = opt ? crc::read_only(&force[k]) : crc::read(&force[k]);
          const double ak = opt ? crc::read_only(&acc[k]) : crc::read(&acc[k]);
          const double vk = opt ? crc::read_only(&vel[k]) : crc::read(&vel[k]);
          const double pk = opt ? crc::read_only(&pos[k]) : crc::read(&pos[k]);
          const auto dd = static_cast<std::size_t>(d);
          put_in(pos, lo_hi, dd, i, pk + vk * kDt + 0.5 * kDt * kDt * ak);
          put_in(vel, lo_hi, dd, i, vk + 0.5 * kDt * (fk / kMass + ak));
          put_in(acc, lo_hi, dd, i, fk / kMass);
        }
      crc::barrier();
    }
  });
  Output out;
  if (rt.is_home()) {
    double potential = 0, kinetic = 0;
    for (int x = 0; x < rt.workers(); ++x) {
      potential += partial[2 * static_cast<std::size_t>(x)];
      kinetic += partial[2 * static_cast<std::size_t>(x) + 1];
    }
    out = md_output(pos, np, potential, 0.5 * kMass * kinetic);
  }
  for (double* p : {pos, vel, acc, force, partial}) rt.free(p);
  return out;
}

// ---------------------------------------------------------------------------------------------
// EP (NAS): Gaussian pairs from the NAS linear congruential generator, counted in annuli.
constexpr double kR23 = 1.0 / 8388608.0, kT23 = 8388608.0, kR46 = kR23 * kR23, kT46 = kT23 * kT23;
constexpr double kA = 1220703125.0;  // 5^13
constexpr double kSeed = 271828183.0;
constexpr int kBatchLog = 10;  // 2^10 pairs per batch

// x = a * x mod 2^46, returning x * 2^-46 (NAS randlc, in doubles).
double randlc(double& x, double a) {
  const double a1 = std::floor(kR23 * a), a2 = a - kT23 * a1;
  const double x1 = std::floor(kR23 * x), x2 = x - kT23 * x1;
  const double t1 = a1 * x2 + a2 * x1;
  const double t2 = std::floor(kR23 * t1), z = t1 - kT23 * t2;
  const double t3 = kT23 * z + a2 * x2;
  const double t4 = std::floor(kR46 * t3);
  x = t3 - kT46 * t4;
  return kR46 * x;
}

// The generator's state after 2 * pairs_before numbers: seed * a^(2 * pairs_before) mod 2^46.
double skip(double seed, std::uint64_t numbers) {
  double an = kA, x = seed;
  while (numbers != 0) {
    if ((numbers & 1) != 0) randlc(x, an);
    const double copy = an;
    randlc(an, copy);
    numbers >>= 1;
  }
  return x;
}

struct EpTally {
  double sx = 0, sy = 0;
  double q[10] = {};
};

void ep_batch(std::uint64_t batch, EpTally& t) {
  const std::uint64_t pairs = std::uint64_t{1} << kBatchLog;
  double x = skip(kSeed, 2 * pairs * batch);
  for (std::uint64_t k = 0; k < pairs; ++k) {
    const double x1 = 2.0 * randlc(x, kA) - 1.0;
    const double x2 = 2.0 * randlc(x, kA) - 1.0;
    const double tt = x1 * x1 + x2 * x2;
    if (tt > 1.0 || tt == 0.0) continue;
    const double f = std::sqrt(-2.0 * std::log(tt) / tt);
    const double gx = x1 * f, gy = x2 * f;
    const auto l = static_cast<std::size_t>(std::max(std::fabs(gx), std::fabs(gy)));
    if (l < 10) t.q[l] += 1;
    t.sx += gx;
    t.sy += gy;
  }
}

std::uint64_t ep_batches(Scale s) { return by_scale<std::uint64_t>(s, 16, 1024, 8192); }

Output ep_output(const EpTally& t) {
  Output o{{t.sx, t.sy}};
  for (const double c : t.q) o.values.push_back(c);
  return o;
}

Output ep_reference(Scale s) {
  EpTally t;
  for (std::uint64_t b = 0; b < ep_batches(s); ++b) ep_batch(b, t);
  return ep_output(t);
}

Output ep_openmp(int threads, Scale s) {
  const auto batches = static_cast<std::int64_t>(ep_batches(s));
  std::vector<EpTally> mine(static_cast<std::size_t>(threads));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t b = 0; b < batches; ++b)
    ep_batch(static_cast<std::uint64_t>(b), mine[static_cast<std::size_t>(omp_get_thread_num())]);
  EpTally t;
  for (const EpTally& m : mine) {
    t.sx += m.sx;
    t.sy += m.sy;
    for (int l = 0; l < 10; ++l) t.q[l] += m.q[l];
  }
  return ep_output(t);
}

Output ep_crc(crc::Runtime& rt, Version v, Scale s) {
  const std::uint64_t batches = ep_batches(s);
  auto* total = rt.alloc<EpTally>(1);
  rt.run([&] {
    EpTally t;
    const std::pair<std::size_t, std::size_t> lo_hi = crc::share(batches);
    const std::size_t lo = lo_hi.first, hi = lo_hi.second;
    for (std::uint64_t b = lo; b < hi; ++b) ep_batch(b, t);
    // EP shares nothing but its tallies, which meet in shared memory under a lock in both versions.
    crc::lock(0);
    EpTally sum = crc::read(total);
    sum.sx += t.sx;
    sum.sy += t.sy;
    for (int l = 0; l < 10; ++l) sum.q[l] += t.q[l];
    crc::write(total, sum);
    crc::unlock(0);
  });
  (void)v;
  Output out = rt.is_home() ? ep_output(*total) : Output{};
  rt.free(total);
  return out;
}

// ---------------------------------------------------------------------------------------------
// IS (NAS): ranks of integer keys by counting. Keys from the NAS generator (the mean of four
// uniform numbers, scaled to [0, Bmax)); each of 10 iterations changes two keys, counts the keys
// per value (each worker its share, into its own row of a shared histogram) and makes the prefix
// counts (each worker its share of the values, over every row): the rank of a key is the count of
// smaller keys.
struct IsSize {
  std::size_t keys;
  std::size_t values;
};
IsSize is_size(Scale s) {
  return by_scale(s, IsSize{1 << 12, 1 << 8}, IsSize{1 << 16, 1 << 11}, IsSize{1 << 20, 1 << 16});
}
constexpr int kIsIterations = 10;

std::vector<std::int32_t> is_keys(const IsSize& z) {
  std::vector<std::int32_t> keys(z.keys);
  double x = 314159265.0;
  const double k = static_cast<double>(z.values) / 4.0;
  for (std::size_t i = 0; i < z.keys; ++i) {
    double r = randlc(x, kA);
    r += randlc(x, kA);
    r += randlc(x, kA);
    r += randlc(x, kA);
    keys[i] = static_cast<std::int32_t>(k * r);
  }
  return keys;
}

Output is_output(const std::int32_t* prefix, const std::int32_t* keys, const IsSize& z) {
  // The ranks of a few keys spread over the array, and the sum of all prefix counts.
  Output o;
  for (std::size_t t = 1; t <= 5; ++t) {
    const std::size_t at = t * z.keys / 7;
    o.values.push_back(static_cast<double>(prefix[keys[at]]));
  }
  double sum = 0;
  for (std::size_t v = 0; v < z.values; ++v) sum += prefix[v];
  o.values.push_back(sum);
  return o;
}

// The two keys iteration `it` changes, as NAS IS does.
void is_modify(std::int32_t* keys, int it, const IsSize& z) {
  keys[it] = it;
  keys[it + kIsIterations] = static_cast<std::int32_t>(z.values) - it;
}

Output is_reference(Scale s) {
  const IsSize z = is_size(s);
  std::vector<std::int32_t> keys = is_keys(z), prefix(z.values);
  for (int it = 1; it <= kIsIterations; ++it) {
    is_modify(keys.data(), it, z);
    std::vector<std::int32_t> count(z.values + 1, 0);
    for (const std::int32_t k : keys) ++count[static_cast<std::size_t>(k)];
    std::int32_t run = 0;
    for (std::size_t v = 0; v < z.values; ++v) {
      prefix[v] = run;
      run += count[v];
    }
  }
  return is_output(prefix.data(), keys.data(), z);
}

Output is_openmp(int threads, Scale s) {
  const IsSize z = is_size(s);
  std::vector<std::int32_t> keys = is_keys(z), prefix(z.values);
  std::vector<std::int32_t> hist(static_cast<std::size_t>(threads) * (z.values + 1));
  for (int it = 1; it <= kIsIterations; ++it) {
    is_modify(keys.data(), it, z);
#pragma omp parallel num_threads(threads)
    {
      const auto t = static_cast<std::size_t>(omp_get_thread_num());
      std::int32_t* mine = hist.data() + t * (z.values + 1);
      std::fill(mine, mine + z.values + 1, 0);
#pragma omp for schedule(static)
      for (std::int64_t i = 0; i < static_cast<std::int64_t>(z.keys); ++i)
        ++mine[static_cast<std::size_t>(keys[static_cast<std::size_t>(i)])];
    }
    std::int32_t run = 0;
    for (std::size_t v = 0; v < z.values; ++v) {
      prefix[v] = run;
      for (int t = 0; t < threads; ++t) run += hist[static_cast<std::size_t>(t) * (z.values + 1) + v];
    }
  }
  return is_output(prefix.data(), keys.data(), z);
}

Output is_crc(crc::Runtime& rt, Version v, Scale s) {
  const IsSize z = is_size(s);
  const auto workers = static_cast<std::size_t>(rt.workers());
  // One histogram row per worker, each starting on a page (optimized: one writer per page).
  const std::size_t row =
      (z.values + 1 + rt.page_size() / 4 - 1) / (rt.page_size() / 4) * (rt.page_size() / 4);
  auto* keys = rt.alloc<std::int32_t>(z.keys);
  auto* hist = rt.alloc<std::int32_t>(workers * row);
  auto* prefix = rt.alloc<std::int32_t>(z.values);
  auto* totals = rt.alloc<std::int32_t>(workers);  // per worker: the keys in its share of the values
  if (rt.is_home()) {
    const std::vector<std::int32_t> k = is_keys(z);
    std::copy(k.begin(), k.end(), keys);
  }
  const std::size_t granule = rt.page_size() / sizeof(std::int32_t);
  rt.run([&] {
    const bool opt = v == Version::optimized;
    const auto w = static_cast<std::size_t>(crc::worker_id());
    const std::pair<std::size_t, std::size_t> klo_khi = crc::share(z.keys);
    const std::size_t klo = klo_khi.first, khi = klo_khi.second;
    const std::pair<std::size_t, std::size_t> vlo_vhi =
        opt ? crc::share(z.values, granule) : crc::share(z.values);
    const std::size_t vlo = vlo_vhi.first, vhi = vlo_vhi.second;
    std::vector<std::int32_t> count(z.values + 1);
    for (int it = 1; it <= kIsIterations; ++it) {
      if (w == 0) {
        crc::write(&keys[it], it);
        crc::write(&keys[it + kIsIterations], static_cast<std::int32_t>(z.values) - it);
      }
      crc::barrier();
      std::fill(count.begin(), count.end(), 0);
      if (opt) {
        each_local_read(keys, klo, khi, [&](const std::int32_t* p, std::size_t, std::size_t m) {
          for (std::size_t i = 0; i < m; ++i) ++count[static_cast<std::size_t>(p[i])];
        });
        std::int32_t* out = hist + w * row;
        for (std::size_t x = 0; x < z.values + 1;) {
          const crc::Local<std::int32_t> d = crc::overwrite_local(&out[x]);
          const std::size_t m = std::min(d.count, z.values + 1 - x);
          std::copy_n(count.data() + x, m, d.data);
          x += m;
        }
      } else {
        for (std::size_t i = klo; i < khi; ++i) ++count[static_cast<std::size_t>(crc::read(&keys[i]))];
        for (std::size_t x = 0; x < z.values + 1; ++x) crc::write(&hist[w * row + x], count[x]);
      }
      crc::barrier();
      // This worker's share of the values: the keys below its first value (every row before it),
      // then the prefix counts over its share.
      std::int32_t below = 0, run = 0;
      const auto get = [&](const std::int32_t* p) { return opt ? crc::read_only(p) : crc::read(p); };
      std::vector<std::int32_t> column(vhi - vlo, 0);
      for (std::size_t t = 0; t < workers; ++t)
        for (std::size_t x = 0; x < z.values; ++x) {
          if (x < vlo) {
            below += get(&hist[t * row + x]);
          } else if (x < vhi) {
            column[x - vlo] += get(&hist[t * row + x]);
          } else {
            break;
          }
        }
      run = below;
      for (std::size_t x = vlo; x < vhi; ++x) {
        if (opt)
          crc::write_single(&prefix[x], run);
        else
          crc::write(&prefix[x], run);
        run += column[x - vlo];
      }
      crc::write(&totals[w], run - below);
      crc::barrier();
    }
  });
  Output out = rt.is_home() ? is_output(prefix, keys, z) : Output{};
  rt.free(keys);
  rt.free(hist);
  rt.free(prefix);
  rt.free(totals);
  return out;
}

// ---------------------------------------------------------------------------------------------
// CG (NAS): the smallest eigenvalue of a sparse symmetric positive definite matrix by inverse power
// iteration, each step solving with 25 conjugate-gradient iterations. The matrix is NAS's (makea:
// a sum of n scaled outer products of random sparse vectors, plus rcond - shift on the diagonal), so
// classes S and W reproduce NAS's verification values; the test size is a smaller matrix made the
// same way. One generator for every version.
struct CgSize {
  std::size_t n;
  int outer;
  int nonzer;    // random nonzeros per generating vector
  double shift;  // the eigenvalue shift
};
CgSize cg_size(Scale s) {
  return by_scale(s, CgSize{300, 3, 7, 10.0}, CgSize{1400, 15, 7, 10.0}, CgSize{7000, 15, 8, 12.0});
}
constexpr int kCgInner = 25;
constexpr double kCgRcond = 0.1;

struct Csr {
  std::vector<std::int32_t> rowstr, colidx;
  std::vector<double> a;
};

// NAS's sprnvc + vecset: `nonzer` distinct random positions with random values, then position
// `diagonal` set to 0.5 (added when it was not among them).
void cg_sparse_vector(double& tran, std::size_t n, std::size_t nn1, int nonzer, std::size_t diagonal,
                      std::vector<double>& v, std::vector<std::size_t>& iv) {
  v.clear();
  iv.clear();
  while (v.size() < static_cast<std::size_t>(nonzer)) {
    const double value = randlc(tran, kA);
    const auto i = static_cast<std::size_t>(static_cast<double>(nn1) * randlc(tran, kA));
    if (i >= n || std::find(iv.begin(), iv.end(), i) != iv.end()) continue;
    v.push_back(value);
    iv.push_back(i);
  }
  const auto at = std::find(iv.begin(), iv.end(), diagonal);
  if (at != iv.end()) {
    v[static_cast<std::size_t>(at - iv.begin())] = 0.5;
  } else {
    v.push_back(0.5);
    iv.push_back(diagonal);
  }
}

// NAS's makea and sparse: row j of A sums, for each generating vector i (scaled by rcond^(i/n)),
// v_i[j] v_i[k] at column k, in NAS's order, so the sums round as NAS's do.
Csr cg_matrix(const CgSize& z) {
  const std::size_t n = z.n;
  std::size_t nn1 = 1;
  while (nn1 < n) nn1 *= 2;
  double tran = 314159265.0;
  (void)randlc(tran, kA);  // NAS draws one number (its zeta's initial value) before makea
  std::vector<std::map<std::int32_t, double>> rows(n);
  const double ratio = std::pow(kCgRcond, 1.0 / static_cast<double>(n));
  double size = 1.0;
  std::vector<double> v;
  std::vector<std::size_t> iv;
  for (std::size_t i = 0; i < n; ++i) {
    cg_sparse_vector(tran, n, nn1, z.nonzer, i, v, iv);
    for (std::size_t a = 0; a < v.size(); ++a) {
      const std::size_t j = iv[a];
      const double scale = size * v[a];
      for (std::size_t b = 0; b < v.size(); ++b) {
        double va = v[b] * scale;
        if (iv[b] == j && j == i) va = va + kCgRcond - z.shift;
        rows[j][static_cast<std::int32_t>(iv[b])] += va;
      }
    }
    size *= ratio;
  }
  Csr m;
  m.rowstr.push_back(0);
  for (const auto& row : rows) {
    for (const auto& [k, value] : row) {
      m.colidx.push_back(k);
      m.a.push_back(value);
    }
    m.rowstr.push_back(static_cast<std::int32_t>(m.colidx.size()));
  }
  return m;
}

// The algorithm over abstract storage: `mv` (q = A p over rows [lo, hi)), `dot` (a reduction over
// every worker) and `sync` (a barrier), so the serial, OpenMP and CRC versions share it.
Output cg_output(double zeta, double rnorm) { return {{zeta, rnorm}}; }

Output cg_reference(Scale s) {
  const CgSize z = cg_size(s);
  const Csr m = cg_matrix(z);
  std::vector<double> x(z.n, 1.0), zz(z.n), p(z.n), q(z.n), r(z.n);
  const auto mv = [&](const std::vector<double>& in, std::vector<double>& out) {
    for (std::size_t i = 0; i < z.n; ++i) {
      double sum = 0;
      for (auto k = m.rowstr[i]; k < m.rowstr[i + 1]; ++k)
        sum += m.a[static_cast<std::size_t>(k)] *
               in[static_cast<std::size_t>(m.colidx[static_cast<std::size_t>(k)])];
      out[i] = sum;
    }
  };
  const auto dot = [&](const std::vector<double>& a, const std::vector<double>& b) {
    double sum = 0;
    for (std::size_t i = 0; i < z.n; ++i) sum += a[i] * b[i];
    return sum;
  };
  double zeta = 0, rnorm = 0;
  for (int outer = 0; outer < z.outer; ++outer) {
    std::fill(zz.begin(), zz.end(), 0.0);
    r = x;
    p = r;
    double rho = dot(r, r);
    for (int it = 0; it < kCgInner; ++it) {
      mv(p, q);
      const double alpha = rho / dot(p, q);
      for (std::size_t i = 0; i < z.n; ++i) {
        zz[i] += alpha * p[i];
        r[i] -= alpha * q[i];
      }
      const double rho0 = rho;
      rho = dot(r, r);
      for (std::size_t i = 0; i < z.n; ++i) p[i] = r[i] + rho / rho0 * p[i];
    }
    mv(zz, r);
    double d = 0;
    for (std::size_t i = 0; i < z.n; ++i) d += (x[i] - r[i]) * (x[i] - r[i]);
    rnorm = std::sqrt(d);
    zeta = z.shift + 1.0 / dot(x, zz);
    const double norm = 1.0 / std::sqrt(dot(zz, zz));
    for (std::size_t i = 0; i < z.n; ++i) x[i] = norm * zz[i];
  }
  return cg_output(zeta, rnorm);
}

Output cg_openmp(int threads, Scale s) {
  const CgSize z = cg_size(s);
  const Csr m = cg_matrix(z);
  const auto n = static_cast<std::int64_t>(z.n);
  std::vector<double> x(z.n, 1.0), zz(z.n), p(z.n), q(z.n), r(z.n);
  const auto mv = [&](const std::vector<double>& in, std::vector<double>& out) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t si = 0; si < n; ++si) {
      const auto i = static_cast<std::size_t>(si);
      double sum = 0;
      for (auto k = m.rowstr[i]; k < m.rowstr[i + 1]; ++k)
        sum += m.a[static_cast<std::size_t>(k)] *
               in[static_cast<std::size_t>(m.colidx[static_cast<std::size_t>(k)])];
      out[i] = sum;
    }
  };
  const auto dot = [&](const std::vector<double>& a, const std::vector<double>& b) {
    double sum = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : sum)
    for (std::int64_t i = 0; i < n; ++i)
      sum += a[static_cast<std::size_t>(i)] * b[static_cast<std::size_t>(i)];
    return sum;
  };
  double zeta = 0, rnorm = 0;
  for (int outer = 0; outer < z.outer; ++outer) {
    std::fill(zz.begin(), zz.end(), 0.0);
    r = x;
    p = r;
    double rho = dot(r, r);
    for (int it = 0; it < kCgInner; ++it) {
      mv(p, q);
      const double alpha = rho / dot(p, q);
#pragma omp parallel for num_threads(threads) schedule(static)
      for (std::int64_t i = 0; i < n; ++i) {
        zz[static_cast<std::size_t>(i)] += alpha * p[static_cast<std::size_t>(i)];
        r[static_cast<std::size_t>(i)] -= alpha * q[static_cast<std::size_t>(i)];
      }
      const double rho0 = rho;
      rho = dot(r, r);
#pragma omp parallel for num_threads(threads) schedule(static)
      for (std::int64_t i = 0; i < n; ++i)
        p[static_cast<std::size_t>(i)] =
            r[static_cast<std::size_t>(i)] + rho / rho0 * p[static_cast<std::size_t>(i)];
    }
    mv(zz, r);
    double d = 0;
    for (std::size_t i = 0; i < z.n; ++i) d += (x[i] - r[i]) * (x[i] - r[i]);
    rnorm = std::sqrt(d);
    zeta = z.shift + 1.0 / dot(x, zz);
    const double norm = 1.0 / std::sqrt(dot(zz, zz));
    for (std::size_t i = 0; i < z.n; ++i) x[i] = norm * zz[i];
  }
  return cg_output(zeta, rnorm);
}

Output cg_crc(crc::Runtime& rt, Version v, Scale s) {
  const CgSize z = cg_size(s);
  const Csr host = cg_matrix(z);
  const auto workers = static_cast<std::size_t>(rt.workers());
  auto* rowstr = rt.alloc<std::int32_t>(z.n + 1);
  auto* colidx = rt.alloc<std::int32_t>(host.colidx.size());
  auto* a = rt.alloc<double>(host.a.size());
  double* vec[5];  // x, z, p, q, r
  for (double*& p : vec) p = rt.alloc<double>(z.n);
  auto* partial = rt.alloc<double>(workers);
  auto* result = rt.alloc<double>(2);  // zeta, rnorm
  if (rt.is_home()) {
    std::copy(host.rowstr.begin(), host.rowstr.end(), rowstr);
    std::copy(host.colidx.begin(), host.colidx.end(), colidx);
    std::copy(host.a.begin(), host.a.end(), a);
    std::fill(vec[0], vec[0] + z.n, 1.0);
  }
  const std::size_t page_bytes = rt.page_size();
  const std::size_t granule = page_bytes / sizeof(double);
  rt.run([&] {
    const bool opt = v == Version::optimized;
    const auto w = static_cast<std::size_t>(crc::worker_id());
    // The matrix-vector product, most of the work, in even row shares: in whole pages, 7000 rows of
    // 4 KiB pages are 14 granules, and 8 workers would wait for the six with two. The O(n) vector
    // updates in page-aligned shares (optimized: one writer per page).
    const std::pair<std::size_t, std::size_t> even = crc::share(z.n);
    const std::pair<std::size_t, std::size_t> lo_hi = opt ? crc::share(z.n, granule) : even;
    const std::size_t lo = lo_hi.first, hi = lo_hi.second;
    double *x = vec[0], *zz = vec[1], *p = vec[2], *q = vec[3], *r = vec[4];
    const auto get = [&](const double* e) { return opt ? crc::read_only(e) : crc::read(e); };
    const auto put = [&](double* e, double value) {
      if (opt)
        crc::write_single(e, value);
      else
        crc::write(e, value);
    };
    // The matrix's rows of this worker's product share, once into private memory (optimized) or
    // read each time.
    const std::size_t mlo = even.first, mhi = even.second;
    std::vector<std::int32_t> my_rowstr, my_col;
    std::vector<double> my_a;
    if (opt) {
      for (std::size_t i = mlo; i <= mhi && mhi > mlo; ++i) my_rowstr.push_back(crc::read_only(&rowstr[i]));
      for (auto k = my_rowstr.empty() ? 0 : my_rowstr.front(); !my_rowstr.empty() && k < my_rowstr.back();
           ++k) {
        my_col.push_back(crc::read_only(&colidx[k]));
        my_a.push_back(crc::read_only(&a[k]));
      }
    }
    // Sums this worker's part of a reduction over everyone's: each worker adds the partials in
    // worker order, so all get the same value.
    const auto reduce = [&](double mine) {
      crc::write(&partial[w], mine);
      crc::barrier();
      double sum = 0;
      for (std::size_t t = 0; t < workers; ++t) sum += crc::read(&partial[t]);
      crc::barrier();
      return sum;
    };
    const auto dot = [&](const double* u, const double* t) {
      double mine = 0;
      for (std::size_t i = lo; i < hi; ++i) mine += get(&u[i]) * get(&t[i]);
      return reduce(mine);
    };
    // Optimized: the whole input vector once into private memory (read-only pages, a run a page),
    // then the rows' scattered column reads on it, as md does with the positions: one copy of n
    // doubles instead of a lookup per nonzero.
    std::vector<double> local_in;
    const auto mv = [&](const double* in, double* out) {
      if (opt) {
        local_in.resize(z.n);
        each_local_read(in, 0, z.n, [&](const double* run, std::size_t first, std::size_t m) {
          std::copy_n(run, m, local_in.data() + first);
        });
      }
      for (std::size_t i = mlo; i < mhi; ++i) {
        double sum = 0;
        if (opt) {
          const auto first = my_rowstr[i - mlo] - my_rowstr[0], last = my_rowstr[i - mlo + 1] - my_rowstr[0];
          for (auto k = first; k < last; ++k)
            sum += my_a[static_cast<std::size_t>(k)] *
                   local_in[static_cast<std::size_t>(my_col[static_cast<std::size_t>(k)])];
        } else {
          for (auto k = crc::read(&rowstr[i]); k < crc::read(&rowstr[i + 1]); ++k)
            sum += crc::read(&a[k]) * crc::read(&in[crc::read(&colidx[k])]);
        }
        put_in_share(out, even, i, sum, opt, page_bytes);  // even shares split pages
      }
      crc::barrier();
    };
    for (int outer = 0; outer < z.outer; ++outer) {
      for (std::size_t i = lo; i < hi; ++i) {
        const double xi = get(&x[i]);
        put(&zz[i], 0.0);
        put(&r[i], xi);
        put(&p[i], xi);
      }
      crc::barrier();
      double rho = dot(r, r);
      for (int it = 0; it < kCgInner; ++it) {
        mv(p, q);
        const double alpha = rho / dot(p, q);
        for (std::size_t i = lo; i < hi; ++i) {
          put(&zz[i], get(&zz[i]) + alpha * get(&p[i]));
          put(&r[i], get(&r[i]) - alpha * get(&q[i]));
        }
        crc::barrier();
        const double rho0 = rho;
        rho = dot(r, r);
        for (std::size_t i = lo; i < hi; ++i) put(&p[i], get(&r[i]) + rho / rho0 * get(&p[i]));
        crc::barrier();
      }
      mv(zz, r);
      double mine = 0;
      for (std::size_t i = lo; i < hi; ++i) mine += (get(&x[i]) - get(&r[i])) * (get(&x[i]) - get(&r[i]));
      const double rnorm = std::sqrt(reduce(mine));
      const double zeta = z.shift + 1.0 / dot(x, zz);
      const double norm = 1.0 / std::sqrt(dot(zz, zz));
      for (std::size_t i = lo; i < hi; ++i) put(&x[i], norm * get(&zz[i]));
      crc::barrier();
      if (w == 0) {
        crc::write(&result[0], zeta);
        crc::write(&result[1], rnorm);
      }
    }
  });
  Output out = rt.is_home() ? cg_output(result[0], result[1]) : Output{};
  for (double* p : vec) rt.free(p);
  rt.free(rowstr);
  rt.free(colidx);
  rt.free(a);
  rt.free(partial);
  rt.free(result);
  return out;
}

// Runs an app's crc version at its page size (optimized) or the runtime's (plain).
template <Output (*Run)(crc::Runtime&, Version, Scale), std::size_t Page>
Output with_page(crc::Runtime& rt, Version v, Scale s) {
  if (v == Version::plain) return Run(rt, v, s);
  const std::size_t before = rt.page_size();
  set_optimized_page(rt, Page);
  try {
    Output out = Run(rt, v, s);
    rt.page_size(before);
    return out;
  } catch (...) {
    rt.page_size(before);
    throw;
  }
}

const CrcApp kApps[] = {
    {"stream", "copy, scale, add, triad over three shared arrays; page-aligned shares", 16384,
     with_page<stream_crc, 16384>, stream_openmp, stream_reference, 0},
    {"jacobi", "Jacobi relaxation on a shared grid; reads of the neighbours' points, a reduction per sweep",
     4096, with_page<jacobi_crc, 4096>, jacobi_openmp, jacobi_reference, 1e-9},
    {"md", "O(n^2) forces over shared positions, velocity Verlet updates of each worker's particles", 4096,
     with_page<md_crc, 4096>, md_openmp, md_reference, 1e-9},
    {"ep", "independent Gaussian pairs; tallies summed under a lock", 4096, with_page<ep_crc, 4096>,
     ep_openmp, ep_reference, 1e-9},
    {"is", "counting ranks of integer keys: per-worker histogram rows, prefix counts over every row", 4096,
     with_page<is_crc, 4096>, is_openmp, is_reference, 0},
    {"cg", "conjugate gradient on a sparse matrix: row shares of q = A p, reductions by partials", 4096,
     with_page<cg_crc, 4096>, cg_openmp, cg_reference, 1e-8},
};

}  // namespace

std::span<const CrcApp> crc_apps() { return kApps; }

// A page size the local store cannot hold a set of is refused (InvalidArgument): the next smaller
// one is tried, as is one that leaves fewer than four frames.
std::size_t set_optimized_page(crc::Runtime& rt, std::size_t page) {
  constexpr std::size_t kSmallest = 128;
  for (;; page /= 2) {
    try {
      rt.page_size(page);
      if (rt.frames() >= 4 || page <= kSmallest) return page;
    } catch (const InvalidArgument&) {
      if (page <= kSmallest) throw;
    }
  }
}

const CrcApp* find_crc_app(std::string_view name) {
  for (const CrcApp& a : kApps)
    if (a.name == name) return &a;
  return nullptr;
}

}  // namespace hdsm::apps::crc_apps
