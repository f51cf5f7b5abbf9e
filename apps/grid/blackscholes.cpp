// blackscholes (NVIDIA CUDA SDK, seed 004 Table 2): call and put prices of European options by the
// Black-Scholes formula. Five arrays of one float an option in global memory (price, strike, years
// as inputs, call and put as outputs) and `iterations` launches that recompute the outputs: the
// shape of the seed's benchmark (options x iterations), whose modified pages are the 40 % of global
// memory the outputs take, many enough for the lazy update. Iteration i prices at a risk-free rate of
// 2 % + 0.1 % i (a rate curve), so every launch changes every output: rewriting equal values would
// cost nothing on the wire, as the boundaries send changed bytes only.
#include "apps/grid.hpp"
#include "apps/random.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

namespace hdsm::apps::grid {
namespace {

struct Shape {
  std::uint32_t options, iterations;
};

Shape shape(Scale scale) {
  return by_scale<Shape>(scale, {16384, 2}, {1280 * 1024, 4}, {4 * 1024 * 1024, 10});
}

constexpr float kVolatility = 0.30f;

float risk_free(std::uint32_t iteration) { return 0.02f + 0.001f * static_cast<float>(iteration); }

// The SDK's polynomial approximation of the cumulative normal distribution.
inline float cnd(float d) {
  constexpr float a1 = 0.31938153f, a2 = -0.356563782f, a3 = 1.781477937f, a4 = -1.821255978f,
                  a5 = 1.330274429f;
  constexpr float rsqrt2pi = 0.39894228040143267793994605993438f;
  const float k = 1.0f / (1.0f + 0.2316419f * std::fabs(d));
  float c = rsqrt2pi * std::exp(-0.5f * d * d) * (k * (a1 + k * (a2 + k * (a3 + k * (a4 + k * a5)))));
  if (d > 0) c = 1.0f - c;
  return c;
}

inline void price(float s, float x, float t, float r, float& call, float& put) {
  const float sqrt_t = std::sqrt(t);
  const float d1 = (std::log(s / x) + (r + 0.5f * kVolatility * kVolatility) * t) / (kVolatility * sqrt_t);
  const float d2 = d1 - kVolatility * sqrt_t;
  const float cnd1 = cnd(d1), cnd2 = cnd(d2);
  const float discount = std::exp(-r * t);
  call = s * cnd1 - x * discount * cnd2;
  put = x * discount * (1.0f - cnd2) - s * (1.0f - cnd1);
}

const auto& kernel() {
  static const auto k =
      per_thread("blackscholes", [](const Thread& t, float* call, float* put, const float* s, const float* x,
                                    const float* years, float r, std::uint32_t n) {
        if (const std::uint64_t i = t.global_x(); i < n) price(s[i], x[i], years[i], r, call[i], put[i]);
      });
  return k;
}

struct Inputs {
  std::vector<float> s, x, t;
  explicit Inputs(std::uint32_t n) : s(n), x(n), t(n) {
    fill(s.data(), n, 0xB5, 5.0f, 30.0f);
    fill(x.data(), n, 0xB6, 1.0f, 100.0f);
    fill(t.data(), n, 0xB7, 0.25f, 10.0f);
  }
};

Output output(const std::vector<float>& call, const std::vector<float>& put) {
  Output out;
  out.values.assign(call.begin(), call.end());
  out.values.insert(out.values.end(), put.begin(), put.end());
  return out;
}

}  // namespace

Output blackscholes(GridTarget& g, Scale scale) {
  const Shape sh = shape(scale);
  const Inputs in(sh.options);
  const std::size_t bytes = sh.options * sizeof(float);
  float *s = g.alloc<float>(sh.options), *x = g.alloc<float>(sh.options), *t = g.alloc<float>(sh.options);
  float *call = g.alloc<float>(sh.options), *put = g.alloc<float>(sh.options);
  g.to_global(s, in.s.data(), bytes);
  g.to_global(x, in.x.data(), bytes);
  g.to_global(t, in.t.data(), bytes);
  for (std::uint32_t i = 0; i < sh.iterations; ++i)
    g.call(kernel(), cover(sh.options, 128), call, put, s, x, t, risk_free(i), sh.options);
  std::vector<float> call_h(sh.options), put_h(sh.options);
  g.from_global(call_h.data(), call, bytes);
  g.from_global(put_h.data(), put, bytes);
  for (float* p : {s, x, t, call, put}) g.free(p);
  return output(call_h, put_h);
}

Output blackscholes_reference(Scale scale) {
  const Shape sh = shape(scale);
  const Inputs in(sh.options);
  std::vector<float> call(sh.options), put(sh.options);
  const float r = risk_free(sh.iterations - 1);
  for (std::uint32_t i = 0; i < sh.options; ++i) price(in.s[i], in.x[i], in.t[i], r, call[i], put[i]);
  return output(call, put);
}

}  // namespace hdsm::apps::grid
