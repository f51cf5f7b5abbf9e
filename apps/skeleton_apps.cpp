#include "apps/skeleton_apps.hpp"

#include <hdsm/hdsm.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

namespace hdsm::apps {
namespace {

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
  Vector<int> image(im.width * im.height, ContainerOptions{&rt});
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
Images images(Runtime& rt, std::size_t n) {
  Images im{Vector<float>(n, ContainerOptions{&rt}), Vector<float>(n, ContainerOptions{&rt})};
  for (std::size_t i = 0; i < n; ++i) {
    im.a(i) = image_a(i);
    im.b(i) = image_b(i);
  }
  return im;
}

Output mse(Runtime& rt, const Where& where, Scale scale) {
  const std::size_t n = pixels(scale);
  Images im = images(rt, n);
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
  Images im = images(rt, n);
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

}  // namespace

std::span<const SkeletonApp> skeleton_apps() {
  static const std::array<SkeletonApp, 3> apps{{
      {"mandelbrot", "MapIndex: each pixel's escape count from its position", mandelbrot,
       mandelbrot_reference, 0},
      // Float sums in chunks on the devices against a double loop: a few units in the 6th digit.
      {"mse", "MapReduce(squared difference, +) over two images", mse, mse_reference, 1e-4},
      {"ppmcc", "five MapReduce calls (sums, dot product, squares) over the same two images", ppmcc,
       ppmcc_reference, 1e-3},
  }};
  return apps;
}

}  // namespace hdsm::apps
