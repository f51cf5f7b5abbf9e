// Costs of the smart containers with nothing to move: checked element reads and writes (v[i], one
// compare of the cached validity) against std::vector's operator[] and against unchecked v(i); the
// bookkeeping of a device access whose copy is already valid; and building the copy plan of a device
// read when the container has 8 device copies. Targets: checked <= 2 ns per access, unchecked within
// 1.05x of std::vector, device-access bookkeeping <= 1 us, plan with 8 copies <= 1 us. Also Map on the
// host's workers against an OpenMP loop (target 1.1x), Reduce and Scan against OpenMP's (1.3x), a
// skeleton call's own cost per operand (1 us), and seed 001's MSE through the containers against
// hand-written explicit copies (< 1 % more).
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "coherence/copy_set.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

namespace {

constexpr std::size_t kN = 4096;

hdsm::Runtime& runtime() {
  static hdsm::Runtime rt(hdsm::Config::from_environment());
  return rt;
}

/// Keeps `sum` alive without taking its address inside the loop (which would keep it in memory).
[[gnu::noinline]] void sink(float sum) { benchmark::DoNotOptimize(sum); }

/// Seconds per element access (shown as e.g. 1.2n).
void per_access(benchmark::State& state) {
  state.counters["per_access"] = benchmark::Counter(
      static_cast<double>(kN), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void StdVectorRead(benchmark::State& state) {
  std::vector<float> v(kN, 1.0f);
  for (auto _ : state) {
    float sum = 0;
    for (std::size_t i = 0; i < kN; ++i) {
      benchmark::DoNotOptimize(v.data());
      sum += v[i];
    }
    sink(sum);
  }
  per_access(state);
}

// Reads copied to a plain array: no loop-carried dependency.
void StdVectorReadCopy(benchmark::State& state) {
  std::vector<float> v(kN, 1.0f);
  std::vector<float> out(kN);
  for (auto _ : state) {
    for (std::size_t i = 0; i < kN; ++i) {
      benchmark::DoNotOptimize(v.data());
      out[i] = v[i];
    }
    benchmark::ClobberMemory();
  }
  per_access(state);
}

void CheckedReadCopy(benchmark::State& state) {
  hdsm::Vector<float> v(kN, 1.0f, hdsm::ContainerOptions{&runtime()});
  std::vector<float> out(kN);
  for (auto _ : state) {
    for (std::size_t i = 0; i < kN; ++i) {
      benchmark::DoNotOptimize(&v);
      out[i] = v[i];
    }
    benchmark::ClobberMemory();
  }
  per_access(state);
}

// Reads summed: the slow path's call (never taken here) makes the compiler keep a float accumulator
// in memory across it, so each add waits for the previous store: the cost a float reduction over v[i]
// pays. Use host_range() or v(i) in such loops.
void CheckedRead(benchmark::State& state) {
  hdsm::Vector<float> v(kN, 1.0f, hdsm::ContainerOptions{&runtime()});
  for (auto _ : state) {
    float sum = 0;
    for (std::size_t i = 0; i < kN; ++i) {
      benchmark::DoNotOptimize(&v);
      sum += v[i];
    }
    sink(sum);
  }
  per_access(state);
}

void UncheckedRead(benchmark::State& state) {
  hdsm::Vector<float> v(kN, 1.0f, hdsm::ContainerOptions{&runtime()});
  v.update_host();
  for (auto _ : state) {
    float sum = 0;
    for (std::size_t i = 0; i < kN; ++i) {
      benchmark::DoNotOptimize(&v);
      sum += v(i);
    }
    sink(sum);
  }
  per_access(state);
}

void StdVectorWrite(benchmark::State& state) {
  std::vector<float> v(kN, 1.0f);
  for (auto _ : state) {
    for (std::size_t i = 0; i < kN; ++i) {
      benchmark::DoNotOptimize(v.data());
      v[i] = static_cast<float>(i);
    }
    benchmark::ClobberMemory();
  }
  per_access(state);
}

void CheckedWrite(benchmark::State& state) {
  hdsm::Vector<float> v(kN, 1.0f, hdsm::ContainerOptions{&runtime()});
  for (auto _ : state) {
    for (std::size_t i = 0; i < kN; ++i) {
      benchmark::DoNotOptimize(&v);
      v[i] = static_cast<float>(i);
    }
    benchmark::ClobberMemory();
  }
  per_access(state);
}

void UncheckedWrite(benchmark::State& state) {
  hdsm::Vector<float> v(kN, 1.0f, hdsm::ContainerOptions{&runtime()});
  for (auto _ : state) {
    for (std::size_t i = 0; i < kN; ++i) {
      benchmark::DoNotOptimize(&v);
      v(i) = static_cast<float>(i);
    }
    benchmark::ClobberMemory();
  }
  per_access(state);
}

// begin and end of a device access whose copy is valid: lookup, plan (empty), LRU stamp, pin.
void DeviceAccessBookkeeping(benchmark::State& state) {
  hdsm::Vector<float> v(kN, 1.0f, hdsm::ContainerOptions{&runtime()});
  v.device_view(0, 0, kN, hdsm::Access::read).done(hdsm::Event{});
  for (auto _ : state) {
    hdsm::DeviceView view = v.device_view(0, 0, kN, hdsm::Access::read);
    benchmark::DoNotOptimize(view.buffer());
    view.done(hdsm::Event{});  // nothing was enqueued
  }
}

// The plan of a device read of [0, 80) on device 0 from 8 valid copies of 10 elements each, spread
// over 4 devices, the main copy stale (a device wrote all of it first).
void PlanWith8Copies(benchmark::State& state) {
  using namespace hdsm::coherence;
  CopySet set(hdsm::Mechanism::improved, 80, 80);
  std::vector<std::uint8_t> peer(16, 1);
  set.set_peers(4, peer);
  const CopyId all = set.add(3, Extent::range(0, 80));
  set.device_access(all, hdsm::Access::write, 1);
  for (unsigned c = 0; c < 8; ++c)
    set.device_access(set.add(c % 4, Extent::range(std::size_t{c} * 10, 10)), hdsm::Access::read, 2);
  std::size_t copies = 0;
  for (auto _ : state) {
    const CopyId dst = set.add(0, Extent::range(0, 80));
    const RangePlan plan = set.device_access(dst, hdsm::Access::read, 3);
    copies = plan.copies.size();
    benchmark::DoNotOptimize(plan.copies.data());
    set.remove(dst);
  }
  state.counters["plan_copies"] = static_cast<double>(copies);
}

// The plan of a device write of 64 elements on device 0, which also holds a copy of the whole
// container and state.range(0) idle copies of 64 elements before the range (what a loop of range calls
// leaves until memory runs short). Flat in the count: the scans visit the copies that can overlap
// (before, the whole copy made them visit every copy before the range: 70 us against 0.17 at 10000).
void PlanAmongIdleCopies(benchmark::State& state) {
  using namespace hdsm::coherence;
  const auto idle = static_cast<std::size_t>(state.range(0));
  const std::size_t n = (idle + 2) * 64;
  CopySet set(hdsm::Mechanism::improved, n, n);
  set.set_peers(1, std::vector<std::uint8_t>(1, 1));
  set.device_access(set.add(0, Extent::range(0, n)), hdsm::Access::read, 1);
  for (std::size_t c = 0; c < idle; ++c)
    set.device_access(set.add(0, Extent::range(c * 64, 64)), hdsm::Access::read, 2);
  for (auto _ : state) {
    const CopyId dst = set.add(0, Extent::range(n - 64, 64));
    const RangePlan plan = set.device_access(dst, hdsm::Access::write, 3);
    benchmark::DoNotOptimize(plan.copies.data());
    set.host_access({n - 64, n}, hdsm::Access::read);  // written back, so it can go
    set.remove(dst);
  }
}

HDSM_USER_FUNCTION(bench_saxpy, float, (float x, float y, float a), { return a * x + y; })

constexpr std::size_t kMapN = std::size_t{1} << 22;

// Map on the host's workers against the same loop with OpenMP on the same cores (target: 1.1x).
void MapHost(benchmark::State& state) {
  const hdsm::ContainerOptions o{&runtime()};
  hdsm::Vector<float> x(kMapN, 1.0f, o), y(kMapN, 2.0f, o), out(kMapN, o);
  hdsm::Map<bench_saxpy> map;
  map.backend(hdsm::SkeletonBackend::host);
  for (auto _ : state) {
    map(out, x, y, 3.0f);
    benchmark::DoNotOptimize(out(0));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kMapN * 3 * sizeof(float)));
}

void OpenMpLoop(benchmark::State& state) {
  std::vector<float> x(kMapN, 1.0f), y(kMapN, 2.0f), out(kMapN);
  for (auto _ : state) {
    const long n = static_cast<long>(kMapN);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) out[i] = bench_saxpy::call(x[i], y[i], 3.0f);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kMapN * 3 * sizeof(float)));
}

