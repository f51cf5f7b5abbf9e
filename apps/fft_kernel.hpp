// What the FFT's kernel bodies share (see apps/host_device.hpp): the complex type, the twiddle
// factor and the radix-2 decimation-in-frequency butterfly, whose halves the reference computes with
// the same functions, so every version rounds alike.
#pragma once

#include "apps/host_device.hpp"

#include <cmath>
#include <cstdint>

namespace hdsm::apps::fft_kernel {

struct Complex {
  float re, im;
};

constexpr float kMinusPi = -3.14159265358979323846f;

/// exp(-2 pi i j / (2 h)): the twiddle of element j of a butterfly group of 2h elements.
HDSM_APPS_HD inline Complex twiddle(std::uint32_t j, std::uint32_t h) {
  const float angle = kMinusPi * static_cast<float>(j) / static_cast<float>(h);
  return {std::cos(angle), std::sin(angle)};
}

/// The upper output of a butterfly over (a, b): a + b.
HDSM_APPS_HD inline Complex upper(Complex a, Complex b) { return {a.re + b.re, a.im + b.im}; }

/// The lower output of a butterfly over (a, b) at element j of its group of 2h: (a - b) * w.
HDSM_APPS_HD inline Complex lower(Complex a, Complex b, std::uint32_t j, std::uint32_t h) {
  const Complex d{a.re - b.re, a.im - b.im};
  const Complex w = twiddle(j, h);
  return {d.re * w.re - d.im * w.im, d.re * w.im + d.im * w.re};
}

/// Butterfly `k` of a stage of half-width h (h a power of two) over one array: elements i and i + h,
/// i = (k / h) * 2h + k % h.
HDSM_APPS_HD inline void butterfly(Complex* a, std::uint32_t k, std::uint32_t h) {
  const std::uint32_t j = k & (h - 1), i = ((k - j) << 1) + j;
  const Complex x = a[i], y = a[i + h];
  a[i] = upper(x, y);
  a[i + h] = lower(x, y, j, h);
}

/// Which half of a stage whose butterflies pair two devices' chunks this device computes.
struct CrossStage {
  std::uint32_t h;       // the stage's half-width (a multiple of the chunk)
  std::uint32_t offset;  // global index of the chunk's first element
  std::uint32_t upper;   // 1: this chunk holds the upper elements (i), 0: the lower ones (i + h)
};

/// Element t of a chunk in a cross-device stage, from its own value and the partner chunk's value at
/// the same position (the other element of its butterfly), in place.
HDSM_APPS_HD inline void cross_point(Complex* mine, const Complex* theirs, std::uint32_t t,
                                     const CrossStage& c) {
  const std::uint32_t j = (c.offset + t) & (c.h - 1);
  mine[t] = c.upper != 0 ? upper(mine[t], theirs[t]) : lower(theirs[t], mine[t], j, c.h);
}

}  // namespace hdsm::apps::fft_kernel
