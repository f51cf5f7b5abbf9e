// Cost of the directory's pointer -> object -> block lookup (what the fault handler does first), for
// random interior pointers over 1000 objects of 4 KiB to 4 MiB spread over 4 arena segments.
// Argument: the block size. Target: per_lookup <= 20 ns.
#include "coherence/directory.hpp"
#include "os/arena.hpp"

#include <benchmark/benchmark.h>

#include <cstddef>
#include <random>
#include <vector>

namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

void Lookup(benchmark::State& state) {
  hdsm::os::Arena arena(4, GiB);
  hdsm::coherence::Directory dir(arena, static_cast<std::size_t>(state.range(0)));
  std::mt19937_64 rng(42);  // NOLINT(bugprone-random-generator-seed): the same objects every run
  struct Span {
    const std::byte* base;
    std::size_t bytes;
  };
  std::vector<Span> objects;
  for (int i = 0; i < 1000; ++i) {
    const std::size_t bytes = 4 * KiB << (rng() % 11);  // 4 KiB .. 4 MiB
    const auto id = dir.insert(static_cast<unsigned>(i % 4), bytes - rng() % 100);
    const auto* o = dir.find(id);
    objects.push_back({dir.user(*o), o->bytes});
  }
  // Pointers are drawn beforehand so the loop times the lookup, not the random number generator.
  std::vector<const std::byte*> pointers(1 << 16);
  for (auto& p : pointers) {
    const Span& s = objects[rng() % objects.size()];
    p = s.base + rng() % s.bytes;
  }
  std::size_t i = 0, found = 0;
  for (auto _ : state) {
    const auto hit = dir.lookup(pointers[i++ & (pointers.size() - 1)]);
    benchmark::DoNotOptimize(hit);
    found += hit.object != nullptr;
  }
  if (found != static_cast<std::size_t>(state.iterations()))
    state.SkipWithError("a lookup missed its object");
  // Seconds per lookup, printed with an SI prefix ("5.2ns").
  state.counters["per_lookup"] =
      benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

BENCHMARK(Lookup)->Arg(4 * KiB)->Arg(64 * KiB)->Arg(MiB);

}  // namespace

BENCHMARK_MAIN();
