// The radix-2 Cooley-Tukey FFT over several devices (seed 003 §5.1): N complex values, a chunk of
// N / D on each device, decimation in frequency from the natural order to the bit-reversed one. The
// stages of half-width h >= N / D pair chunks of different devices, a different pair at every stage
// (device d and d ^ (h D / N)): each device sends its whole chunk to its partner and computes its
// half of the butterflies from its chunk and the partner's. The stages below are local.
#include "apps/cuda.hpp"
#include "apps/fft_kernel.hpp"
#include "apps/multi.hpp"
#include "apps/opencl.hpp"
#include "apps/random.hpp"

#include <hdsm/hdsm.hpp>

#include <algorithm>
#include <vector>

namespace hdsm::apps {
namespace {

using namespace fft_kernel;

constexpr double kFftTolerance = 1e-3;  // twiddles from the device's cos and sin (OpenCL)

std::string fft_opencl() {
  return cl_define("MINUS_PI", kMinusPi) + R"(
typedef struct { float re, im; } Complex;
typedef struct { uint h, offset, upper; } CrossStage;

Complex upper_of(Complex a, Complex b) { Complex r = {a.re + b.re, a.im + b.im}; return r; }
Complex lower_of(Complex a, Complex b, uint j, uint h) {
  const Complex d = {a.re - b.re, a.im - b.im};
  const float angle = MINUS_PI * (float)j / (float)h;
  const Complex w = {cos(angle), sin(angle)};
  Complex r = {d.re * w.re - d.im * w.im, d.re * w.im + d.im * w.re};
  return r;
}

__kernel void fft_stage(__global Complex* a, uint h, uint butterflies) {
  const uint k = (uint)get_global_id(0);
  if (k >= butterflies) return;
  const uint j = k & (h - 1), i = ((k - j) << 1) + j;
  const Complex x = a[i], y = a[i + h];
  a[i] = upper_of(x, y);
  a[i + h] = lower_of(x, y, j, h);
}

__kernel void fft_cross(__global Complex* mine, __global const Complex* theirs, CrossStage c, uint n) {
  const uint t = (uint)get_global_id(0);
  if (t >= n) return;
  const uint j = (c.offset + t) & (c.h - 1);
  mine[t] = c.upper != 0 ? upper_of(mine[t], theirs[t]) : lower_of(theirs[t], mine[t], j, c.h);
})";
}

const auto& stage_kernel() {
  static const auto k = hdsm::with_opencl(
      opencl_source(fft_opencl()),
      per_thread("fft_stage", [](const Thread& t, Complex* a, std::uint32_t h, std::uint32_t butterflies) {
        if (const auto k = static_cast<std::uint32_t>(t.global_x()); k < butterflies) butterfly(a, k, h);
      }));
  return k;
}

const auto& cross_kernel() {
  static const auto k = hdsm::with_opencl(
      opencl_source(fft_opencl()),
      per_thread("fft_cross",
                 [](const Thread& t, Complex* mine, const Complex* theirs, CrossStage c, std::uint32_t n) {
                   if (const auto i = static_cast<std::uint32_t>(t.global_x()); i < n)
                     cross_point(mine, theirs, i, c);
                 }));
  return k;
}

std::vector<Complex> input(std::size_t n) {
  std::vector<Complex> v(n);
  Xorshift64 random(0xff7u);
  for (Complex& c : v) c = {random.uniform(-1.0f, 1.0f), random.uniform(-1.0f, 1.0f)};
  return v;
}

Output output_of(const std::vector<Complex>& v) {
  std::vector<float> flat(v.size() * 2);
  for (std::size_t i = 0; i < v.size(); ++i) {
    flat[2 * i] = v[i].re;
    flat[2 * i + 1] = v[i].im;
  }
  return sampled(std::span<const float>(flat));
}

/// The split of N values over D devices.
struct Split {
  std::uint32_t n, chunk;
  Split(std::size_t size, std::size_t devices)
      : n(static_cast<std::uint32_t>(size)), chunk(power_of_two_chunk("fft", size, devices)) {}
  std::size_t bytes() const { return std::size_t{chunk} * sizeof(Complex); }
  /// The cross-device stage of half-width h for device d, and its partner.
  CrossStage cross(std::size_t d, std::uint32_t h) const {
    return {h, static_cast<std::uint32_t>(d) * chunk, (d & (h / chunk)) == 0 ? 1u : 0u};
  }
  std::size_t partner(std::size_t d, std::uint32_t h) const { return d ^ (h / chunk); }
};

MultiRun run_hdsm(Runtime& rt, std::span<const unsigned> devices, std::size_t size) {
  const Split split(size, devices.size());
  const std::vector<Complex> in = input(size);
  const std::size_t n = devices.size();
  std::vector<Complex*> data(n), recv(n);
  for (std::size_t d = 0; d < n; ++d) {
    data[d] = rt.alloc<Complex>(split.chunk, static_cast<int>(devices[d]));
    recv[d] = rt.alloc<Complex>(split.chunk, static_cast<int>(devices[d]));
    rt.memcpy(data[d], in.data() + d * split.chunk, split.bytes());
  }
  std::vector<ExchangeTimer> timers(n);
  ExchangeTimer total;
  run_team(n, [&](std::size_t d, Team& team) {
    team.arrive_and_wait();
    if (d == 0) total.start();
    for (std::uint32_t h = split.n / 2; h >= split.chunk; h /= 2) {
      wait_for_device(rt, data[d]);
      timers[d].start();
      rt.memcpy(recv[split.partner(d, h)], data[d], split.bytes());  // peer or staged: the runtime's choice
      team.arrive_and_wait();                                        // every chunk is at its partner
      timers[d].stop();
      rt.call(cross_kernel(), cover(split.chunk), hdsm::inout(data[d]), hdsm::in(recv[d]), split.cross(d, h),
              split.chunk);
      team.arrive_and_wait();  // every kernel reading a recv object is issued before it is refilled
    }
    for (std::uint32_t h = split.chunk / 2; h >= 1; h /= 2)
      rt.call(stage_kernel(), cover(split.chunk / 2), hdsm::inout(data[d]), h, split.chunk / 2);
    team.arrive_and_wait();
    if (d == 0) {
      rt.sync();
      total.stop();
    }
  });
  std::vector<Complex> out(size);
  for (std::size_t d = 0; d < n; ++d) {
    rt.memcpy(out.data() + d * split.chunk, data[d], split.bytes());
    rt.free(data[d]);
    rt.free(recv[d]);
  }
  return multi_run(output_of(out), total, timers);
}

MultiRun run_explicit(std::span<Device* const> devices, std::size_t size) {
  const std::size_t n = devices.size();
  const Split split(size, n);
  const std::vector<Complex> in = input(size);
  std::vector<Complex> out(size);
  HostStagedExchange exchange(devices, split.bytes());
  std::vector<ExchangeTimer> timers(n);
  ExchangeTimer total;
  run_team(n, [&](std::size_t d, Team& team) {
    Device& device = *devices[d];
    DeviceArray data(device, split.bytes()), recv(device, split.bytes());
    auto queue = device.create_queue();
    queue->copy_to_device(data.get(), 0, in.data() + d * split.chunk, split.bytes());
    queue->synchronize();
    team.arrive_and_wait();
    if (d == 0) total.start();
    for (std::uint32_t h = split.n / 2; h >= split.chunk; h /= 2) {
      queue->synchronize();
      timers[d].start();
      exchange.trade(d, static_cast<int>(split.partner(d, h)), *queue, data.get(), 0, recv.get(), 0,
                     split.bytes(), team);
      timers[d].stop();
      const KernelArg args[] = {KernelArg::buffer(data.get()), KernelArg::buffer(recv.get()),
                                KernelArg::value(split.cross(d, h)), KernelArg::value(split.chunk)};
      queue->launch(cross_kernel(), cover(split.chunk), args);
    }
    for (std::uint32_t h = split.chunk / 2; h >= 1; h /= 2) {
      const KernelArg args[] = {KernelArg::buffer(data.get()), KernelArg::value(h),
                                KernelArg::value(split.chunk / 2)};
      queue->launch(stage_kernel(), cover(split.chunk / 2), args);
    }
    queue->synchronize();
    team.arrive_and_wait();
    if (d == 0) total.stop();
    queue->copy_to_host(out.data() + d * split.chunk, data.get(), 0, split.bytes());
    queue->synchronize();
  });
  return multi_run(output_of(out), total, timers);
}

Output run_reference(std::size_t size) {
  std::vector<Complex> a = input(size);
  const auto n = static_cast<std::uint32_t>(size);
  for (std::uint32_t h = n / 2; h >= 1; h /= 2)
    for (std::uint32_t k = 0; k < n / 2; ++k) butterfly(a.data(), k, h);
  return output_of(a);
}

std::vector<std::size_t> sizes(Scale scale) {
  return by_scale<std::vector<std::size_t>>(
      scale, {std::size_t{1} << 12}, {std::size_t{1} << 15},
      {std::size_t{1} << 16, std::size_t{1} << 18, std::size_t{1} << 20});
}

}  // namespace

MultiApp fft_app() {
  return {
      "fft",
      "N complex values in one chunk per device; every stage of half-width >= the chunk swaps whole chunks "
      "between a different pair of devices, the rest are local",
      sizes,
      [](std::size_t size) { return size * sizeof(Complex); },
      run_hdsm,
      run_explicit,
      run_reference,
      kFftTolerance};
}

}  // namespace hdsm::apps
