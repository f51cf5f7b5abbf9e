// Every skeleton called from a translation unit that nvcc compiles (see nvcc_skeletons.hpp): the host
// code of the skeleton layer through nvcc's front end, and a CUDA body for each kernel.
#include "skeletons/cuda/nvcc_skeletons.hpp"

#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace {

HDSM_USER_TYPE(nv_point, float x; float y; int tag;)

HDSM_USER_FUNCTION(nv_saxpy, float, (float x, float y, float a), { return a * x + y; })
HDSM_USER_FUNCTION(nv_divmod, void, (long* q, long* r, long a, long b), {
  *q = a / b;
  *r = a % b;
})
HDSM_USER_FUNCTION(nv_ramp, long, (unsigned long i, long k), { return (long)i * k; })
HDSM_USER_FUNCTION(nv_nearest, nv_point, (HDSM_GLOBAL const nv_point* all, nv_point p, unsigned long n), {
  nv_point best = all[0];
  float d = 1e30f;
  for (unsigned long j = 0; j < n; ++j) {
    const float dx = all[j].x - p.x;
    const float dy = all[j].y - p.y;
    const float e = sqrt(dx * dx + dy * dy);
    if (all[j].tag != p.tag && e < d) {
      d = e;
      best = all[j];
    }
  }
  return best;
})
HDSM_USER_FUNCTION(nv_shift, nv_point, (unsigned long i, HDSM_GLOBAL const nv_point* all, unsigned long n),
                   { return all[(i + 1) % n]; })
HDSM_USER_FUNCTION(nv_add, long, (long a, long b), { return a + b; })
HDSM_USER_FUNCTION(nv_max, long, (long a, long b), { return a > b ? a : b; })
HDSM_USER_FUNCTION(nv_square, long, (long a), { return a * a; })
HDSM_USER_FUNCTION(nv_blur, long, (const long* w, long k), { return w[-1] + k * w[0] + w[1]; })
HDSM_USER_FUNCTION(nv_cross, long, (const long* w, long stride),
                   { return w[-stride] + w[stride] - w[-1] - w[1]; })

template <class T>
std::vector<T> values(hdsm::Vector<T>& v) {
  return std::vector<T>(v.data(), v.data() + v.size());
}

}  // namespace