HDSM_USER_FUNCTION(bench_add, long, (long a, long b), { return a + b; })

// Reduce on the host's workers against an OpenMP reduction on the same cores (target: 1.3x).
void ReduceHost(benchmark::State& state) {
  hdsm::Vector<long> v(kMapN, 1L, hdsm::ContainerOptions{&runtime()});
  hdsm::Reduce<bench_add> sum;
  sum.backend(hdsm::SkeletonBackend::host);
  for (auto _ : state) benchmark::DoNotOptimize(sum(v));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kMapN * sizeof(long)));
}

void OpenMpReduce(benchmark::State& state) {
  std::vector<long> v(kMapN, 1L);
  for (auto _ : state) {
    long total = 0;
    const long n = static_cast<long>(kMapN);
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (long i = 0; i < n; ++i) total = bench_add::call(total, v[i]);
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kMapN * sizeof(long)));
}

// Inclusive Scan on the host's workers against OpenMP's inclusive scan (`reduction(inscan, +)` with
// `#pragma omp scan`) on the same cores (target: 1.3x).
void ScanHost(benchmark::State& state) {
  const hdsm::ContainerOptions o{&runtime()};
  hdsm::Vector<long> v(kMapN, 1L, o), out(kMapN, o);
  hdsm::Scan<bench_add> scan;
  scan.backend(hdsm::SkeletonBackend::host);
  for (auto _ : state) {
    scan(out, v);
    benchmark::DoNotOptimize(out(kMapN - 1));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kMapN * 2 * sizeof(long)));
}

