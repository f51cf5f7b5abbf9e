#include "apps/iterate.hpp"

#include "apps/cuda.hpp"
#include "apps/opencl.hpp"

#include <hdsm/hdsm.hpp>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace hdsm::apps {
namespace {

const char* const kRelaxOpencl = R"(
__kernel void relax(__global const float* x, __global float* y, ulong n) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  const ulong left = i == 0 ? 0 : i - 1;
  const ulong right = i + 1 == n ? i : i + 1;
  y[i] = 0.25f * x[left] + 0.5f * x[i] + 0.25f * x[right];
})";

void relax_at(const float* x, float* y, std::uint64_t n, std::uint64_t i) {
  const std::uint64_t left = i == 0 ? 0 : i - 1;
  const std::uint64_t right = i + 1 == n ? i : i + 1;
  y[i] = 0.25f * x[left] + 0.5f * x[i] + 0.25f * x[right];
}

const auto& relax_kernel() {
  static const auto k =
      hdsm::with_opencl(opencl_source(kRelaxOpencl),
                        per_thread("relax", [](const Thread& t, const float* x, float* y, std::uint64_t n) {
                          if (const auto i = t.global_x(); i < n) relax_at(x, y, n, i);
                        }));
  return k;
}

float initial(std::size_t i) { return static_cast<float>(i % 1000) / 1000.0f; }

// The element the CPU reads for probe k after sweep `step`: spread over the vector, moving a little
// from step to step so that no read is served from what the last one fetched.
std::size_t probe_index(const IterateProblem& p, unsigned step, unsigned k) {
  const std::size_t stride = std::max<std::size_t>(1, p.n / p.probes);
  return std::min(p.n - 1, k * stride + std::size_t{step} * 97 % stride);
}

// The elements the output ends with: 16 spread over the final vector.
constexpr unsigned kSamples = 16;
std::size_t sample_index(const IterateProblem& p, unsigned k) { return k * (p.n / kSamples); }

}  // namespace

IterateProblem iterate_problem(Scale scale) {
  return {by_scale<std::size_t>(scale, 50'000, std::size_t{1} << 20, std::size_t{4} << 20), 50, 16};
}

Output iterate_adsm(Runtime& rt, int device, const IterateProblem& p) {
  float* x = rt.alloc<float>(p.n, device);
  float* y = rt.alloc<float>(p.n, device);
  for (std::size_t i = 0; i < p.n; ++i) x[i] = initial(i);
  Output out;
  for (unsigned step = 0; step < p.steps; ++step) {
    rt.call(relax_kernel(), cover(p.n), x, y, std::uint64_t{p.n});
    rt.sync();
    double sum = 0;
    for (unsigned k = 0; k < p.probes; ++k) sum += y[probe_index(p, step, k)];
    if (p.probes != 0) out.values.push_back(sum);
    std::swap(x, y);
  }
  for (unsigned k = 0; k < kSamples; ++k) out.values.push_back(x[sample_index(p, k)]);
  rt.free(x);
  rt.free(y);
  return out;
}

Output iterate_explicit(Device& d, const IterateProblem& p) {
  const std::size_t bytes = p.n * sizeof(float);
  std::vector<float> host(p.n);
  for (std::size_t i = 0; i < p.n; ++i) host[i] = initial(i);
  DeviceBuffer x = d.alloc(bytes), y = d.alloc(bytes);
  auto queue = d.create_queue();
  queue->copy_to_device(x, 0, host.data(), bytes);
  std::vector<float> probe(p.probes);
  Output out;
  for (unsigned step = 0; step < p.steps; ++step) {
    const KernelArg args[] = {KernelArg::buffer(x), KernelArg::buffer(y),
                              KernelArg::value(std::uint64_t{p.n})};
    queue->launch(relax_kernel(), cover(p.n), args);
    for (unsigned k = 0; k < p.probes; ++k)
      queue->copy_to_host(&probe[k], y, probe_index(p, step, k) * sizeof(float), sizeof(float));
    queue->synchronize();
    double sum = 0;
    for (const float v : probe) sum += v;
    if (p.probes != 0) out.values.push_back(sum);
    std::swap(x, y);
  }
  std::vector<float> samples(kSamples);
  for (unsigned k = 0; k < kSamples; ++k)
    queue->copy_to_host(&samples[k], x, sample_index(p, k) * sizeof(float), sizeof(float));
  queue->synchronize();
  out.values.insert(out.values.end(), samples.begin(), samples.end());
  d.free(x);
  d.free(y);
  return out;
}

Output iterate_reference(const IterateProblem& p) {
  std::vector<float> x(p.n), y(p.n);
  for (std::size_t i = 0; i < p.n; ++i) x[i] = initial(i);
  Output out;
  for (unsigned step = 0; step < p.steps; ++step) {
    for (std::uint64_t i = 0; i < p.n; ++i) relax_at(x.data(), y.data(), p.n, i);
    double sum = 0;
    for (unsigned k = 0; k < p.probes; ++k) sum += y[probe_index(p, step, k)];
    if (p.probes != 0) out.values.push_back(sum);
    std::swap(x, y);
  }
  for (unsigned k = 0; k < kSamples; ++k) out.values.push_back(x[sample_index(p, k)]);
  return out;
}

App iterate_app() {
  return {
      "iterate",
      "x on the CPU; 50 x (call relax, sync, CPU reads 16 scattered elements)",
      [](Runtime& rt, int device, Scale scale) { return iterate_adsm(rt, device, iterate_problem(scale)); },
      [](Device& device, Scale scale) { return iterate_explicit(device, iterate_problem(scale)); },
      [](Scale scale) { return iterate_reference(iterate_problem(scale)); },
      kIterateTolerance};
}

}  // namespace hdsm::apps
