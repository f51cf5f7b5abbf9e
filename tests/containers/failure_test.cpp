// Containers when device work fails or user code throws: every failure of work that wrote a
// container is reported by that container, once each, and to no other container; a view that an
// exception unwinds and a refused erase change nothing; elements passed by reference survive the
// resize they cause; threads that only read one container do not trip each other.
#include <hdsm/hdsm.hpp>

#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

using hdsm::Access;
using hdsm::Vector;

hdsm::Config sim(unsigned devices = 2, const char* memory = "64MiB") {
  return hdsm::test::fast_sim_config("rolling", "4KiB", memory)
      .set("HDSM_SIM_DEVICES", std::to_string(devices));
}

hdsm::ContainerOptions on(hdsm::Runtime& rt, hdsm::Mechanism m = hdsm::Mechanism::improved) {
  return {&rt, false, m};
}

/// p[i] = tag, but thread 0 throws.
const hdsm::Kernel& failing_writer() {
  static const hdsm::Kernel k =
      hdsm::per_thread("failing_writer", [](const hdsm::Thread& t, int* p, int tag) {
        if (t.global_x() == 0) throw std::runtime_error("failing_writer " + std::to_string(tag) + " failed");
        p[t.global_x()] = tag;
      });
  return k;
}

/// p[i] = value
const hdsm::Kernel& fill_int() {
  static const hdsm::Kernel k =
      hdsm::per_thread("fill_int", [](const hdsm::Thread& t, int* p, int value) { p[t.global_x()] = value; });
  return k;
}

const hdsm::Kernel& reader() {
  static const hdsm::Kernel k = hdsm::per_thread("reader", [](const hdsm::Thread&, const int*) {});
  return k;
}

const hdsm::Kernel& copy_kernel() {
  static const hdsm::Kernel k =
      hdsm::per_thread("copy", [](const hdsm::Thread& t, const int* in, int* out, std::uint64_t n) {
        if (t.global_x() < n) out[t.global_x()] = in[t.global_x()];
      });
  return k;
}

TEST(ContainerFailures, WorkThatFailedBeforeItsViewWasDoneIsStillReported) {
  // Skeletons and calls drop the kernel's event: when the work has failed by the time its operands
  // are finished, the container is the only one left to report it.
  hdsm::Runtime rt(sim(1));
  Vector<int> v(64, 7, on(rt));
  hdsm::DeviceView view = v.device_view(0, 0, 64, Access::write);
  const hdsm::KernelArg args[] = {view.argument(), hdsm::KernelArg::value(1)};
  view.queue().launch(failing_writer(), hdsm::cover(64), args);
  const hdsm::Event done = view.queue().record();
  EXPECT_THROW(done.wait(), hdsm::KernelFailure);  // complete, and failed
  view.done(done);
  EXPECT_THROW((void)static_cast<int>(v[0]), hdsm::KernelFailure);
}

