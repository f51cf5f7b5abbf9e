// scan (NVIDIA CUDA SDK, seed 004 Table 2): exclusive prefix sums of 25600 integers, `iterations`
// times, coarsened as the seed's §4.2 describes: one launch scans the whole array (a block scans a
// segment of 512 elements, each thread a run of it), not 512 elements per launch. Each iteration is
// three launches: segment scans with their totals, the scan of the totals (one block), and the
// totals added back to their segments.
#include "apps/grid.hpp"
#include "apps/random.hpp"

#include <cstdint>
#include <vector>

namespace hdsm::apps::grid {
namespace {

struct Shape {
  std::uint32_t n, iterations;
};

Shape shape(Scale scale) { return by_scale<Shape>(scale, {25600, 4}, {25600, 100}, {25600, 1000}); }

constexpr std::uint32_t kSegment = 512;  // elements a block scans
constexpr std::uint32_t kThreads = 64;   // threads a block: each scans kSegment / kThreads elements
constexpr std::uint32_t kRun = kSegment / kThreads;

// Block b scans in[b * kSegment ...) into out (exclusive) and writes the segment's total.
const auto& segment_kernel() {
  static const auto k = per_block("scan_segments", [](Block& b, const std::uint32_t* in, std::uint32_t* out,
                                                      std::uint32_t* totals, std::uint32_t n) {
    std::uint32_t* run_sums = b.shared<std::uint32_t>(kThreads);
    const std::uint64_t base = std::uint64_t{b.index().x} * kSegment;
    b.threads([&](const Thread& t) {  // each thread scans its run
      std::uint32_t sum = 0;
      for (std::uint32_t j = 0; j < kRun; ++j)
        if (const std::uint64_t i = base + std::uint64_t{t.idx.x} * kRun + j; i < n) {
          out[i] = sum;
          sum += in[i];
        }
      run_sums[t.idx.x] = sum;
    });
    b.threads([&](const Thread& t) {  // thread 0 scans the runs' sums
      if (t.idx.x != 0) return;
      std::uint32_t sum = 0;
      for (std::uint32_t r = 0; r < kThreads; ++r) {
        const std::uint32_t v = run_sums[r];
        run_sums[r] = sum;
        sum += v;
      }
      totals[b.index().x] = sum;
    });
    b.threads([&](const Thread& t) {  // each run gets the sums before it
      for (std::uint32_t j = 0; j < kRun; ++j)
        if (const std::uint64_t i = base + std::uint64_t{t.idx.x} * kRun + j; i < n)
          out[i] += run_sums[t.idx.x];
    });
  });
  return k;
}

// One block: exclusive scan of the segments' totals, in place.
const auto& totals_kernel() {
  static const auto k =
      per_thread("scan_totals", [](const Thread& t, std::uint32_t* totals, std::uint32_t count) {
        if (t.idx.x != 0) return;
        std::uint32_t sum = 0;
        for (std::uint32_t i = 0; i < count; ++i) {
          const std::uint32_t v = totals[i];
          totals[i] = sum;
          sum += v;
        }
      });
  return k;
}

const auto& add_kernel() {
  static const auto k = per_thread("scan_add_totals", [](const Thread& t, std::uint32_t* out,
                                                         const std::uint32_t* totals, std::uint32_t n) {
    if (const std::uint64_t i = t.global_x(); i < n) out[i] += totals[i / kSegment];
  });
  return k;
}

std::vector<std::uint32_t> input(std::uint32_t n) {
  std::vector<std::uint32_t> in(n);
  Xorshift64 rng{0x5CA9};
  for (auto& v : in) v = static_cast<std::uint32_t>(rng.next() % 1000);
  return in;
}

}  // namespace

Output scan(GridTarget& g, Scale scale) {
  const Shape sh = shape(scale);
  const std::vector<std::uint32_t> host_in = input(sh.n);
  const std::uint32_t segments = (sh.n + kSegment - 1) / kSegment;
  std::uint32_t* in = g.alloc<std::uint32_t>(sh.n);
  std::uint32_t* out = g.alloc<std::uint32_t>(sh.n);
  std::uint32_t* totals = g.alloc<std::uint32_t>(segments);
  g.to_global(in, host_in.data(), sh.n * sizeof(std::uint32_t));
  for (std::uint32_t it = 0; it < sh.iterations; ++it) {
    g.call(segment_kernel(), Launch{Dim3{segments}, Dim3{kThreads}, 0}, in, out, totals, sh.n);
    g.call(totals_kernel(), Launch{Dim3{1}, Dim3{1}, 0}, totals, segments);
    g.call(add_kernel(), cover(sh.n, 256), out, totals, sh.n);
  }
  std::vector<std::uint32_t> result(sh.n);
  g.from_global(result.data(), out, sh.n * sizeof(std::uint32_t));
  for (std::uint32_t* p : {in, out, totals}) g.free(p);
  return Output{std::vector<double>(result.begin(), result.end())};
}

Output scan_reference(Scale scale) {
  const Shape sh = shape(scale);
  const std::vector<std::uint32_t> in = input(sh.n);
  Output out{std::vector<double>(sh.n)};
  std::uint32_t sum = 0;
  for (std::uint32_t i = 0; i < sh.n; ++i) {
    out.values[i] = sum;
    sum += in[i];
  }
  return out;
}

}  // namespace hdsm::apps::grid
