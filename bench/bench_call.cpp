// Latency of the smallest round trips: a one-thread kernel launched and waited for, on a queue and
// through shared memory (call + sync, then a host read of the result), with one host thread and
// with two threads on two devices (where the machine has them). The device is the runtime's
// default: HDSM_DEVICE=cuda bench_call runs them on a GPU. Target (one sim device, one thread):
// CallSyncRead <= 15 us, and <= 1.5x its per-round time with two threads.
#include <hdsm/hdsm.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#ifdef HDSM_BENCH_CUDA_KERNELS
namespace hdsm::bench {
const void* (*increment_cuda_lookup())();
}
#endif

namespace {

const hdsm::Kernel& increment_kernel() {
  static const hdsm::Kernel k = [] {
    hdsm::Kernel kernel = hdsm::per_thread("bench_increment", [](const hdsm::Thread& t, std::uint32_t* p) {
      if (t.global_x() == 0) *p += 1;
    });
    kernel.opencl_source = R"(
      __kernel void bench_increment(__global uint* p) {
        if (get_global_id(0) == 0) *p += 1;
      })";
#ifdef HDSM_BENCH_CUDA_KERNELS
    kernel.cuda_lookup = hdsm::bench::increment_cuda_lookup();
#endif
    return kernel;
  }();
  return k;
}

hdsm::Runtime& runtime() {
  static hdsm::Runtime rt(hdsm::Config::from_environment());
  return rt;
}

// The device of benchmark thread `thread`: the default device, then the next ones of its backend.
hdsm::Device& device_for(int thread) {
  hdsm::Device& first = runtime().default_device();
  const auto devices = runtime().devices();
  const std::size_t index = first.properties().index + static_cast<std::size_t>(thread);
  if (index < devices.size() && devices[index]->properties().backend == first.properties().backend)
    return *devices[index];
  return first;
}

void rounds_counter(benchmark::State& state) {
  state.counters["rounds"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// launch + record + Event::wait on one queue of the device.
void QueueLaunchWait(benchmark::State& state) {
  hdsm::Device& d = device_for(state.thread_index());
  const hdsm::DeviceBuffer buffer = d.alloc(sizeof(std::uint32_t));
  auto queue = d.create_queue();
  queue->fill(buffer, 0, sizeof(std::uint32_t), 0);
  const hdsm::KernelArg args[] = {hdsm::KernelArg::buffer(buffer)};
  for (auto _ : state) {
    queue->launch(increment_kernel(), hdsm::cover(1), args);
    queue->record().wait();
  }
  queue->synchronize();
  d.free(buffer);
  rounds_counter(state);
}

// launch + Queue::synchronize.
void QueueLaunchSynchronize(benchmark::State& state) {
  hdsm::Device& d = device_for(state.thread_index());
  const hdsm::DeviceBuffer buffer = d.alloc(sizeof(std::uint32_t));
  auto queue = d.create_queue();
  queue->fill(buffer, 0, sizeof(std::uint32_t), 0);
  const hdsm::KernelArg args[] = {hdsm::KernelArg::buffer(buffer)};
  for (auto _ : state) {
    queue->launch(increment_kernel(), hdsm::cover(1), args);
    queue->synchronize();
  }
  d.free(buffer);
  rounds_counter(state);
}

// hdsm::call + sync on a shared object, no host access in between.
void CallSync(benchmark::State& state) {
  hdsm::Runtime& rt = runtime();
  auto* p = rt.alloc<std::uint32_t>(1, static_cast<int>(device_for(state.thread_index()).properties().index));
  for (auto _ : state) {
    rt.call(increment_kernel(), hdsm::cover(1), hdsm::inout(p));
    rt.sync();
  }
  rt.free(p);
  rounds_counter(state);
}

// hdsm::call + sync + a host read of the result: the round trip of a program that looks at what
// the kernel computed after every call.
void CallSyncRead(benchmark::State& state) {
  hdsm::Runtime& rt = runtime();
  auto* p = rt.alloc<std::uint32_t>(1, static_cast<int>(device_for(state.thread_index()).properties().index));
  std::uint32_t expected = 0;
  for (auto _ : state) {
    rt.call(increment_kernel(), hdsm::cover(1), hdsm::inout(p));
    rt.sync();
    if (*static_cast<volatile std::uint32_t*>(p) != ++expected) {
      state.SkipWithError("the host read a stale value");
      break;
    }
  }
  rt.free(p);
  rounds_counter(state);
}

// A host write, call + sync, host read: each round releases the host's write and acquires the
// kernel's.
void WriteCallSyncRead(benchmark::State& state) {
  hdsm::Runtime& rt = runtime();
  auto* p = rt.alloc<std::uint32_t>(1, static_cast<int>(device_for(state.thread_index()).properties().index));
  std::uint32_t value = 0;
  for (auto _ : state) {
    *p = value;
    rt.call(increment_kernel(), hdsm::cover(1), hdsm::inout(p));
    rt.sync();
    if (*static_cast<volatile std::uint32_t*>(p) != value + 1) {
      state.SkipWithError("the host read a stale value");
      break;
    }
    value += 7;
  }
  rt.free(p);
  rounds_counter(state);
}

// An unannotated call + sync on sim device 0 of its own runtime, with range(0) objects alive on
// device 1: the call releases and acquires every object of its device only, so the time is flat in
// the objects elsewhere (it grew 35x at 16000 before they were indexed by device).
void UnannotatedCallSyncBesideObjectsElsewhere(benchmark::State& state) {
  hdsm::Runtime rt(hdsm::Config::from_environment().set("HDSM_DEVICE", "sim").set("HDSM_SIM_DEVICES", "2"));
  std::vector<void*> elsewhere;
  elsewhere.reserve(static_cast<std::size_t>(state.range(0)));
  for (std::int64_t i = 0; i < state.range(0); ++i) elsewhere.push_back(rt.alloc(64, 1));
  auto* p = rt.alloc<std::uint32_t>(1, 0);
  for (auto _ : state) {
    rt.call(increment_kernel(), hdsm::cover(1), p);
    rt.sync();
  }
  rt.free(p);
  for (void* q : elsewhere) rt.free(q);
  rounds_counter(state);
}

}  // namespace

BENCHMARK(UnannotatedCallSyncBesideObjectsElsewhere)
    ->ArgName("objects_elsewhere")
    ->Arg(0)
    ->Arg(16000)
    ->UseRealTime();
BENCHMARK(QueueLaunchWait)->UseRealTime()->Threads(1)->Threads(2);
BENCHMARK(QueueLaunchSynchronize)->UseRealTime()->Threads(1)->Threads(2);
BENCHMARK(CallSync)->UseRealTime()->Threads(1)->Threads(2);
BENCHMARK(CallSyncRead)->UseRealTime()->Threads(1)->Threads(2);
BENCHMARK(WriteCallSyncRead)->UseRealTime()->Threads(1)->Threads(2);

BENCHMARK_MAIN();
