#include "apps/vecadd.hpp"

#include "apps/cuda.hpp"
#include "apps/opencl.hpp"

#include <hdsm/hdsm.hpp>

#include <cstdint>
#include <vector>

namespace hdsm::apps {
namespace {

float a_of(std::size_t i) { return static_cast<float>(i % 1024) * 0.5f; }
float b_of(std::size_t i) { return static_cast<float>(i % 977) + 1.0f; }

const char* const kVecaddOpencl = R"(
__kernel void vecadd(__global const float* a, __global const float* b, __global float* c, ulong n) {
  const ulong i = get_global_id(0);
  if (i < n) c[i] = a[i] + b[i];
})";

const auto& vecadd_kernel() {
  static const auto k = hdsm::with_opencl(
      opencl_source(kVecaddOpencl),
      per_thread("vecadd", [](const Thread& t, const float* a, const float* b, float* c, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) c[i] = a[i] + b[i];
      }));
  return k;
}

Output result(const float* c, std::size_t n) {
  double wrong = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (c[i] != a_of(i) + b_of(i)) ++wrong;
  Output out{{wrong}};
  for (std::size_t i = 0; i < n; i += n / 16 + 1) out.values.push_back(c[i]);
  return out;
}

}  // namespace

Output vecadd_adsm(Runtime& rt, int device, std::size_t n) {
  float* a = rt.alloc<float>(n, device);
  float* b = rt.alloc<float>(n, device);
  float* c = rt.alloc<float>(n, device);
  for (std::size_t i = 0; i < n; ++i) a[i] = a_of(i);
  for (std::size_t i = 0; i < n; ++i) b[i] = b_of(i);
  rt.call(vecadd_kernel(), cover(n), a, b, c, std::uint64_t{n});
  rt.sync();
  Output out = result(c, n);
  rt.free(a);
  rt.free(b);
  rt.free(c);
  return out;
}

Output vecadd_reference(std::size_t n) {
  std::vector<float> c(n);
  for (std::size_t i = 0; i < n; ++i) c[i] = a_of(i) + b_of(i);
  return result(c.data(), n);
}

}  // namespace hdsm::apps
