// The randomized model test of centralized release consistency against plain memory, on threads:
// random data-race-free programs (model_program.hpp), run by the workers of a CRC runtime, must read
// what a sequentially consistent execution would. Page sizes from 128 B to 16 KiB, local stores of a
// few pages (so modified pages are evicted mid-phase). HDSM_MODEL_SEED and HDSM_MODEL_ITERATIONS
// (phases) replay or lengthen a run.
#include "crc/model_program.hpp"
#include "support/model_run.hpp"

#include <hdsm/crc.hpp>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace {

namespace crc = hdsm::crc;
using namespace crc_model;

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
  const std::vector<Phase> program = make_program(rng, c.workers, run.iterations(), c.page);

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
    std::string mine;
    const int d = run_worker(program, data, counters, c.page, mine);
    if (d != 0 && divergences.fetch_add(d) == 0) {
      std::lock_guard lock(first_mutex);
      first = mine;
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
