// The mergesort over several devices (seed 003 §5.1, §5.3): N keys in one chunk per device. Each
// device sorts its chunk (merge passes), then rounds of merge-splits between pairs of devices, in the
// order of Batcher's odd-even merge network over the chunks (2 devices: 0-1; 4 devices: 0-1 and 2-3,
// then 0-2 and 1-3, then 1-2), leave the keys sorted and distributed: in every merge-split the two
// devices swap their chunks, the lower one keeps the smaller half of both and the upper one the
// larger.
#include "apps/cuda.hpp"
#include "apps/mergesort_kernel.hpp"
#include "apps/multi.hpp"
#include "apps/opencl.hpp"
#include "apps/random.hpp"

#include <hdsm/hdsm.hpp>

#include <algorithm>
#include <utility>
#include <vector>

namespace hdsm::apps {
namespace {

using namespace mergesort_kernel;

const char* const kMergesortOpencl = R"(
typedef struct { uint n, low; } SplitHalf;

uint rank_of(__global const uint* run, uint n, uint x, uint after_equal) {
  uint lo = 0, hi = n;
  while (lo < hi) {
    const uint mid = lo + (hi - lo) / 2;
    if (after_equal != 0 ? run[mid] <= x : run[mid] < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

__kernel void merge_pass(__global const uint* src, __global uint* dst, uint width, uint n) {
  const uint i = (uint)get_global_id(0);
  if (i >= n) return;
  const uint run = i / width, base = (run & ~1u) * width, x = src[i];
  if ((run & 1u) == 0)
    dst[i + rank_of(src + base + width, width, x, 0)] = x;
  else
    dst[i - width + rank_of(src + base, width, x, 1)] = x;
}

__kernel void merge_split(__global const uint* mine, __global const uint* theirs, __global uint* out, SplitHalf s) {
  const uint t = (uint)get_global_id(0);
  if (t >= 2 * s.n) return;
  const bool own = t < s.n;
  const uint i = own ? t : t - s.n, x = own ? mine[i] : theirs[i];
  const bool lower_chunk = own == (s.low != 0);
  const uint at = i + rank_of(own ? theirs : mine, s.n, x, lower_chunk ? 0u : 1u);
  if (s.low != 0 && at < s.n) out[at] = x;
  if (s.low == 0 && at >= s.n) out[at - s.n] = x;
})";

const auto& pass_kernel() {
  static const auto k = hdsm::with_opencl(
      opencl_source(kMergesortOpencl),
      per_thread("merge_pass", [](const Thread& t, const std::uint32_t* src, std::uint32_t* dst,
                                  std::uint32_t width, std::uint32_t n) {
        if (const auto i = static_cast<std::uint32_t>(t.global_x()); i < n) merge_point(src, dst, i, width);
      }));
  return k;
}

const auto& split_kernel() {
  static const auto k = hdsm::with_opencl(
      opencl_source(kMergesortOpencl),
      per_thread("merge_split", [](const Thread& t, const std::uint32_t* mine, const std::uint32_t* theirs,
                                   std::uint32_t* out, SplitHalf s) {
        if (const auto i = static_cast<std::uint32_t>(t.global_x()); i < 2 * s.n)
          split_point(mine, theirs, out, i, s);
      }));
  return k;
}

std::vector<std::uint32_t> input(std::size_t n) {
  std::vector<std::uint32_t> v(n);
  Xorshift64 random(0x5047u);
  for (std::uint32_t& k : v)
    k = static_cast<std::uint32_t>(random.next() >> 40);  // 24 bits: some keys repeat
  return v;
}

Output output_of(const std::vector<std::uint32_t>& v) { return sampled(std::span<const std::uint32_t>(v)); }

/// The rounds of Batcher's odd-even merge network over `devices` chunks (a power of two): in each
/// round, each device's partner or -1.
std::vector<std::vector<int>> merge_rounds(std::size_t devices) {
  std::vector<std::vector<int>> rounds;
  for (std::size_t p = 1; p < devices; p <<= 1)
    for (std::size_t k = p; k >= 1; k >>= 1) {
      std::vector<int> partner(devices, -1);
      for (std::size_t j = k % p; j + k < devices; j += 2 * k)
        for (std::size_t i = 0; i < std::min(k, devices - j - k); ++i)
          if ((i + j) / (2 * p) == (i + j + k) / (2 * p)) {
            partner[i + j] = static_cast<int>(i + j + k);
            partner[i + j + k] = static_cast<int>(i + j);
          }
      rounds.push_back(std::move(partner));
    }
  return rounds;
}

struct Split {
  std::uint32_t chunk;
  Split(std::size_t size, std::size_t devices) : chunk(power_of_two_chunk("mergesort", size, devices)) {}
  std::size_t bytes() const { return std::size_t{chunk} * sizeof(std::uint32_t); }
};

MultiRun run_hdsm(Runtime& rt, std::span<const unsigned> devices, std::size_t size) {
  const std::size_t n = devices.size();
  const Split split(size, n);
  const std::vector<std::uint32_t> in = input(size);
  const auto rounds = merge_rounds(n);
  std::vector<std::uint32_t*> data(n), recv(n), spare(n);
  for (std::size_t d = 0; d < n; ++d) {
    const int device = static_cast<int>(devices[d]);
    data[d] = rt.alloc<std::uint32_t>(split.chunk, device);
    recv[d] = rt.alloc<std::uint32_t>(split.chunk, device);
    spare[d] = rt.alloc<std::uint32_t>(split.chunk, device);
    rt.memcpy(data[d], in.data() + d * split.chunk, split.bytes());
  }
  std::vector<ExchangeTimer> timers(n);
  ExchangeTimer total;
  run_team(n, [&](std::size_t d, Team& team) {
    team.arrive_and_wait();
    if (d == 0) total.start();
    for (std::uint32_t width = 1; width < split.chunk; width *= 2) {
      rt.call(pass_kernel(), cover(split.chunk), hdsm::in(data[d]), hdsm::out(spare[d]), width, split.chunk);
      std::swap(data[d], spare[d]);
    }
    for (const std::vector<int>& partner : rounds) {
      const int p = partner[d];
      team.arrive_and_wait();  // the partners' data objects are final for this round
      if (p >= 0) wait_for_device(rt, data[d]);
      timers[d].start();
      if (p >= 0)
        rt.memcpy(recv[static_cast<std::size_t>(p)], data[d],
                  split.bytes());  // peer or staged: the runtime's choice
      team.arrive_and_wait();      // every chunk is at its partner
      timers[d].stop();
      if (p >= 0) {
        rt.call(split_kernel(), cover(std::uint64_t{2} * split.chunk), hdsm::in(data[d]), hdsm::in(recv[d]),
                hdsm::out(spare[d]), SplitHalf{split.chunk, d < static_cast<std::size_t>(p) ? 1u : 0u});
        std::swap(data[d], spare[d]);
      }
    }
    team.arrive_and_wait();
    if (d == 0) {
      rt.sync();
      total.stop();
    }
  });
  std::vector<std::uint32_t> out(size);
  for (std::size_t d = 0; d < n; ++d) {
    rt.memcpy(out.data() + d * split.chunk, data[d], split.bytes());
    for (std::uint32_t* p : {data[d], recv[d], spare[d]}) rt.free(p);
  }
  return multi_run(output_of(out), total, timers);
}

MultiRun run_explicit(std::span<Device* const> devices, std::size_t size) {
  const std::size_t n = devices.size();
  const Split split(size, n);
  const std::vector<std::uint32_t> in = input(size);
  const auto rounds = merge_rounds(n);
  std::vector<std::uint32_t> out(size);
  HostStagedExchange exchange(devices, split.bytes());
  std::vector<ExchangeTimer> timers(n);
  ExchangeTimer total;
  run_team(n, [&](std::size_t d, Team& team) {
    Device& device = *devices[d];
    DeviceArray a(device, split.bytes()), b(device, split.bytes()), received(device, split.bytes());
    DeviceBuffer data = a.get(), spare = b.get();
    auto queue = device.create_queue();
    queue->copy_to_device(data, 0, in.data() + d * split.chunk, split.bytes());
    queue->synchronize();
    team.arrive_and_wait();
    if (d == 0) total.start();
    for (std::uint32_t width = 1; width < split.chunk; width *= 2) {
      const KernelArg args[] = {KernelArg::buffer(data), KernelArg::buffer(spare), KernelArg::value(width),
                                KernelArg::value(split.chunk)};
      queue->launch(pass_kernel(), cover(split.chunk), args);
      std::swap(data, spare);
    }
    for (const std::vector<int>& partner : rounds) {
      const int p = partner[d];
      queue->synchronize();
      timers[d].start();
      exchange.trade(d, p, *queue, data, 0, received.get(), 0, split.bytes(), team);
      timers[d].stop();
      if (p < 0) continue;
      const KernelArg args[] = {
          KernelArg::buffer(data), KernelArg::buffer(received.get()), KernelArg::buffer(spare),
          KernelArg::value(SplitHalf{split.chunk, d < static_cast<std::size_t>(p) ? 1u : 0u})};
      queue->launch(split_kernel(), cover(std::uint64_t{2} * split.chunk), args);
      std::swap(data, spare);
    }
    queue->synchronize();
    team.arrive_and_wait();
    if (d == 0) total.stop();
    queue->copy_to_host(out.data() + d * split.chunk, data, 0, split.bytes());
    queue->synchronize();
  });
  return multi_run(output_of(out), total, timers);
}

Output run_reference(std::size_t size) {
  std::vector<std::uint32_t> keys = input(size);
  std::sort(keys.begin(), keys.end());
  return output_of(keys);
}

std::vector<std::size_t> sizes(Scale scale) {
  return by_scale<std::vector<std::size_t>>(
      scale, {std::size_t{1} << 12}, {std::size_t{1} << 16},
      {std::size_t{1} << 18, std::size_t{1} << 19, std::size_t{1} << 20});
}

}  // namespace

MultiApp mergesort_app() {
  return {
      "mergesort",
      "N keys in one chunk per device; each device sorts its chunk, then Batcher's merge network over the "
      "chunks: each merge-split swaps two devices' chunks and each keeps its half",
      sizes,
      [](std::size_t size) { return size * sizeof(std::uint32_t); },
      run_hdsm,
      run_explicit,
      run_reference,
      0};
}

}  // namespace hdsm::apps