// Under the none mechanism done() waits for the view's work: work that failed is still reported
// once, by the next access, not by done() as well.
TEST(ContainerFailures, UnderTheNoneMechanismAViewsFailedWorkIsReportedOnce) {
  hdsm::Runtime rt(sim(1));
  Vector<int> v(64, 7, on(rt, hdsm::Mechanism::none));
  hdsm::DeviceView view = v.device_view(0, 0, 64, Access::write);
  const hdsm::KernelArg args[] = {view.argument(), hdsm::KernelArg::value(1)};
  view.queue().launch(failing_writer(), hdsm::cover(64), args);
  EXPECT_NO_THROW(view.done(view.queue().record()));
  int reports = 0;
  for (int k = 0; k < 3; ++k) {
    try {
      (void)static_cast<int>(v[0]);
    } catch (const hdsm::KernelFailure& e) {
      ++reports;
      EXPECT_NE(std::string(e.what()).find("failing_writer 1 failed"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(reports, 1);
}

TEST(ContainerFailures, UpdateHostFlushAndInvalidateReportAFailedWriter) {
  hdsm::Runtime rt(sim(1));
  for (const int how : {0, 1, 2}) {
    Vector<int> v(1024, 7, on(rt));
    (void)hdsm::launch(0, failing_writer(), hdsm::cover(1024), hdsm::out(v), 1);
    const auto act = [&] {
      if (how == 0) v.update_host();
      if (how == 1) v.flush();
      if (how == 2) v.invalidate_device_copies();
    };
    // Before, the write-back of what the failed kernel left became the host's data, with no error.
    EXPECT_THROW(act(), hdsm::KernelFailure) << how;
  }
}

TEST(ContainerFailures, EachFailedCallIsReportedOnceByTheAccessThatConflictsWithIt) {
  hdsm::Runtime rt(sim(2));
  Vector<int> v(20, 7, on(rt));
  (void)hdsm::launch(0, failing_writer(), hdsm::cover(10), hdsm::out(v.range(0, 10)), 1);
  (void)hdsm::launch(1, failing_writer(), hdsm::cover(10), hdsm::out(v.range(10, 10)), 2);
  try {
    (void)static_cast<int>(v[0]);
    FAIL() << "the first call's failure was not reported";
  } catch (const hdsm::KernelFailure& e) {
    EXPECT_NE(std::string(e.what()).find("failing_writer 1 failed"), std::string::npos) << e.what();
  }
  try {
    (void)static_cast<int>(v[10]);
    FAIL() << "the second call's failure was forgotten with the first's";
  } catch (const hdsm::KernelFailure& e) {
    EXPECT_NE(std::string(e.what()).find("failing_writer 2 failed"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW((void)static_cast<int>(v[0])) << "reported once";
}

// The none mechanism waits for each call: the launch itself threw the failure, and the first access
// of what the call wrote threw it again.
TEST(ContainerFailures, UnderTheNoneMechanismAFailedCallIsReportedOnceToo) {
  hdsm::Runtime rt(sim(2));
  Vector<int> v(20, 7, on(rt, hdsm::Mechanism::none));
  int reports = 0;
  for (int k = 0; k < 3; ++k) {
    try {
      if (k == 0) (void)hdsm::launch(1, failing_writer(), hdsm::cover(10), hdsm::out(v.range(0, 10)), 1);
      (void)static_cast<int>(v[0]);
    } catch (const hdsm::KernelFailure& e) {
      ++reports;
      EXPECT_NE(std::string(e.what()).find("failing_writer 1 failed"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(reports, 1);
  EXPECT_EQ(v[15], 7);
}

TEST(ContainerFailures, AnEvictionForAnotherContainerDoesNotThrowAFailureThatIsNotItsOwn) {
  hdsm::Runtime rt(sim(1, "1MiB"));
  const std::size_t n = 150 * 1024;  // 600 KiB each: one evicts the other
  Vector<int> x(n, 0, on(rt));
  Vector<int> y(n, 0, on(rt));
  (void)hdsm::launch(0, failing_writer(), hdsm::cover(n), hdsm::out(x), 1);
  for (int attempt = 0; attempt < 2; ++attempt)
    EXPECT_NO_THROW(hdsm::launch(0, reader(), hdsm::cover(n), hdsm::in(y)).wait()) << attempt;
  EXPECT_THROW((void)static_cast<int>(x[5]), hdsm::KernelFailure) << "x's failure is x's to report";
}

TEST(ContainerFailures, AWriteViewThatAnExceptionUnwindsCommitsNothing) {
  hdsm::Runtime rt(sim(1));
  Vector<int> v(1024, 7, on(rt));
  try {
    const hdsm::DeviceView view = v.device_view(0, 0, 1024, Access::write);
    throw std::runtime_error("user code failed before its kernel");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(v[0], 7) << "the unfilled device copy became the container's data";
  EXPECT_EQ(v[1023], 7);
  // A view that ends without done() and without an exception still commits what was enqueued.
  {
    const hdsm::DeviceView view = v.device_view(0, 0, 1024, Access::write);
    const hdsm::KernelArg args[] = {view.argument(), hdsm::KernelArg::value(5)};
    view.queue().launch(fill_int(), hdsm::cover(1024), args);
  }
  EXPECT_EQ(v[0], 5);
  EXPECT_EQ(v[1023], 5);
}

TEST(ContainerFailures, AnEraseRefusedForAnOpenViewMovesNoElement) {
  hdsm::Runtime rt(sim(1));
  Vector<int> v({0, 1, 2, 3, 4, 5, 6, 7}, on(rt));
  {
    const hdsm::DeviceView view = v.device_view(0, 0, 8, Access::read);
    EXPECT_THROW(v.erase(v.begin(), v.begin() + 1), hdsm::InvalidArgument);
  }
  ASSERT_EQ(v.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(v[static_cast<std::size_t>(i)], i);
  v.erase(v.begin(), v.begin() + 1);
  EXPECT_EQ(v.size(), 7u);
  EXPECT_EQ(v[0], 1);
}

TEST(ContainerFailures, AnElementPassedByReferenceSurvivesTheResizeItCauses) {
  hdsm::Runtime rt(sim(1));
  Vector<long> v(4, 42L, on(rt));
  const Vector<long>& cv = v;
  for (int i = 0; i < 40; ++i) v.push_back(cv.front());  // reallocates several times
  v.resize(100, cv.back());
  for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], 42L) << i;
}

TEST(ContainerFailures, ThreadsThatOnlyReadOneContainerUnderTheNoneMechanismDoNotTripEachOther) {
  hdsm::Runtime rt(sim(2));
  const std::size_t n = 1 << 14;
  Vector<int> shared(n, 1, on(rt, hdsm::Mechanism::none));
  std::atomic<int> errors{0};
  std::string first;
  std::atomic<bool> told{false};
  const auto work = [&](unsigned device) {
    Vector<int> mine(n, 0, on(rt, hdsm::Mechanism::none));
    for (int k = 0; k < 200; ++k) {
      try {
        hdsm::launch(device, copy_kernel(), hdsm::cover(n), hdsm::in(shared), hdsm::out(mine),
                     std::uint64_t{n});
      } catch (const std::exception& e) {
        errors.fetch_add(1);
        if (!told.exchange(true)) first = e.what();
      }
    }
    if (mine[n - 1] != 1) errors.fetch_add(1);
  };
  std::thread a(work, 0u);
  std::thread b(work, 1u);
  a.join();
  b.join();
  EXPECT_EQ(errors.load(), 0) << first;
  EXPECT_EQ(shared.core().device_copies(), 0u) << "the none mechanism keeps no copy after the calls";
}

}  // namespace
