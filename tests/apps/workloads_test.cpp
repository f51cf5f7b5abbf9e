// The stencil (Fig. 9), vector addition (Fig. 11) and iterative sparse-read workloads compute their
// references under every protocol, and the stencil's CPU source introduction costs rolling-update a
// block where lazy-update moves the whole volume.
#include "apps/iterate.hpp"
#include "apps/stencil.hpp"
#include "apps/vecadd.hpp"
#include "support/test_support.hpp"

#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

namespace {

hdsm::Config workload_config(const std::string& protocol) {
  return hdsm::test::fast_sim_config(protocol, "4KiB", "256MiB");
}

class Workloads : public ::testing::TestWithParam<std::string> {};

TEST_P(Workloads, StencilMatchesReferenceAndWritesEveryOutput) {
  const hdsm::apps::StencilProblem p{40, 24, 16, 5, 2};
  const hdsm::apps::Output want = hdsm::apps::stencil_reference(p);
  const int fd = ::memfd_create("stencil output", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  hdsm::Runtime rt{workload_config(GetParam())};
  EXPECT_EQ(hdsm::apps::compare(hdsm::apps::stencil_adsm(rt, 0, p, fd), want, hdsm::apps::kStencilTolerance),
            "");
  EXPECT_EQ(hdsm::apps::compare(hdsm::apps::stencil_explicit(rt.device(0), p, fd), want,
                                hdsm::apps::kStencilTolerance),
            "");
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<std::size_t>(st.st_size),
            2 * 2 * p.points() * sizeof(float));  // 2 outputs, 2 versions
  ::close(fd);
  EXPECT_EQ(rt.device(0).memory_used(), 0u);
}

TEST_P(Workloads, VecaddMatchesReference) {
  hdsm::Runtime rt{workload_config(GetParam())};
  const std::size_t n = 50'000;
  const hdsm::apps::Output got = hdsm::apps::vecadd_adsm(rt, 0, n);
  EXPECT_EQ(got.values.at(0), 0.0) << "wrong elements";
  EXPECT_EQ(hdsm::apps::compare(got, hdsm::apps::vecadd_reference(n), 0), "");
}

TEST_P(Workloads, IterateMatchesReference) {
  hdsm::Runtime rt{workload_config(GetParam())};
  auto p = hdsm::apps::iterate_problem(hdsm::apps::Scale::test);
  for (const unsigned probes : {p.probes, 0u}) {  // with sparse reads after each sweep, and without
    p.probes = probes;
    const hdsm::apps::Output want = hdsm::apps::iterate_reference(p);
    ASSERT_EQ(want.values.size(), (probes != 0 ? p.steps : 0) + 16);
    EXPECT_EQ(hdsm::apps::compare(hdsm::apps::iterate_adsm(rt, 0, p), want, hdsm::apps::kIterateTolerance),
              "");
    EXPECT_EQ(hdsm::apps::compare(hdsm::apps::iterate_explicit(rt.device(0), p), want,
                                  hdsm::apps::kIterateTolerance),
              "");
  }
  EXPECT_EQ(rt.device(0).memory_used(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Protocols, Workloads, ::testing::Values("batch", "lazy", "rolling", "host-mapped"),
                         [](const auto& info) {
                           return info.param == "host-mapped" ? std::string("host_mapped") : info.param;
                         });

std::uint64_t moved(const hdsm::Runtime& rt) {
  return rt.stats().route(hdsm::Route::h2d).bytes + rt.stats().route(hdsm::Route::d2h).bytes;
}

TEST(StencilTraffic, RollingMovesOnlyTheSourceBlockPerStep) {
  const hdsm::apps::StencilProblem p{64, 64, 32, 6, 0};  // 512 KiB volumes, no output
  hdsm::Runtime lazy{workload_config("lazy")}, rolling{workload_config("rolling")};
  hdsm::apps::stencil_adsm(lazy, 0, p, -1);
  hdsm::apps::stencil_adsm(rolling, 0, p, -1);
  const std::uint64_t volume = p.points() * sizeof(float);
  // Lazy fetches and uploads the volume the source goes into; rolling one 4 KiB block each way
  // (plus the final sample the CPU reads).
  EXPECT_GE(moved(lazy), (p.steps - 1) * 2 * volume);
  EXPECT_LE(moved(rolling), p.steps * 2 * 4096 + volume);
}

}  // namespace
