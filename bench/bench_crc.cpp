// Micro-costs of centralized release consistency (hdsm::crc) on the threads transport: the page
// buffer's hit paths against plain memory (target: crc::read <= 3 ns on a buffered page), lock
// acquire + release and barrier latency against the number of workers (targets with workers + home
// on their own cores: <= 3 us and <= 2 us; the seed measured 6.47 us and 3.14 us with 8 SPEs), and
// a page fetch or write-back through the home against a plain copy of the page (seed Fig. 10).
#include "os/cpu_binding.hpp"
#include "os/mapping.hpp"
#include "os/spin_wait.hpp"

#include <hdsm/crc.hpp>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace {

namespace crc = hdsm::crc;

crc::Runtime& runtime(int workers) {
  static std::unique_ptr<crc::Runtime> rt;
  static int made = 0;
  if (made != workers) {
    rt.reset();
    crc::Options o = crc::Options::from_environment();
    o.workers = workers;
    o.shared_bytes = 64 << 20;
    rt = std::make_unique<crc::Runtime>(o);
    made = workers;
  }
  return *rt;
}

// 64 ints on one page, read in a loop (the index wraps so the compiler cannot hoist the reads).
void ReadHit(benchmark::State& state) {
  crc::Runtime& rt = runtime(1);
  int* a = rt.alloc<int>(1024);
  rt.run([&] {
    for (int i = 0; i < 64; ++i) crc::write(&a[i], i);
    crc::flush();
    unsigned i = 0;
    int sum = 0;
    for (auto _ : state) {
      sum += crc::read(&a[i++ & 63]);
      benchmark::DoNotOptimize(sum);
    }
  });
  rt.free(a);
}

void WriteHit(benchmark::State& state) {
  crc::Runtime& rt = runtime(1);
  int* a = rt.alloc<int>(1024);
  rt.run([&] {
    crc::write(&a[0], 0);
    unsigned i = 0;
    for (auto _ : state) {
      crc::write(&a[i & 63], static_cast<int>(i));
      ++i;
      benchmark::ClobberMemory();
    }
  });
  rt.free(a);
}

void PlainRead(benchmark::State& state) {
  std::vector<int> a(64, 1);
  int* p = a.data();
  benchmark::DoNotOptimize(p);
  unsigned i = 0;
  int sum = 0;
  for (auto _ : state) {
    sum += p[i++ & 63];
    benchmark::DoNotOptimize(sum);
  }
}

// Acquire + release of one lock by every worker in turn. The time is per pair on worker 0, which
// waits for the others' pairs too; per_lock is the time per pair of any worker (the lock handed on
// workers times an iteration), the `hdsm bench crc` sync figure and the target's measure.
void LockUnlock(benchmark::State& state) {
  const auto workers = static_cast<int>(state.range(0));
  crc::Runtime& rt = runtime(workers);
  const std::int64_t rounds = state.max_iterations;
  rt.run([&] {
    if (crc::worker_id() == 0) {
      for (auto _ : state) {
        crc::lock(1);
        crc::unlock(1);
      }
      state.counters["per_lock"] = benchmark::Counter(
          workers, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
    } else {
      for (std::int64_t i = 0; i < rounds; ++i) {
        crc::lock(1);
        crc::unlock(1);
      }
    }
  });
}

void Barrier(benchmark::State& state) {
  const auto workers = static_cast<int>(state.range(0));
  crc::Runtime& rt = runtime(workers);
  const std::int64_t rounds = state.max_iterations;
  rt.run([&] {
    if (crc::worker_id() == 0) {
      for (auto _ : state) crc::barrier();
    } else {
      for (std::int64_t i = 0; i < rounds; ++i) crc::barrier();
    }
  });
}

// Fetch cost: sequential reads of a 16 MiB array, one access per page, so every access is a miss
// that fetches the page (through the home, or straight for read_only); the time is per page.
void Fetch(benchmark::State& state) {
  const auto page = static_cast<std::size_t>(state.range(0));
  const bool direct = state.range(1) != 0;
  crc::Runtime& rt = runtime(1);
  rt.page_size(page);
  const std::size_t bytes = 16 << 20;
  auto* a = rt.alloc<std::byte>(bytes);
  rt.run([&] {
    std::size_t at = 0;
    for (auto _ : state) {
      const std::byte b = direct ? crc::read_only(&a[at]) : crc::read(&a[at]);
      benchmark::DoNotOptimize(b);
      at = (at + page) % bytes;
    }
  });
  rt.free(a);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * page));
}

// Flush cost: one write per page, so every miss evicts a modified page (a write-back through the
// home, or a direct put for write_single) and fetches the next.
void Flush(benchmark::State& state) {
  const auto page = static_cast<std::size_t>(state.range(0));
  const bool single = state.range(1) != 0;
  crc::Runtime& rt = runtime(1);
  rt.page_size(page);
  const std::size_t bytes = 16 << 20;
  auto* a = rt.alloc<std::byte>(bytes);
  rt.run([&] {
    std::size_t at = 0;
    for (auto _ : state) {
      if (single)
        crc::write_single(&a[at], std::byte{1});
      else
        crc::write(&a[at], std::byte{1});
      at = (at + page) % bytes;
    }
  });
  rt.free(a);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * page));
}

