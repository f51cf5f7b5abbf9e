// The randomized model test's programs (tests/crc/model_test.cpp on threads, tests/mpi/crc_mpi_test.cpp
// on MPI ranks): random data-race-free programs of phases between barriers. Each phase gives random
// chunks of a shared array to random writers; every worker then reads random bytes no other worker
// writes in that phase, and adds to lock-protected counters. A quarter of the pages of each phase
// have a single writer, which writes them with the single-writer variants (element writes, and
// runs that are in place with zero copy); the pages nobody writes are read with the read-only
// variant half of the time. The program is a value: every rank that makes it from one seed makes
// the same.
#pragma once

#include <hdsm/crc.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace crc_model {

namespace crc = hdsm::crc;

constexpr std::size_t kBytes = 64 * 1024;
constexpr int kCounters = 3;

/// How a chunk is written: crc::write, crc::write_single, or through write_single_local's run.
enum class Mode : std::uint8_t { plain, single, single_run };

struct Chunk {
  std::size_t offset;
  std::size_t size;  // 1, 2, 4 or 8 bytes, written as one access of that width (or a byte run)
  int writer;
  std::uint64_t value;
  Mode mode = Mode::plain;
};

struct Phase {
  std::vector<Chunk> chunks;                    // shuffled: the order writers go through their chunks
  std::vector<std::vector<std::size_t>> reads;  // per worker: offsets it may read
  std::vector<bool> read_only;                  // per page: nobody writes it in this phase
  std::vector<std::uint8_t> before;             // the array at the phase's start
  std::vector<std::uint8_t> after;              // and at its end
  std::vector<int> owner;                       // per byte: its writer in this phase, or -1
  std::vector<std::vector<int>> increments;     // per worker: counters it increments (under their lock)
};

inline std::vector<Phase> make_program(std::mt19937_64& rng, int workers, int phases, std::size_t page) {
  std::vector<Phase> program(static_cast<std::size_t>(phases));
  std::vector<std::uint8_t> state(kBytes, 0);
  const std::size_t pages = kBytes / page;
  for (Phase& p : program) {
    p.before = state;
    p.owner.assign(kBytes, -1);
    // Pages with a single writer in this phase: -1 for the others.
    std::vector<int> single(pages, -1);
    for (int& w : single)
      if (rng() % 4 == 0) w = static_cast<int>(rng() % static_cast<unsigned>(workers));
    // Runs of 1 to 300 bytes, each given to a writer or to nobody, cut into aligned accesses (which
    // never straddle a page); on a single writer's page every access of a run goes to it.
    for (std::size_t at = 0; at < kBytes;) {
      const std::size_t run = std::min<std::size_t>(1 + rng() % 300, kBytes - at);
      const int writer = static_cast<int>(rng() % static_cast<unsigned>(workers + 1)) - 1;
      if (writer >= 0)
        for (std::size_t i = at; i < at + run;) {
          std::size_t size = 8;
          while (size > 1 && (i % size != 0 || i + size > at + run)) size /= 2;
          const int only = single[i / page];
          p.chunks.push_back({i, size, only >= 0 ? only : writer, rng(),
                              only < 0         ? Mode::plain
                              : rng() % 2 == 0 ? Mode::single
                                               : Mode::single_run});
          const int owner = p.chunks.back().writer;
          for (std::size_t k = 0; k < size; ++k) {
            p.owner[i + k] = owner;
            state[i + k] = static_cast<std::uint8_t>(p.chunks.back().value >> (8 * k));
          }
          i += size;
        }
      at += run;
    }
    p.after = state;
    p.read_only.assign(pages, true);
    for (const Chunk& c : p.chunks) p.read_only[c.offset / page] = false;
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

template <class T>
void write_as(std::uint8_t* at, T value, Mode mode) {
  auto* p = reinterpret_cast<T*>(at);
  switch (mode) {
    case Mode::plain:
      crc::write(p, value);
      break;
    case Mode::single:
      crc::write_single(p, value);
      break;
    case Mode::single_run:
      crc::write_single_local(p).data[0] = value;
      break;
  }
}

inline void write_chunk(std::uint8_t* base, const Chunk& c) {
  switch (c.size) {
    case 8:
      write_as(base + c.offset, c.value, c.mode);
      break;
    case 4:
      write_as(base + c.offset, static_cast<std::uint32_t>(c.value), c.mode);
      break;
    case 2:
      write_as(base + c.offset, static_cast<std::uint16_t>(c.value), c.mode);
      break;
    default:
      write_as(base + c.offset, static_cast<std::uint8_t>(c.value), c.mode);
  }
}

/// Worker crc::worker_id()'s part of the program, inside a task: its writes, its increments and its
/// checked reads, phase by phase. Returns how many reads differed from plain memory; the first one is
/// described in `first`.
inline int run_worker(const std::vector<Phase>& program, std::uint8_t* data, std::uint64_t* counters,
                      std::size_t page, std::string& first) {
  const int w = crc::worker_id();
  int divergences = 0;
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
      const bool read_only = p.read_only[off / page] && (off / 7) % 2 == 0;
      const std::uint8_t got = read_only ? crc::read_only(&data[off]) : crc::read(&data[off]);
      if (got != expected && divergences++ == 0)
        first = fmt::format("phase {}, worker {}: byte {} (page {}) read {:#x}, plain memory has {:#x}", ph,
                            w, off, off / page, got, expected);
    }
    crc::barrier();
  }
  return divergences;
}

}  // namespace crc_model