namespace hdsm::test {

NvccSkeletonsResult run_skeletons_built_by_nvcc(Runtime& rt, const std::vector<unsigned>& devices) {
  NvccSkeletonsResult result;
  const auto check = [&](bool ok, const std::string& what) {
    if (!ok) result.wrong.push_back(what);
  };
  const auto uses = [&](const Kernel& k) {
    ++result.kernels;
    if (k.cuda_lookup != nullptr) ++result.kernels_with_cuda;
  };
  const ContainerOptions o{&rt, false, {}};
  constexpr std::size_t n = 1000;
  Vector<float> x(n, o), y(n, o), out(n, o);
  Vector<long> a(n, o), b(n, o), q(n, o), r(n, o), ramp(n, o), blurred(n, o), scanned(n, o);
  Vector<nv_point> points(n, o), nearest(n, o), shifted(n, o);
  Matrix<long> m(20, 50, o);
  Vector<long> by_row(20, o), by_col(50, o);
  Matrix<long> blurred_cols(20, 50, o), crossed(20, 50, o);
  for (std::size_t i = 0; i < n; ++i) {
    x(i) = static_cast<float>(i) * 0.5f;
    y(i) = 3.0f;
    a(i) = static_cast<long>(i) * 7 - 300;
    b(i) = static_cast<long>(i % 9) + 1;
    points(i) = nv_point{static_cast<float>(i % 37), static_cast<float>(i % 23), static_cast<int>(i % 4)};
    m(i / 50, i % 50) = static_cast<long>(i % 97);
  }

  Map<nv_saxpy> saxpy;
  saxpy.devices(devices)(out, x, y, 2.0f);
  uses(detail::MapKernel<nv_saxpy, false, std::tuple<float>, float, float>::get<float>());
  Map<nv_divmod> divmod;
  divmod.devices(devices)(q, r, a, b);
  uses(detail::MapKernel<nv_divmod, false, std::tuple<long, long>, long, long>::get<>());
  MapIndex<nv_ramp> index;
  index.devices(devices)(ramp, 3L);
  uses(detail::MapKernel<nv_ramp, true, std::tuple<long>>::get<long>());
  MapArray<nv_nearest> near;
  near.devices(devices)(nearest, points, points, std::uint64_t{n});
  uses(detail::MapArrayKernel<nv_nearest, false, nv_point, nv_point, nv_point>::get<std::uint64_t>());
  MapArrayIndex<nv_shift> shift;
  shift.devices(devices)(shifted, points, std::uint64_t{n});
  uses(detail::MapArrayKernel<nv_shift, true, nv_point, nv_point>::get<std::uint64_t>());
  Reduce<nv_add> sum;
  const long total = sum.devices(devices)(a);
  uses(detail::ReduceKernel<nv_add, long>::get());
  // Ranges: the middle half of a, and a Map into the first half of a vector from the second of q.
  const long middle = sum(a.range(n / 4, n / 2));
  Vector<long> halves(n, -1L, o), rest(n, o);
  divmod(halves.range(0, n / 2), rest.range(n / 2, n / 2), a.range(n / 2, n / 2), b.range(n / 2, n / 2));
  Reduce<nv_max> most;
  most.devices(devices).rows(by_row, m);
  most.devices(devices).cols(by_col, m);
  uses(detail::Reduce2DKernel<nv_max, long>::get(true));
  uses(detail::Reduce2DKernel<nv_max, long>::get(false));
  MapReduce<nv_square, nv_add> squares;
  const long sum_of_squares = squares.devices(devices)(a);
  uses(detail::MapReduceKernel<nv_square, nv_add, long, long>::get<>());
  MapOverlap<nv_blur> blur;
  blur.devices(devices).overlap(1).edge(Edge::duplicate)(blurred, a, 2L);
  uses(detail::MapOverlapKernel<nv_blur, long>::get<long>());
  blur.cols(blurred_cols, m, 2L);
  uses(detail::MapOverlapMatrixKernel<nv_blur, long, false>::get<long>());
  MapOverlap2D<nv_cross> cross;
  cross.devices(devices).overlap(1, 1).edge(Edge::cyclic)(crossed, m);
  uses(detail::MapOverlapMatrixKernel<nv_cross, long, true>::get<>());
  Scan<nv_add> scan;
  scan.devices(devices)(scanned, a);
  uses(detail::ScanKernels<nv_add, long>::local());
  uses(detail::ScanKernels<nv_add, long>::apply());

  long want_total = 0, want_squares = 0, running = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const long ai = a[i], bi = b[i];
    check(out[i] == 2.0f * x[i] + 3.0f, "Map saxpy at " + std::to_string(i));
    check(q[i] == ai / bi && r[i] == ai % bi, "Map divmod at " + std::to_string(i));
    check(ramp[i] == static_cast<long>(i) * 3, "MapIndex at " + std::to_string(i));
    const nv_point p = points[i], want_near = nv_nearest::call(points.data(), p, n), got_near = nearest[i];
    check(got_near.x == want_near.x && got_near.y == want_near.y && got_near.tag == want_near.tag,
          "MapArray at " + std::to_string(i));
    const nv_point got_shift = shifted[i], want_shift = points[(i + 1) % n];
    check(got_shift.x == want_shift.x && got_shift.tag == want_shift.tag,
          "MapArrayIndex at " + std::to_string(i));
    const long left = a[i == 0 ? 0 : i - 1], right = a[i + 1 == n ? n - 1 : i + 1];
    check(blurred[i] == left + 2 * ai + right, "MapOverlap at " + std::to_string(i));
    running += ai;
    check(scanned[i] == running, "Scan at " + std::to_string(i));
    want_total += ai;
    want_squares += ai * ai;
  }
  check(total == want_total, "Reduce");
  long want_middle = 0;
  for (std::size_t i = n / 4; i < n / 4 + n / 2; ++i) want_middle += a[i];
  check(middle == want_middle, "Reduce of a range");
  for (std::size_t i = 0; i < n; ++i) {
    const long want = i < n / 2 ? a[n / 2 + i] / b[n / 2 + i] : -1;
    check(halves[i] == want, "Map on ranges at " + std::to_string(i));
  }
  check(sum_of_squares == want_squares, "MapReduce");
  for (std::size_t i = 0; i < 20; ++i) {
    long best = m(i, 0);
    for (std::size_t j = 1; j < 50; ++j) best = best > m(i, j) ? best : m(i, j);
    check(by_row[i] == best, "Reduce rows at " + std::to_string(i));
  }
  for (std::size_t j = 0; j < 50; ++j) {
    long best = m(0, j);
    for (std::size_t i = 1; i < 20; ++i) best = best > m(i, j) ? best : m(i, j);
    check(by_col[j] == best, "Reduce cols at " + std::to_string(j));
  }
  for (std::size_t i = 0; i < 20; ++i)
    for (std::size_t j = 0; j < 50; ++j) {
      const long up = m(i == 0 ? 0 : i - 1, j), down = m(i + 1 == 20 ? 19 : i + 1, j);
      check(blurred_cols.at(i, j) == up + 2 * m(i, j) + down, "MapOverlap cols at " + std::to_string(i));
      const long n_ = m((i + 19) % 20, j), s_ = m((i + 1) % 20, j), w_ = m(i, (j + 49) % 50),
                 e_ = m(i, (j + 1) % 50);
      check(crossed.at(i, j) == n_ + s_ - w_ - e_, "MapOverlap2D at " + std::to_string(i));
    }
  return result;
}

}  // namespace hdsm::test
