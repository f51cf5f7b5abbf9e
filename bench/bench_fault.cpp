// Cost of one resolved page fault: mprotect(PROT_NONE), touch, the handler makes the page read/write
// again. `RawHandler` is a bare SIGSEGV handler doing only that; `Dispatcher` goes through the hdsm
// dispatcher (range lookup, access decoding, counters) to a resolver doing the same mprotect.
// Target: Dispatcher within 1.1x of RawHandler.
//
// The cluster DSM's write fault (`ClusterWriteFault`: the first write to a read-only global page in
// a kernel makes the page's twin and opens it) against `RawReadOnlyWalk`, the same round trips of a
// bare handler over 1024 read-only pages (and `RawReadOnlyWrite`, one page toggled alone). Target:
// within 1.1x. Each iteration is a launch whose one thread writes a byte of each of 1024 pages on
// rank 0 of two in-process ranks; the time counted is the launch's minus its boundary. The twin, a
// 4 KiB copy, is part of it: about 0.1 us with warm caches, it took about 1 us of the 6 in a fault
// on the 2-core VM (measured by leaving it out). With ahead:0 every page faults; with ahead:16 (the
// default of HDSM_CLUSTER_OPEN_AHEAD) the pages that the last launch wrote open 16 at a time, and the
// time is per page all the same.
#include "os/fault.hpp"
#include "os/mapping.hpp"

#if defined(HDSM_BENCH_CLUSTER)
#include "cluster/node.hpp"
#include "cluster/threads_transport.hpp"

#include <hdsm/cluster.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#endif

#include <benchmark/benchmark.h>

#include <sys/mman.h>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <mutex>
#include <thread>

namespace {

std::uintptr_t page_mask() { return ~(static_cast<std::uintptr_t>(hdsm::os::page_size()) - 1); }

void raw_handler(int, siginfo_t* info, void*) {
  auto* page = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(info->si_addr) & page_mask());
  ::mprotect(page, hdsm::os::page_size(), PROT_READ | PROT_WRITE);
}

// raw_handler for SIGSEGV, the previous action in `saved`; false (the benchmark skipped) on failure.
bool install_raw_handler(benchmark::State& state, struct sigaction& saved) {
  struct sigaction action {};
  action.sa_sigaction = raw_handler;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  if (::sigaction(SIGSEGV, &action, &saved) == 0) return true;
  state.SkipWithError("sigaction failed");
  return false;
}

bool resolve_read_write(void*, void* address, hdsm::os::FaultAccess) {
  auto* page = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(address) & page_mask());
  return ::mprotect(page, hdsm::os::page_size(), PROT_READ | PROT_WRITE) == 0;
}

void fault_loop(benchmark::State& state, volatile char* page) {
  for (auto _ : state) {
    ::mprotect(const_cast<char*>(page), hdsm::os::page_size(), PROT_NONE);
    *page = 1;
  }
  // Seconds per fault, printed with an SI prefix ("4.5us").
  state.counters["per_fault"] =
      benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void RawHandler(benchmark::State& state) {
  hdsm::os::Mapping page(hdsm::os::page_size(), "raw fault page");
  struct sigaction saved {};
  if (!install_raw_handler(state, saved)) return;
  fault_loop(state, reinterpret_cast<volatile char*>(page.data()));
  ::sigaction(SIGSEGV, &saved, nullptr);
}

void Dispatcher(benchmark::State& state) {
  hdsm::os::Mapping page(hdsm::os::page_size(), "dispatched fault page");
  hdsm::os::install_fault_handler();
  const int id = hdsm::os::register_fault_range(page.data(), page.size(), resolve_read_write, nullptr);
  hdsm::os::reset_fault_stats();
  fault_loop(state, reinterpret_cast<volatile char*>(page.data()));
  const auto stats = hdsm::os::fault_stats();
  hdsm::os::unregister_fault_range(id);
  if (stats.writes + stats.unknown != static_cast<std::uint64_t>(state.iterations()))
    state.SkipWithError("faults went unresolved");
}

// The same with a second thread of the process asleep, as a cluster rank always has (its page
// server or fault service, the other in-process rank here): mprotect then also shoots down the TLB
// of the cores that thread last ran on, which a one-thread process never pays.
void RawReadOnlyWriteTwoThreads(benchmark::State& state);

void RawReadOnlyWrite(benchmark::State& state) {
  hdsm::os::Mapping page(hdsm::os::page_size(), "raw read-only page");
  struct sigaction saved {};
  if (!install_raw_handler(state, saved)) return;
  auto* p = reinterpret_cast<volatile char*>(page.data());
  for (auto _ : state) {
    ::mprotect(page.data(), hdsm::os::page_size(), PROT_READ);
    *p = 1;
  }
  state.counters["per_fault"] =
      benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  ::sigaction(SIGSEGV, &saved, nullptr);
}

void RawReadOnlyWriteTwoThreads(benchmark::State& state) {
  std::mutex m;
  std::condition_variable cv;
  bool stop = false;
  std::thread sleeper([&] {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return stop; });
  });
  RawReadOnlyWrite(state);
  {
    std::lock_guard lock(m);
    stop = true;
  }
  cv.notify_all();
  sleeper.join();
}

