// What sad's kernel bodies share (see apps/host_device.hpp): pixels, SADs and the frame argument,
// the clamped read of the reference frame, and the work of the threads of the three kernels.
#pragma once

#include "apps/host_device.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace hdsm::apps::parboil::sad_kernel {

using Pixel = std::uint16_t;
using Sad = std::uint16_t;  // a 16x16 SAD of 8-bit pixels is at most 65280

struct Frame {
  std::uint32_t width, height;  // multiples of 16
  std::int32_t range;           // displacements -range..range in x and y
  HDSM_APPS_HD std::uint32_t side() const { return 2 * static_cast<std::uint32_t>(range) + 1; }
  HDSM_APPS_HD std::uint32_t positions() const { return side() * side(); }
  HDSM_APPS_HD std::uint32_t macroblocks() const { return (width / 16) * (height / 16); }
  HDSM_APPS_HD std::size_t sad4_count() const { return std::size_t{macroblocks()} * 16 * positions(); }
  HDSM_APPS_HD std::size_t sad8_count() const { return std::size_t{macroblocks()} * 4 * positions(); }
  HDSM_APPS_HD std::size_t sad16_count() const { return std::size_t{macroblocks()} * positions(); }
  HDSM_APPS_HD std::size_t pixels() const { return std::size_t{width} * height; }
};

// The reference frame is read with clamped coordinates, as Parboil reads it through a clamping texture.
HDSM_APPS_HD inline std::uint32_t clamped(std::int64_t v, std::uint32_t size) {
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(v, 0, std::int64_t{size} - 1));
}

/// sad_4x4, first phase: the threads of the block of the macroblock at (mx, my) copy it to mb (256
/// pixels of block-shared memory), the thread of linear index `rank` of `size` every size-th pixel.
HDSM_APPS_HD inline void load_macroblock(Pixel* mb, const Pixel* cur, const Frame& f, std::uint32_t mx,
                                         std::uint32_t my, std::uint32_t rank, std::uint32_t size) {
  for (std::uint32_t i = rank; i < 256; i += size) mb[i] = cur[(my + i / 16) * f.width + mx + i % 16];
}

/// sad_4x4, second phase: the thread (tx, ty) of the block of macroblock number mbi, at (mx, my),
/// computes the macroblock's sixteen 4x4 SADs at displacement (tx - range, ty - range).
HDSM_APPS_HD inline void sad4_thread(const Pixel* mb, const Pixel* ref, Sad* sad4, const Frame& f,
                                     std::uint32_t mx, std::uint32_t my, std::size_t mbi, std::uint32_t tx,
                                     std::uint32_t ty) {
  const std::int64_t dx = std::int64_t{tx} - f.range, dy = std::int64_t{ty} - f.range;
  std::uint32_t rows[16], cols[16];
  for (std::uint32_t k = 0; k < 16; ++k) {
    rows[k] = clamped(my + k + dy, f.height) * f.width;
    cols[k] = clamped(mx + k + dx, f.width);
  }
  const std::uint32_t pos = ty * f.side() + tx;
  for (std::uint32_t sub = 0; sub < 16; ++sub) {
    const std::uint32_t y0 = sub / 4 * 4, x0 = sub % 4 * 4;
    std::uint32_t sum = 0;
    for (std::uint32_t r = y0; r < y0 + 4; ++r)
      for (std::uint32_t c = x0; c < x0 + 4; ++c)
        sum += std::abs(int{mb[r * 16 + c]} - int{ref[rows[r] + cols[c]]});
    sad4[(mbi * 16 + sub) * f.positions() + pos] = static_cast<Sad>(sum);
  }
}

/// sad_8x8 at element i: 8x8 block q (2x2 in the macroblock) is 4x4 blocks (2qy + r) * 4 + 2qx + c
/// for r, c in {0, 1}.
HDSM_APPS_HD inline void sad8_element(const Sad* sad4, Sad* sad8, const Frame& f, std::uint64_t i) {
  const std::uint64_t p = f.positions();
  if (i >= f.sad8_count()) return;
  const std::uint64_t mb = i / p / 4, q = i / p % 4, pos = i % p;
  const std::uint64_t first = mb * 16 + q / 2 * 8 + q % 2 * 2;
  sad8[i] = static_cast<Sad>(sad4[first * p + pos] + sad4[(first + 1) * p + pos] +
                             sad4[(first + 4) * p + pos] + sad4[(first + 5) * p + pos]);
}

/// sad_16x16 at element i: the sum of the macroblock's four 8x8 SADs.
HDSM_APPS_HD inline void sad16_element(const Sad* sad8, Sad* sad16, const Frame& f, std::uint64_t i) {
  const std::uint64_t p = f.positions();
  if (i >= f.sad16_count()) return;
  const std::uint64_t mb = i / p, pos = i % p;
  sad16[i] = static_cast<Sad>(sad8[(mb * 4) * p + pos] + sad8[(mb * 4 + 1) * p + pos] +
                              sad8[(mb * 4 + 2) * p + pos] + sad8[(mb * 4 + 3) * p + pos]);
}

}  // namespace hdsm::apps::parboil::sad_kernel