void OpenMpScan(benchmark::State& state) {
  std::vector<long> v(kMapN, 1L), out(kMapN);
  for (auto _ : state) {
    long acc = 0;
    const long n = static_cast<long>(kMapN);
#pragma omp parallel for reduction(inscan, + : acc)
    for (long i = 0; i < n; ++i) {
      acc = bench_add::call(acc, v[i]);
#pragma omp scan inclusive(acc)
      out[i] = acc;
    }
    benchmark::DoNotOptimize(out.data());
  }
  if (out.back() != static_cast<long>(kMapN)) state.SkipWithError("the OpenMP scan is wrong");
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kMapN * 2 * sizeof(long)));
}

HDSM_USER_FUNCTION(bench_squared_difference, float, (float a, float b), {
  const float d = a - b;
  return d * d;
})
HDSM_USER_FUNCTION(bench_addf, float, (float a, float b), { return a + b; })

// What a skeleton call costs besides its kernel's work: Map on one device over 1-element vectors
// whose copies are valid (checks, placement, the containers' bookkeeping of 3 operands, the launch),
// a wait every 64 calls. Target: <= 1 us per call and operand.
void SkeletonCallBookkeeping(benchmark::State& state) {
  const hdsm::ContainerOptions o{&runtime()};
  hdsm::Vector<float> x(1, 1.0f, o), y(1, 2.0f, o), out(1, o);
  hdsm::Map<bench_saxpy> map;
  map.devices({0});
  map(out, x, y, 3.0f);
  out.wait();
  std::int64_t calls = 0;
  for (auto _ : state) {
    map(out, x, y, 3.0f);
    if (++calls % 64 == 0) out.wait();
  }
  out.wait();
  state.counters["per_call_operand"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 3, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

HDSM_USER_FUNCTION(bench_jacobi, float, (const float* w, long stride),
                   { return 0.25f * (w[-stride] + w[stride] + w[-1] + w[1]); })

constexpr std::size_t kGrid = 513;

// Jacobi steps of a 513 x 513 grid (the boundary padded with 1) with MapOverlap2D on 1 or 2 sim
// devices, two steps an iteration (a to b, b to a), against the same stencil written as a kernel on
// the containers, on one device. Target: MapOverlap2D within 1.2x of the hand-written kernel.
void MapOverlap2DJacobi(benchmark::State& state) {
  const hdsm::ContainerOptions o{&runtime()};
  hdsm::Matrix<float> a(kGrid, kGrid, 1.0f, o), b(kGrid, kGrid, o);
  std::vector<unsigned> devices(static_cast<std::size_t>(state.range(0)));
  for (std::size_t d = 0; d < devices.size(); ++d) devices[d] = static_cast<unsigned>(d);
  hdsm::MapOverlap2D<bench_jacobi> step;
  step.devices(devices).overlap(1, 1).edge(hdsm::Edge::pad).pad(1.0f);
  for (auto _ : state) {
    step(b, a);
    step(a, b);
    a.wait();
  }
  state.counters["per_element"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2 * kGrid * kGrid,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void HandWrittenJacobi(benchmark::State& state) {
  static const hdsm::Kernel kernel = hdsm::per_thread(
      "bench_jacobi_kernel", [](const hdsm::Thread& t, const float* in, float* out, std::uint64_t n) {
        const std::uint64_t x = t.global_x(), y = t.global_y();
        if (x >= n || y >= n) return;
        const float up = y > 0 ? in[(y - 1) * n + x] : 1.0f, down = y + 1 < n ? in[(y + 1) * n + x] : 1.0f;
        const float left = x > 0 ? in[y * n + x - 1] : 1.0f, right = x + 1 < n ? in[y * n + x + 1] : 1.0f;
        out[y * n + x] = 0.25f * (up + down + left + right);
      });
  const hdsm::ContainerOptions o{&runtime()};
  hdsm::Matrix<float> a(kGrid, kGrid, 1.0f, o), b(kGrid, kGrid, o);
  const auto blocks = static_cast<std::uint32_t>((kGrid + 15) / 16);
  const hdsm::Launch shape{hdsm::Dim3{blocks, blocks}, hdsm::Dim3{16, 16}, 0};
  for (auto _ : state) {
    hdsm::launch(0, kernel, shape, hdsm::in(a), hdsm::out(b), std::uint64_t{kGrid});
    hdsm::launch(0, kernel, shape, hdsm::in(b), hdsm::out(a), std::uint64_t{kGrid});
    a.wait();
  }
  state.counters["per_element"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2 * kGrid * kGrid,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

constexpr std::size_t kMseN = std::size_t{1} << 20;

std::vector<float> mse_image(float salt) {
  std::vector<float> v(kMseN);
  for (std::size_t i = 0; i < kMseN; ++i)
    v[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f * salt;
  return v;
}

// Seed 001's MSE through the containers: both images to the device, one MapReduce, the partial
// results back; the device copies freed after every run (flush), so each run moves and allocates what
// a hand-written version does. Against MseExplicitCopies: target < 1 % more time.
void MseContainers(benchmark::State& state) {
  const hdsm::ContainerOptions o{&runtime(), state.range(0) != 0, {}};
  const std::vector<float> a0 = mse_image(1.0f), b0 = mse_image(0.75f);
  hdsm::Vector<float> a(kMseN, o), b(kMseN, o);
  std::copy(a0.begin(), a0.end(), a.data());
  std::copy(b0.begin(), b0.end(), b.data());
  hdsm::MapReduce<bench_squared_difference, bench_addf> mse;
  mse.devices({0});
  for (auto _ : state) {
    benchmark::DoNotOptimize(mse(a, b));
    a.flush();
    b.flush();
  }
}

// The same by hand: device buffers, two copies in, the MapReduce kernel the skeleton uses, the
// partial results out and combined in order, the buffers freed.
void MseExplicitCopies(benchmark::State& state) {
  const std::vector<float> a0 = mse_image(1.0f), b0 = mse_image(0.75f);
  hdsm::Device& device = *runtime().devices()[0];
  const std::unique_ptr<hdsm::Queue> queue = device.create_queue();
  const hdsm::Kernel& kernel =
      hdsm::detail::MapReduceKernel<bench_squared_difference, bench_addf, float, float, float>::get<>();
  constexpr std::size_t kChunks = 256, kChunk = (kMseN + kChunks - 1) / kChunks;
  std::vector<float> partial(kChunks);
  for (auto _ : state) {
    const hdsm::DeviceBuffer da = device.alloc(kMseN * sizeof(float)),
                             db = device.alloc(kMseN * sizeof(float)),
                             dp = device.alloc(kChunks * sizeof(float));
    queue->copy_to_device(da, 0, a0.data(), kMseN * sizeof(float));
    queue->copy_to_device(db, 0, b0.data(), kMseN * sizeof(float));
    const hdsm::KernelArg args[] = {hdsm::KernelArg::buffer(dp), hdsm::KernelArg::buffer(da),
                                    hdsm::KernelArg::buffer(db), hdsm::KernelArg::value(std::uint64_t{kMseN}),
                                    hdsm::KernelArg::value(std::uint64_t{kChunk})};
    queue->launch(kernel, hdsm::cover(kChunks), args);
    queue->copy_to_host(partial.data(), dp, 0, kChunks * sizeof(float));
    queue->synchronize();
    float acc = partial[0];
    for (std::size_t i = 1; i < kChunks; ++i) acc = bench_addf::call(acc, partial[i]);
    benchmark::DoNotOptimize(acc);
    device.free(dp);
    device.free(db);
    device.free(da);
  }
}

BENCHMARK(ReduceHost)->UseRealTime();
BENCHMARK(OpenMpReduce)->UseRealTime();
BENCHMARK(ScanHost)->UseRealTime();
BENCHMARK(OpenMpScan)->UseRealTime();
BENCHMARK(MapHost)->UseRealTime();
BENCHMARK(OpenMpLoop)->UseRealTime();
BENCHMARK(StdVectorReadCopy);
BENCHMARK(CheckedReadCopy);
BENCHMARK(StdVectorRead);
BENCHMARK(CheckedRead);
BENCHMARK(UncheckedRead);
BENCHMARK(StdVectorWrite);
BENCHMARK(CheckedWrite);
BENCHMARK(UncheckedWrite);
BENCHMARK(DeviceAccessBookkeeping);
BENCHMARK(PlanWith8Copies);
BENCHMARK(PlanAmongIdleCopies)->ArgName("idle")->Arg(10)->Arg(10000);
BENCHMARK(SkeletonCallBookkeeping)->UseRealTime();
BENCHMARK(MapOverlap2DJacobi)->UseRealTime()->ArgName("devices")->Arg(1)->Arg(2);
BENCHMARK(HandWrittenJacobi)->UseRealTime();
BENCHMARK(MseContainers)->UseRealTime()->Unit(benchmark::kMillisecond)->ArgName("pinned")->Arg(0)->Arg(1);
BENCHMARK(MseExplicitCopies)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
