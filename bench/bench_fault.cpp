// Cost of one resolved page fault: mprotect(PROT_NONE), touch, the handler makes the page read/write
// again. `RawHandler` is a bare SIGSEGV handler doing only that; `Dispatcher` goes through the hdsm
// dispatcher (range lookup, access decoding, counters) to a resolver doing the same mprotect.
// Target: Dispatcher within 1.1x of RawHandler.
#include "os/fault.hpp"
#include "os/mapping.hpp"

#include <benchmark/benchmark.h>

#include <sys/mman.h>
#include <csignal>
#include <cstdint>

namespace {

std::uintptr_t page_mask() { return ~(static_cast<std::uintptr_t>(hdsm::os::page_size()) - 1); }

void raw_handler(int, siginfo_t* info, void*) {
  auto* page = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(info->si_addr) & page_mask());
  ::mprotect(page, hdsm::os::page_size(), PROT_READ | PROT_WRITE);
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
  struct sigaction action {
  }, saved{};
  action.sa_sigaction = raw_handler;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  if (::sigaction(SIGSEGV, &action, &saved) != 0) {
    state.SkipWithError("sigaction failed");
    return;
  }
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

// Compare medians; --benchmark_enable_random_interleaving=true interleaves the repetitions of the two,
// so that load from other processes does not favour one of them.
BENCHMARK(RawHandler)->Repetitions(5);
BENCHMARK(Dispatcher)->Repetitions(5);

}  // namespace

BENCHMARK_MAIN();