// The raw round trip in the cluster launch's pattern: a bare handler opens, one by one, the pages of
// a 1024-page read-only area as a loop writes a byte of each, so the kernel's mapping entries split
// and merge as under ClusterWriteFault. (On the 2-core VM that costs nothing extra: 4.4-4.8 us a
// fault against 5.0-5.3 for RawReadOnlyWrite's one page toggled alone.)
void RawReadOnlyWalk(benchmark::State& state) {
  constexpr std::size_t kPages = 1024;
  const std::size_t page = hdsm::os::page_size();
  hdsm::os::Mapping area(kPages * page, "raw read-only area");
  struct sigaction saved {};
  if (!install_raw_handler(state, saved)) return;
  auto* p = reinterpret_cast<volatile char*>(area.data());
  for (auto _ : state) {
    state.PauseTiming();
    ::mprotect(area.data(), area.size(), PROT_READ);
    state.ResumeTiming();
    for (std::size_t i = 0; i < kPages; ++i) p[i * page] = static_cast<char>(i);
  }
  state.counters["per_fault"] =
      benchmark::Counter(kPages, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  ::sigaction(SIGSEGV, &saved, nullptr);
}

#if defined(HDSM_BENCH_CLUSTER)
void ClusterWriteFault(benchmark::State& state) {
  namespace cl = hdsm::cluster;
  constexpr std::uint32_t kPages = 1024;
  cl::Options o;
  o.space_bytes = std::size_t{64} << 20;
  o.threads = 1;
  o.lazy_pages = std::uint64_t{1} << 40;
  o.private_pages = false;  // rank 0 alone writes the pages: private, they would never fault again
  o.open_ahead = static_cast<unsigned>(state.range(0));
  o.policy = [](std::uint64_t blocks, std::span<const double> speeds) {
    std::vector<std::uint64_t> b(speeds.size() + 1, blocks);
    b[0] = 0;  // rank 0 runs every block
    return b;
  };
  const auto touch = hdsm::per_thread("touch_pages", [](const hdsm::Thread&, char* p, std::uint32_t pages) {
    for (std::uint32_t i = 0; i < pages; ++i) p[std::size_t{i} * 4096] = static_cast<char>(i);
  });
  hdsm::cluster::detail::ThreadsHub hub(2);
  std::atomic<bool> done{false};
  std::atomic<std::int64_t> launches{0};
  // Rank 1 takes part in every launch (it runs no block) until rank 0 is done.
  std::thread partner([&] {
    cl::detail::Node node(hub.endpoint(1), o);
    cl::detail::bind_thread(&node);
    char* p = cl::alloc<char>(std::size_t{kPages} * 4096);
    for (;;) {
      node.barrier();
      if (done.load()) break;
      cl::launch(touch, hdsm::Launch{hdsm::Dim3{1}, hdsm::Dim3{1}, 0}, p, kPages);
    }
    cl::free(p);
    cl::detail::bind_thread(nullptr);
  });
  {
    cl::detail::Node node(hub.endpoint(0), o);
    cl::detail::bind_thread(&node);
    char* p = cl::alloc<char>(std::size_t{kPages} * 4096);
    double boundaries = 0;
    for (auto _ : state) {
      node.barrier();
      const double boundary_before = cl::stats().boundary_seconds;
      const auto start = std::chrono::steady_clock::now();
      cl::launch(touch, hdsm::Launch{hdsm::Dim3{1}, hdsm::Dim3{1}, 0}, p, kPages);
      const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double boundary = cl::stats().boundary_seconds - boundary_before;
      state.SetIterationTime((total - boundary) / kPages);
      boundaries += boundary;
      ++launches;
    }
    // The boundary's share a page (its diff reads the twins back), beside the fault's: a twin made
    // faster at the fault must not just move the cost there.
    state.counters["boundary_us_per_page"] =
        boundaries * 1e6 / static_cast<double>(std::max<std::int64_t>(1, launches) * kPages);
    done.store(true);
    node.barrier();
    state.counters["faults_per_launch"] = static_cast<double>(cl::stats().write_faults) /
                                          static_cast<double>(std::max<std::int64_t>(1, launches));
    cl::free(p);
    cl::detail::bind_thread(nullptr);
  }
  partner.join();
}
// A fixed count: the manual time is per page, so Google Benchmark would aim for far more launches.
BENCHMARK(ClusterWriteFault)
    ->ArgName("ahead")
    ->Arg(0)
    ->Arg(16)
    ->UseManualTime()
    ->Iterations(40)
    ->Repetitions(5);
#endif

// Compare medians; --benchmark_enable_random_interleaving=true interleaves the repetitions of the two,
// so that load from other processes does not favour one of them. Wall time, as ClusterWriteFault's
// manual time is: per_fault is a rate, which Google Benchmark divides by CPU time otherwise (a fault
// the VM's host delays shows in wall time only).
BENCHMARK(RawHandler)->Repetitions(5)->UseRealTime();
BENCHMARK(Dispatcher)->Repetitions(5)->UseRealTime();
BENCHMARK(RawReadOnlyWrite)->Repetitions(5)->UseRealTime();
BENCHMARK(RawReadOnlyWriteTwoThreads)->Repetitions(5)->UseRealTime();
BENCHMARK(RawReadOnlyWalk)->Repetitions(5)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
