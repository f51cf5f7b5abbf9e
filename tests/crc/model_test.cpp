// The randomized model test of centralized release consistency against plain memory: random
// data-race-free programs, run by the workers of a CRC runtime, must read what a sequentially
// consistent execution would. Each phase (between barriers) gives random chunks of a shared array to
// random writers; every worker then reads random bytes that no other worker writes in that phase,
// and adds to lock-protected counters. Page sizes from 128 B to 16 KiB, local stores of a few pages
// (so modified pages are evicted mid-phase). HDSM_MODEL_SEED and HDSM_MODEL_ITERATIONS (phases)
// replay or lengthen a run.
#include "support/model_run.hpp"

#include <hdsm/crc.hpp>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace {

namespace crc = hdsm::crc;

constexpr std::size_t kBytes = 64 * 1024;
constexpr int kCounters = 3;

struct Chunk {
  std::size_t offset;
  std::size_t size;  // 1, 2, 4 or 8 bytes, written as one access of that width (or a byte run)
  int writer;
  std::uint64_t value;
};

struct Phase {
  std::vector<Chunk> chunks;                    // shuffled: the order writers go through their chunks
  std::vector<std::vector<std::size_t>> reads;  // per worker: offsets it may read
  std::vector<std::uint8_t> before;             // the array at the phase's start
  std::vector<std::uint8_t> after;              // and at its end
  std::vector<int> owner;                       // per byte: its writer in this phase, or -1
  std::vector<std::vector<int>> increments;     // per worker: counters it increments (under their lock)
};

std::vector<Phase> make_program(std::mt19937_64& rng, int workers, int phases) {
  std::vector<Phase> program(static_cast<std::size_t>(phases));
  std::vector<std::uint8_t> state(kBytes, 0);
  for (Phase& p : program) {
    p.before = state;
    p.owner.assign(kBytes, -1);
    // Runs of 1 to 300 bytes, each given to a writer or to nobody, cut into aligned accesses.
    for (std::size_t at = 0; at < kBytes;) {
      const std::size_t run = std::min<std::size_t>(1 + rng() % 300, kBytes - at);
      const int writer = static_cast<int>(rng() % static_cast<unsigned>(workers + 1)) - 1;
      if (writer >= 0)
        for (std::size_t i = at; i < at + run;) {
          std::size_t size = 8;
          while (size > 1 && (i % size != 0 || i + size > at + run)) size /= 2;
          p.chunks.push_back({i, size, writer, rng()});
          for (std::size_t k = 0; k < size; ++k) {
            p.owner[i + k] = writer;
            state[i + k] = static_cast<std::uint8_t>(p.chunks.back().value >> (8 * k));
          }
          i += size;
        }
      at += run;
    }
    p.after = state;
    std::shuffle(p.chunks.begin(), p.chunks.end(), rng);
    p.reads.resize(static_cast<std::size_t>(workers));
    p.increments.resize(static_cast<std::size_t>(workers));
    for (int w = 0; w < workers; ++w) {
      for (int k = 0; k < 400; ++k) {
        const std::size_t off = rng() % kBytes;
        if (p.owner[off] < 0 || p.owner[off] == w) p.reads[static_cast<std::size_t>(w)].push_back(off);
      }
      for (int k = 0; k < 3; ++k)
        p.increments[static_cast<std::size_t>(w)].push_back(static_cast<int>(rng() % kCounters));
    }
  }
  return program;
}

void write_chunk(std::uint8_t* base, const Chunk& c) {
  switch (c.size) {
    case 8:
      crc::write(reinterpret_cast<std::uint64_t*>(base + c.offset), c.value);
      break;
    case 4:
      crc::write(reinterpret_cast<std::uint32_t*>(base + c.offset), static_cast<std::uint32_t>(c.value));
      break;
    case 2:
      crc::write(reinterpret_cast<std::uint16_t*>(base + c.offset), static_cast<std::uint16_t>(c.value));
      break;
    default:
      crc::write(base + c.offset, static_cast<std::uint8_t>(c.value));
  }
}

struct Case {
  std::size_t page;
  std::size_t local_store;
  int workers;
};

class CrcModel : public ::testing::TestWithParam<Case> {};

TEST_P(CrcModel, DataRaceFreeProgramsReadWhatPlainMemoryWould) {
  const Case c = GetParam();
  hdsm::test::ModelRun run(20261126 + c.page + static_cast<std::uint64_t>(c.workers), 8);
  std::mt19937_64 rng(run.seed());
  const std::vector<Phase> program = make_program(rng, c.workers, run.iterations());

  crc::Options o;
  o.workers = c.workers;
  o.page_size = c.page;
  o.local_store = c.local_store;
  o.shared_bytes = 4 << 20;
  o.timeout = std::chrono::milliseconds(20000);
  crc::Runtime rt(o);
  auto* data = rt.alloc<std::uint8_t>(kBytes);
  auto* counters = rt.alloc<std::uint64_t>(kCounters);

  std::atomic<int> divergences{0};
  std::mutex first_mutex;
  std::string first;
  rt.run([&] {
    const int w = crc::worker_id();
    for (std::size_t ph = 0; ph < program.size(); ++ph) {
      const Phase& p = program[ph];
      for (const Chunk& chunk : p.chunks)
        if (chunk.writer == w) write_chunk(data, chunk);
      for (const int counter : p.increments[static_cast<std::size_t>(w)]) {
        crc::lock(counter);
        crc::write(&counters[counter], crc::read(&counters[counter]) + 1);
        crc::unlock(counter);
      }
      for (const std::size_t off : p.reads[static_cast<std::size_t>(w)]) {
        // Its own bytes of this phase, or the bytes as the last barrier left them.
        const std::uint8_t expected = p.owner[off] == w ? p.after[off] : p.before[off];
        const std::uint8_t got = crc::read(&data[off]);
        if (got != expected && divergences.fetch_add(1) == 0) {
          std::lock_guard lock(first_mutex);
          first = fmt::format("phase {}, worker {}: byte {} (page {}) read {:#x}, plain memory has {:#x}", ph,
                              w, off, off / c.page, got, expected);
        }
      }
      crc::barrier();
    }
  });
  EXPECT_EQ(divergences.load(), 0) << first << "\n" << run.where();
  // The home's view after the region: the last phase's writes, and every increment.
  const std::vector<std::uint8_t>& final_state = program.back().after;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kBytes; ++i) wrong += data[i] != final_state[i] ? 1 : 0;
  EXPECT_EQ(wrong, 0u) << run.where();
  std::uint64_t increments = 0;
  for (int k = 0; k < kCounters; ++k) increments += counters[k];
  EXPECT_EQ(increments, static_cast<std::uint64_t>(3 * c.workers * run.iterations()));
  const crc::Stats s = rt.stats();
  EXPECT_GT(s.write_backs, 0u);
  if (c.local_store / c.page <= 8) {
    EXPECT_GT(s.evictions, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(PageSizes, CrcModel,
                         ::testing::Values(Case{128, 1024, 3}, Case{256, 2048, 2}, Case{512, 4096, 4},
                                           Case{1024, 8192, 3}, Case{4096, 16384, 2}, Case{16384, 32768, 3},
                                           Case{4096, 256 << 10, 4}),
                         [](const auto& info) {
                           return fmt::format("page{}_store{}_workers{}", info.param.page,
                                              info.param.local_store, info.param.workers);
                         });

}  // namespace
