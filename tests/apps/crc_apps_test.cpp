// The CRC applications (STREAM, jacobi, md, EP), plain and optimized, on 1 to 4 worker threads and
// at several page sizes, against their serial references; the OpenMP versions likewise.
#include "apps/crc_apps.hpp"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>
#include <tuple>
#include <vector>

namespace {

namespace apps = hdsm::apps;
namespace crc_apps = hdsm::apps::crc_apps;

using Param = std::tuple<std::string, int, bool>;  // app, workers, optimized

class CrcApps : public ::testing::TestWithParam<Param> {};

TEST_P(CrcApps, MatchTheReference) {
  const auto& [name, workers, optimized] = GetParam();
  const crc_apps::CrcApp* app = crc_apps::find_crc_app(name);
  ASSERT_NE(app, nullptr);
  const apps::Output want = app->run_reference(apps::Scale::test);
  // The optimized versions localize their read-only and single-writer pages: in place, and copied
  // through the local store.
  for (const bool zero_copy : optimized ? std::vector<bool>{true, false} : std::vector<bool>{true})
    for (const std::size_t page : {std::size_t{256}, std::size_t{4096}}) {
      hdsm::crc::Options o;
      o.workers = workers;
      o.page_size = page;
      o.local_store = 64 << 10;
      o.shared_bytes = 64 << 20;
      o.zero_copy = zero_copy;
      hdsm::crc::Runtime rt(o);
      const apps::Output got = app->run(
          rt, optimized ? crc_apps::Version::optimized : crc_apps::Version::plain, apps::Scale::test);
      EXPECT_EQ(apps::compare(got, want, app->tolerance), "")
          << name << " page " << page << (zero_copy ? "" : ", zero copy off");
      EXPECT_EQ(rt.page_size(), page);  // the optimized version restores it
      const hdsm::crc::Stats s = rt.stats();
      EXPECT_EQ(s.regions, 1u);
      if (optimized && name == "stream") {
        EXPECT_EQ(s.read_misses, 0u);  // everything is read-only or single-writer
        EXPECT_EQ(s.write_faults, 0u);
        // ThreadSanitizer builds have nothing in place (every copy of a shared page is the home's).
#if defined(__SANITIZE_THREAD__)
        const bool in_place = false;
#else
        const bool in_place = zero_copy;
#endif
        EXPECT_EQ(s.in_place != 0, in_place);
        EXPECT_EQ(s.direct_gets != 0, !in_place);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(All, CrcApps,
                         ::testing::Combine(::testing::Values("stream", "jacobi", "md", "ep", "is", "cg"),
                                            ::testing::Values(1, 2, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return fmt::format("{}_{}w_{}", std::get<0>(info.param), std::get<1>(info.param),
                                              std::get<2>(info.param) ? "optimized" : "plain");
                         });

// An optimized version in a local store too small for its page: a smaller page with four frames
// (before, the app's page was refused before it could shrink). STREAM's 16 KiB pages in 8 KiB
// stores: 2 KiB pages; 4 KiB stores: 1 KiB.
TEST(CrcAppsPageSize, ASmallLocalStoreTakesSmallerPagesForTheOptimizedVersions) {
  const crc_apps::CrcApp* app = crc_apps::find_crc_app("stream");
  ASSERT_NE(app, nullptr);
  const apps::Output want = app->run_reference(apps::Scale::test);
  for (const std::size_t store : {std::size_t{8} << 10, std::size_t{4} << 10}) {
    hdsm::crc::Options o;
    o.workers = 2;
    o.page_size = 1024;
    o.local_store = store;
    o.shared_bytes = 64 << 20;
    hdsm::crc::Runtime rt(o);
    EXPECT_EQ(crc_apps::set_optimized_page(rt, app->optimized_page_size), store / 4) << store;
    EXPECT_GE(rt.frames(), 4u);
    rt.page_size(1024);
    const apps::Output got = app->run(rt, crc_apps::Version::optimized, apps::Scale::test);
    EXPECT_EQ(apps::compare(got, want, app->tolerance), "") << store << " B store";
    EXPECT_EQ(rt.page_size(), 1024u);
  }
}

// CG builds NAS's matrix (makea), so classes S and W reproduce NAS's verification values (its
// tolerance, 1e-10 relative), and so does the CRC version on worker threads.
TEST(CrcAppsCg, ReproducesNasVerificationValues) {
  const crc_apps::CrcApp* cg = crc_apps::find_crc_app("cg");
  ASSERT_NE(cg, nullptr);
  const double class_s = 8.5971775078648, class_w = 10.362595087124;
  EXPECT_NEAR(cg->run_reference(apps::Scale::quick).values.at(0), class_s, 1e-10 * class_s);
  EXPECT_NEAR(cg->run_reference(apps::Scale::full).values.at(0), class_w, 1e-10 * class_w);
  // The optimized product's even row shares (1400 rows, 512 a page): on 2 workers page 0 lies inside
  // worker 0's share (single writer) and page 1 is split (the protocol); on 3 every page is split.
  for (const int workers : {2, 3}) {
    hdsm::crc::Options o;
    o.workers = workers;
    o.shared_bytes = 64 << 20;
    hdsm::crc::Runtime rt(o);
    EXPECT_NEAR(cg->run(rt, crc_apps::Version::optimized, apps::Scale::quick).values.at(0), class_s,
                1e-10 * class_s)
        << workers << " workers";
  }
}

TEST(CrcAppsOpenMp, MatchTheReference) {
#if defined(__SANITIZE_THREAD__)
  // libgomp is not built with ThreadSanitizer: it cannot see OpenMP's barriers and joins, and reports
  // every parallel loop's writes as races. The OpenMP versions are checked in the other presets.
  GTEST_SKIP() << "OpenMP under ThreadSanitizer (uninstrumented libgomp)";
#endif
  for (const crc_apps::CrcApp& app : crc_apps::crc_apps())
    for (const int threads : {1, 3})
      EXPECT_EQ(apps::compare(app.run_openmp(threads, apps::Scale::test),
                              app.run_reference(apps::Scale::test), app.tolerance),
                "")
          << app.name << " on " << threads << " threads";
}

}  // namespace

// md's optimized forces go in even shares (not whole pages): with 3 workers the pages at the shares'
// edges have two writers, which write them through the protocol, while the pages inside a share take
// the single-writer variant. A page written by two single writers would lose one's forces.
TEST(CrcAppsMd, EvenSharesMergeThePagesTwoWorkersShare) {
  const crc_apps::CrcApp* app = crc_apps::find_crc_app("md");
  ASSERT_NE(app, nullptr);
  const apps::Output want = app->run_reference(apps::Scale::test);
  for (const bool zero_copy : {true, false}) {
    hdsm::crc::Options o;
    o.workers = 3;
    o.page_size = 256;
    o.local_store = 64 << 10;
    o.shared_bytes = 64 << 20;
    o.zero_copy = zero_copy;
    hdsm::crc::Runtime rt(o);
    EXPECT_EQ(
        apps::compare(app->run(rt, crc_apps::Version::optimized, apps::Scale::test), want, app->tolerance),
        "")
        << (zero_copy ? "" : "zero copy off");
    EXPECT_GT(rt.stats().twins, 0u) << "pages with two writers";
  }
}

// The page buffer's target: no conflict misses (a set full while frames are free) for STREAM, jacobi
// and md. md on 3 workers with a 64 KiB local store of 256 B pages had 347 of them with two ways per
// frame (the smallest S with 4 S > N); with four ways per frame, none. (At full scale, 3 workers and
// 1 KiB pages in the default 256 KiB store: 127-183 a run before, none now.)
TEST(CrcAppsPageBuffer, MdHasNoConflictMisses) {
  const crc_apps::CrcApp* app = crc_apps::find_crc_app("md");
  ASSERT_NE(app, nullptr);
  hdsm::crc::Options o;
  o.workers = 3;
  o.page_size = 256;
  o.local_store = 64 << 10;
  hdsm::crc::Runtime rt(o);
  const apps::Output got = app->run(rt, crc_apps::Version::plain, apps::Scale::quick);
  EXPECT_EQ(apps::compare(got, app->run_reference(apps::Scale::quick), app->tolerance), "");
  EXPECT_GT(rt.stats().evictions, 0u) << "the working set must exceed the local store";
  EXPECT_EQ(rt.stats().conflict_misses, 0u);
}
