// sad: full-pixel motion estimation of an H.264 encoder (Parboil's sad, from the JM reference
// encoder). The CPU generates a current and a reference frame. The first call computes, for every
// 4x4 block of every 16x16 macroblock, the sum of absolute differences at every displacement of the
// search window; the second and third calls derive the 8x8 and 16x16 SADs from those on the device.
// The CPU reads all three SAD arrays (tens of MiB at full scale) back.
#include "apps/cuda.hpp"
#include "apps/opencl.hpp"
#include "apps/parboil/parboil.hpp"
#include "apps/parboil/sad_kernel.hpp"
#include "apps/random.hpp"

#include <hdsm/hdsm.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace hdsm::apps::parboil {
namespace {

using namespace sad_kernel;

Frame frame(Scale scale) { return by_scale<Frame>(scale, {64, 48, 3}, {512, 384, 5}, {1024, 768, 7}); }

// A textured current frame and a reference frame that is the current one moved by (3, -2) plus noise.
void generate(const Frame& f, Pixel* cur, Pixel* ref) {
  Xorshift64 rng{0x5ad'f4a3e5ULL};
  for (std::uint32_t y = 0; y < f.height; ++y)
    for (std::uint32_t x = 0; x < f.width; ++x)
      cur[y * f.width + x] =
          static_cast<Pixel>((x * 7 + y * 13 + ((x / 8) ^ (y / 8)) % 16 * 9 + rng.below(32)) % 256);
  for (std::uint32_t y = 0; y < f.height; ++y)
    for (std::uint32_t x = 0; x < f.width; ++x) {
      const std::uint32_t sx = std::clamp<std::int64_t>(std::int64_t{x} - 3, 0, f.width - 1);
      const std::uint32_t sy = std::clamp<std::int64_t>(std::int64_t{y} + 2, 0, f.height - 1);
      const int v = cur[sy * f.width + sx] + static_cast<int>(rng.below(9)) - 4;
      ref[y * f.width + x] = static_cast<Pixel>(std::clamp(v, 0, 255));
    }
}

// Frame and its counts, and the clamped read of the reference frame, for the OpenCL bodies.
const char* const kFrameOpencl = R"(
typedef struct { uint width, height; int range; } Frame;
uint side(Frame f) { return 2 * (uint)f.range + 1; }
uint positions(Frame f) { return side(f) * side(f); }
uint macroblocks(Frame f) { return (f.width / 16) * (f.height / 16); }
uint clamped(long v, uint size) { return (uint)clamp(v, (long)0, (long)size - 1); }
)";

std::string sad4_opencl() {
  return std::string(kFrameOpencl) + R"(
__kernel void sad_4x4(__global const ushort* cur, __global const ushort* ref, __global ushort* sad4, Frame f) {
  __local ushort mb[256];
  const uint mx = (uint)get_group_id(0) * 16, my = (uint)get_group_id(1) * 16;
  const uint size = (uint)(get_local_size(0) * get_local_size(1) * get_local_size(2));
  const uint rank =
      (uint)((get_local_id(2) * get_local_size(1) + get_local_id(1)) * get_local_size(0) + get_local_id(0));
  for (uint i = rank; i < 256; i += size) mb[i] = cur[(my + i / 16) * f.width + mx + i % 16];
  barrier(CLK_LOCAL_MEM_FENCE);
  const ulong mbi = (ulong)get_group_id(1) * get_num_groups(0) + get_group_id(0);
  const uint tx = (uint)get_local_id(0), ty = (uint)get_local_id(1);
  const long dx = (long)tx - f.range, dy = (long)ty - f.range;
  uint rows[16], cols[16];
  for (uint k = 0; k < 16; ++k) {
    rows[k] = clamped(my + k + dy, f.height) * f.width;
    cols[k] = clamped(mx + k + dx, f.width);
  }
  const uint pos = ty * side(f) + tx;
  for (uint sub = 0; sub < 16; ++sub) {
    const uint y0 = sub / 4 * 4, x0 = sub % 4 * 4;
    uint sum = 0;
    for (uint r = y0; r < y0 + 4; ++r)
      for (uint c = x0; c < x0 + 4; ++c) sum += abs((int)mb[r * 16 + c] - (int)ref[rows[r] + cols[c]]);
    sad4[(mbi * 16 + sub) * positions(f) + pos] = (ushort)sum;
  }
})";
}

std::string sad8_opencl() {
  return std::string(kFrameOpencl) + R"(
__kernel void sad_8x8(__global const ushort* sad4, __global ushort* sad8, Frame f) {
  const ulong i = get_global_id(0), p = positions(f);
  if (i >= (ulong)macroblocks(f) * 4 * p) return;
  const ulong mb = i / p / 4, q = i / p % 4, pos = i % p;
  const ulong first = mb * 16 + q / 2 * 8 + q % 2 * 2;
  sad8[i] = (ushort)(sad4[first * p + pos] + sad4[(first + 1) * p + pos] + sad4[(first + 4) * p + pos] +
                     sad4[(first + 5) * p + pos]);
})";
}