// The same bytes as one memcpy per page, from a 16 MiB array into a local area the size of the local
// store (as the page buffer's frames rotate through it). Both areas start on a page boundary, as the
// shared space and the local store do: with vectors, 16 bytes past one, glibc's memcpy took 1.03 us
// for 8 KiB on the development VM against 0.26 us aligned (its `rep movsb` path is slower there on
// misaligned addresses), so Fetch/8192 looked faster than the copy it contains.
void RawCopy(benchmark::State& state) {
  const auto page = static_cast<std::size_t>(state.range(0));
  const std::size_t bytes = 16 << 20;
  const std::size_t store = crc::Options::from_environment().local_store;
  hdsm::os::Mapping big_area(bytes, "RawCopy source", /*populate=*/true);
  hdsm::os::Mapping local_area(store, "RawCopy local area", /*populate=*/true);
  std::byte* const big = big_area.data();
  std::byte* const local = local_area.data();
  std::memset(big, 1, bytes);
  std::size_t at = 0, frame = 0;
  for (auto _ : state) {
    std::memcpy(local + frame, big + at, page);
    benchmark::DoNotOptimize(local);
    at = (at + page) % bytes;
    frame = (frame + page) % (store / page * page);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * page));
}

// One round trip between two threads, as a worker's call and the home's answer: the partner takes
// the request, works `delay` ns (a barrier's other arrivals, a merge), and answers; the caller waits
// with the threads transport's spin, yielding its core every 64 pauses from the start (quiet 0, as
// when threads outnumber the cores) or only after 50 us (quiet 1, each thread on a core of its own).
// The other side of a round trip: a spinning thread that answers request n with n, after `delay`
// ns of work timed with the clock (none, and no clock read, without a delay).
class Partner {
 public:
  explicit Partner(std::optional<std::uint64_t> delay) : thread_([this, delay] { serve(delay); }) {}
  ~Partner() {
    stop_.store(true);
    thread_.join();
  }
  Partner(const Partner&) = delete;
  Partner& operator=(const Partner&) = delete;

  std::thread& thread() { return thread_; }
  void ask(std::uint64_t n) { asked_.store(n, std::memory_order_release); }
  bool answered(std::uint64_t n) const { return answered_.load(std::memory_order_acquire) == n; }

 private:
  void serve(std::optional<std::uint64_t> delay) {
    std::uint64_t seen = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
      if (asked_.load(std::memory_order_acquire) == seen) {
        hdsm::os::cpu_relax();
        continue;
      }
      ++seen;
      if (delay) {
        const std::uint64_t until = hdsm::os::monotonic_ns() + *delay;
        while (hdsm::os::monotonic_ns() < until) hdsm::os::cpu_relax();
      }
      answered_.store(seen, std::memory_order_release);
    }
  }

  std::atomic<std::uint64_t> asked_{0}, answered_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: it starts once the flags exist
};

void SpinHandOff(benchmark::State& state) {
  const auto delay = static_cast<std::uint64_t>(state.range(0));
  const std::uint64_t quiet = state.range(1) != 0 ? 50'000 : 0;
  Partner partner(delay);
  std::uint64_t n = 0;
  for (auto _ : state) {
    partner.ask(++n);
    hdsm::os::spin_until_for(
        1'000'000, [&] { return partner.answered(n); }, quiet);
    while (!partner.answered(n)) hdsm::os::cpu_relax();
  }
}

// One round trip between the first CPU of the compact order and the `partner`-th (as
// HDSM_CRC_BIND=compact places the home and worker `partner` - 1), both spinning: what the
// machine's cache-line transfers cost between those two CPUs, with nothing of hdsm's around them.
void PinnedHandOff(benchmark::State& state) {
  const std::vector<int> order =
      hdsm::os::compact_order(hdsm::os::allowed_cpus(), [](int c) { return hdsm::os::cpu_place(c); });
  const auto partner_at = static_cast<std::size_t>(state.range(0));
  if (partner_at >= order.size()) {
    state.SkipWithError("fewer CPUs than that here");
    return;
  }
  Partner partner(std::nullopt);
  try {
    hdsm::os::bind_thread(partner.thread().native_handle(), order[partner_at], "PinnedHandOff's partner");
    const hdsm::os::ScopedBinding caller(order[0], "PinnedHandOff's caller");
    std::uint64_t n = 0;
    for (auto _ : state) {
      partner.ask(++n);
      while (!partner.answered(n)) hdsm::os::cpu_relax();
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  state.SetLabel(fmt::format("CPU {} and CPU {}", order[0], order[partner_at]));
}

}  // namespace

BENCHMARK(ReadHit)->UseRealTime();
BENCHMARK(WriteHit)->UseRealTime();
BENCHMARK(PlainRead);
// 1 to 4 workers, and on a larger host up to one per core but the home's.
void WorkerCounts(benchmark::internal::Benchmark* b) {
  const int most = std::max(4, static_cast<int>(hdsm::os::usable_cpus()) - 1);
  for (int w = 1; w <= most; ++w) b->Arg(w);
}

BENCHMARK(LockUnlock)->Apply(WorkerCounts)->Iterations(20000)->UseRealTime();
BENCHMARK(Barrier)->Apply(WorkerCounts)->Iterations(20000)->UseRealTime();
BENCHMARK(Fetch)->ArgsProduct({{128, 1024, 8192, 16384}, {0, 1}})->UseRealTime();
BENCHMARK(Flush)->ArgsProduct({{128, 1024, 8192, 16384}, {0, 1}})->UseRealTime();
BENCHMARK(RawCopy)->Arg(128)->Arg(1024)->Arg(8192)->Arg(16384);
BENCHMARK(SpinHandOff)
    ->ArgsProduct({{0, 2000, 4000}, {0, 1}})
    ->ArgNames({"delay_ns", "quiet"})
    ->UseRealTime();

// From the first CPU to each other one (up to 63), as placed for a crc runtime.
BENCHMARK(PinnedHandOff)
    ->DenseRange(1, std::clamp(static_cast<int>(hdsm::os::usable_cpus()) - 1, 1, 63))
    ->ArgName("partner")
    ->UseRealTime();

BENCHMARK_MAIN();