std::string sad16_opencl() {
  return std::string(kFrameOpencl) + R"(
__kernel void sad_16x16(__global const ushort* sad8, __global ushort* sad16, Frame f) {
  const ulong i = get_global_id(0), p = positions(f);
  if (i >= (ulong)macroblocks(f) * p) return;
  const ulong mb = i / p, pos = i % p;
  sad16[i] = (ushort)(sad8[(mb * 4) * p + pos] + sad8[(mb * 4 + 1) * p + pos] + sad8[(mb * 4 + 2) * p + pos] +
                      sad8[(mb * 4 + 3) * p + pos]);
})";
}

// One block per macroblock, one thread per displacement: the macroblock goes to shared memory, then
// every thread computes the macroblock's sixteen 4x4 SADs at its displacement. The CUDA bodies of
// the three kernels are apps/cuda/sad.cu.
const auto& sad4_kernel() {
  static const auto k = hdsm::with_opencl(
      opencl_source(sad4_opencl()),
      per_block("sad_4x4", [](Block& b, const Pixel* cur, const Pixel* ref, Sad* sad4, Frame f) {
        Pixel* mb = b.shared<Pixel>(256);
        const std::uint32_t mx = b.index().x * 16, my = b.index().y * 16;
        b.threads([&](const Thread& t) { load_macroblock(mb, cur, f, mx, my, t.rank(), b.size()); });
        const std::size_t mbi = std::size_t{b.index().y} * b.grid_dim().x + b.index().x;
        b.threads([&](const Thread& t) { sad4_thread(mb, ref, sad4, f, mx, my, mbi, t.idx.x, t.idx.y); });
      }));
  return k;
}

const auto& sad8_kernel() {
  static const auto k =
      hdsm::with_opencl(opencl_source(sad8_opencl()),
                        per_thread("sad_8x8", [](const Thread& t, const Sad* sad4, Sad* sad8, Frame f) {
                          sad8_element(sad4, sad8, f, t.global_x());
                        }));
  return k;
}

const auto& sad16_kernel() {
  static const auto k =
      hdsm::with_opencl(opencl_source(sad16_opencl()),
                        per_thread("sad_16x16", [](const Thread& t, const Sad* sad8, Sad* sad16, Frame f) {
                          sad16_element(sad8, sad16, f, t.global_x());
                        }));
  return k;
}

Launch sad4_launch(const Frame& f) {
  return {Dim3{f.width / 16, f.height / 16}, Dim3{f.side(), f.side()}, 0};
}

// Every value is read: a plain and a position-weighted sum, then a deterministic sample of ~4096.
void summarize(const Sad* v, std::size_t n, Output& out) {
  std::uint64_t sum = 0, weighted = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sum += v[i];
    weighted += std::uint64_t{v[i]} * (i % 251 + 1);
  }
  out.values.push_back(static_cast<double>(sum));
  out.values.push_back(static_cast<double>(weighted));
  const std::size_t stride = std::max<std::size_t>(1, n / 4096);
  for (std::size_t i = 0; i < n; i += stride) out.values.push_back(v[i]);
}

Output read_sads(const Frame& f, const Sad* sad4, const Sad* sad8, const Sad* sad16) {
  Output out;
  summarize(sad4, f.sad4_count(), out);
  summarize(sad8, f.sad8_count(), out);
  summarize(sad16, f.sad16_count(), out);
  return out;
}

Output run_reference(Scale scale) {
  const Frame f = frame(scale);
  std::vector<Pixel> cur(f.pixels()), ref(f.pixels());
  generate(f, cur.data(), ref.data());
  std::vector<Sad> sad4(f.sad4_count()), sad8(f.sad8_count()), sad16(f.sad16_count());
  const std::uint32_t p = f.positions(), mbw = f.width / 16;
  for (std::uint32_t mb = 0; mb < f.macroblocks(); ++mb)
    for (std::uint32_t sub = 0; sub < 16; ++sub)
      for (std::int32_t dy = -f.range; dy <= f.range; ++dy)
        for (std::int32_t dx = -f.range; dx <= f.range; ++dx) {
          const std::uint32_t x0 = mb % mbw * 16 + sub % 4 * 4, y0 = mb / mbw * 16 + sub / 4 * 4;
          int sum = 0;
          for (std::uint32_t y = y0; y < y0 + 4; ++y)
            for (std::uint32_t x = x0; x < x0 + 4; ++x)
              sum += std::abs(cur[y * f.width + x] - ref[clamped(std::int64_t{y} + dy, f.height) * f.width +
                                                         clamped(std::int64_t{x} + dx, f.width)]);
          const auto pos =
              static_cast<std::uint32_t>((dy + f.range) * static_cast<std::int32_t>(f.side()) + dx + f.range);
          sad4[(std::size_t{mb} * 16 + sub) * p + pos] = static_cast<Sad>(sum);
        }
  for (std::size_t mb = 0; mb < f.macroblocks(); ++mb)
    for (std::uint32_t sub = 0; sub < 16; ++sub)
      for (std::uint32_t pos = 0; pos < p; ++pos) {
        const std::size_t q = sub / 8 * 2 + sub % 4 / 2;  // the 8x8 block holding this 4x4 block
        sad8[(mb * 4 + q) * p + pos] += sad4[(mb * 16 + sub) * p + pos];
        sad16[mb * p + pos] += sad4[(mb * 16 + sub) * p + pos];
      }
  return read_sads(f, sad4.data(), sad8.data(), sad16.data());
}

Output run_adsm(Runtime& rt, int device, Scale scale) {
  const Frame f = frame(scale);
  Pixel* cur = rt.alloc<Pixel>(f.pixels(), device);
  Pixel* ref = rt.alloc<Pixel>(f.pixels(), device);
  Sad* sad4 = rt.alloc<Sad>(f.sad4_count(), device);
  Sad* sad8 = rt.alloc<Sad>(f.sad8_count(), device);
  Sad* sad16 = rt.alloc<Sad>(f.sad16_count(), device);
  generate(f, cur, ref);
  rt.call(sad4_kernel(), sad4_launch(f), cur, ref, sad4, f);
  rt.call(sad8_kernel(), cover(f.sad8_count()), sad4, sad8, f);
  rt.call(sad16_kernel(), cover(f.sad16_count()), sad8, sad16, f);
  rt.sync();
  Output out = read_sads(f, sad4, sad8, sad16);
  for (std::uint16_t* p : {cur, ref, sad4, sad8, sad16}) rt.free(p);
  return out;
}

Output run_explicit(Device& d, Scale scale) {
  const Frame f = frame(scale);
  std::vector<Pixel> cur(f.pixels()), ref(f.pixels());
  generate(f, cur.data(), ref.data());
  const std::size_t frame_bytes = f.pixels() * sizeof(Pixel);
  const DeviceBuffer cur_d = d.alloc(frame_bytes), ref_d = d.alloc(frame_bytes);
  const DeviceBuffer sad4_d = d.alloc(f.sad4_count() * sizeof(Sad)),
                     sad8_d = d.alloc(f.sad8_count() * sizeof(Sad)),
                     sad16_d = d.alloc(f.sad16_count() * sizeof(Sad));
  auto queue = d.create_queue();
  queue->copy_to_device(cur_d, 0, cur.data(), frame_bytes);
  queue->copy_to_device(ref_d, 0, ref.data(), frame_bytes);
  const KernelArg args4[] = {KernelArg::buffer(cur_d), KernelArg::buffer(ref_d), KernelArg::buffer(sad4_d),
                             KernelArg::value(f)};
  queue->launch(sad4_kernel(), sad4_launch(f), args4);
  const KernelArg args8[] = {KernelArg::buffer(sad4_d), KernelArg::buffer(sad8_d), KernelArg::value(f)};
  queue->launch(sad8_kernel(), cover(f.sad8_count()), args8);
  const KernelArg args16[] = {KernelArg::buffer(sad8_d), KernelArg::buffer(sad16_d), KernelArg::value(f)};
  queue->launch(sad16_kernel(), cover(f.sad16_count()), args16);
  std::vector<Sad> sad4(f.sad4_count()), sad8(f.sad8_count()), sad16(f.sad16_count());
  queue->copy_to_host(sad4.data(), sad4_d, 0, sad4.size() * sizeof(Sad));
  queue->copy_to_host(sad8.data(), sad8_d, 0, sad8.size() * sizeof(Sad));
  queue->copy_to_host(sad16.data(), sad16_d, 0, sad16.size() * sizeof(Sad));
  queue->synchronize();
  for (DeviceBuffer b : {cur_d, ref_d, sad4_d, sad8_d, sad16_d}) d.free(b);
  return read_sads(f, sad4.data(), sad8.data(), sad16.data());
}

}  // namespace

App sad() {
  return {"sad",
          "CPU writes two frames into shared objects; three back-to-back calls compute 4x4 SADs over the "
          "search window and derive 8x8 and 16x16 SADs on the device; CPU reads all SADs",
          run_adsm,
          run_explicit,
          run_reference,
          0};
}

}  // namespace hdsm::apps::parboil
