// A skeleton call whose operands do not fit changes nothing: every part's operands, on every device,
// and both kernels of a two-kernel call (Scan; MapOverlap2D on OpenCL) are held before the first
// kernel runs, so OutOfDeviceMemory leaves every output as it was (before, the parts started first, or
// the first kernel, had written theirs: an in-place Map applied to half its elements, a Scan left
// per-chunk sums). The same call succeeds once the memory is free, and the held copies go.
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "skeletons/opencl_runtime.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

HDSM_USER_FUNCTION(oom_inc, long, (long x), { return x + 1; })
HDSM_USER_FUNCTION(oom_add, long, (long a, long b), { return a + b; })
HDSM_USER_FUNCTION(oom_sum3, long, (const long* w), { return w[-1] + w[0] + w[1]; })
HDSM_USER_FUNCTION(oom_pick, long, (HDSM_GLOBAL const long* a, long x, long n),
                   { return x + a[(x % n + n) % n]; })
HDSM_USER_FUNCTION(oom_cross, long, (const long* w, long stride),
                   { return w[-stride] + w[stride] + w[-1] + w[1] + 1; })

constexpr std::size_t kMemory = 1 << 20;  // each sim device's
constexpr std::size_t kN = 20'000;        // 160 KB a vector
constexpr long kOld = -7;

// Two sim devices of 1 MiB; device 1 all but full with a copy an open view pins (never evicted).
struct TwoDevices {
  hdsm::Runtime rt{hdsm::test::fast_sim_config()
                       .set("HDSM_SIM_DEVICES", "2")
                       .set("HDSM_SIM_MEMORY", std::to_string(kMemory))};
  hdsm::Vector<char> blocker{kMemory - (64 << 10), hdsm::ContainerOptions{&rt}};
  std::unique_ptr<hdsm::DeviceView> view{
      new hdsm::DeviceView(blocker.device_view(1, 0, blocker.size(), hdsm::Access::read))};
  hdsm::Vector<long> in{kN, hdsm::ContainerOptions{&rt}};
  hdsm::Vector<long> out{kN, kOld, hdsm::ContainerOptions{&rt}};
  TwoDevices() {
    for (std::size_t i = 0; i < kN; ++i) in[i] = static_cast<long>(i % 97);
  }
};

std::size_t changed(const hdsm::Vector<long>& v, const std::vector<long>& before) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < v.size(); ++i) n += v[i] != before[i] ? 1 : 0;
  return n;
}

std::vector<long> contents(const hdsm::Vector<long>& v) { return {v.begin(), v.end()}; }

// `call` on devices 0 and 1 with device 1 full: OutOfDeviceMemory, and `in` and `out` as they were;
// with device 1 free again, the call gives `expect(in)`.
void check_nothing_changes(
    const std::function<void(TwoDevices&)>& call,
    const std::function<std::vector<long>(const std::vector<long>&, const std::vector<long>&)>& expect) {
  TwoDevices d;
  const std::vector<long> in = contents(d.in), out = contents(d.out);
  EXPECT_THROW(call(d), hdsm::OutOfDeviceMemory);
  EXPECT_EQ(changed(d.out, out), 0U) << "elements of the output the failed call wrote";
  EXPECT_EQ(changed(d.in, in), 0U) << "elements of the input the failed call wrote";
  d.view.reset();
  call(d);
  EXPECT_EQ(contents(d.out), expect(in, out));
}

TEST(SkeletonOutOfMemory, AnInPlaceMapOverTwoDevicesChangesNothing) {
  check_nothing_changes(
      [](TwoDevices& d) {
        hdsm::Map<oom_inc> inc;
        inc.devices({0, 1})(d.out, d.out);
      },
      [](const std::vector<long>&, std::vector<long> out) {
        for (long& x : out) ++x;
        return out;
      });
}

TEST(SkeletonOutOfMemory, AScanOverTwoDevicesChangesNothing) {
  check_nothing_changes(
      [](TwoDevices& d) {
        hdsm::Scan<oom_add> scan;
        scan.devices({0, 1})(d.out, d.in);
      },
      [](const std::vector<long>& in, const std::vector<long>&) {
        std::vector<long> r(in.size());
        long acc = 0;
        for (std::size_t i = 0; i < in.size(); ++i) r[i] = acc += in[i];
        return r;
      });
}

TEST(SkeletonOutOfMemory, AMapOverlapOverTwoDevicesChangesNothing) {
  check_nothing_changes(
      [](TwoDevices& d) {
        hdsm::MapOverlap<oom_sum3> mo;
        mo.overlap(1).edge(hdsm::Edge::cyclic).devices({0, 1})(d.out, d.in);
      },
      [](const std::vector<long>& in, const std::vector<long>&) {
        const std::size_t n = in.size();
        std::vector<long> r(n);
        for (std::size_t i = 0; i < n; ++i) r[i] = in[(i + n - 1) % n] + in[i] + in[(i + 1) % n];
        return r;
      });
}

TEST(SkeletonOutOfMemory, AMapArrayOverTwoDevicesChangesNothing) {
  check_nothing_changes(
      [](TwoDevices& d) {
        hdsm::MapArray<oom_pick> ma;
        ma.devices({0, 1})(d.out, d.in, d.in, static_cast<long>(kN));
      },
      [](const std::vector<long>& in, const std::vector<long>&) {
        std::vector<long> r(in.size());
        for (std::size_t i = 0; i < in.size(); ++i)
          r[i] = in[i] + in[static_cast<std::size_t>(in[i]) % in.size()];
        return r;
      });
}

TEST(SkeletonOutOfMemory, AReduceOfRowsOverTwoDevicesChangesNothing) {
  check_nothing_changes(
      [](TwoDevices& d) {
        // The input as 2000 rows of 10.
        hdsm::Matrix<long> m(kN / 10, 10, hdsm::ContainerOptions{&d.rt});
        for (std::size_t i = 0; i < kN; ++i) m.at(i / 10, i % 10) = d.in[i];
        hdsm::Vector<long> rows(kN / 10, kOld, hdsm::ContainerOptions{&d.rt});
        hdsm::Reduce<oom_add> sum;
        std::exception_ptr error;
        try {
          sum.devices({0, 1}).rows(rows, m);
        } catch (...) {
          error = std::current_exception();
        }
        // What the call left in the output, in out's first elements, for the checks.
        for (std::size_t i = 0; i < rows.size(); ++i) d.out[i] = rows[i];
        if (error) std::rethrow_exception(error);
      },
      [](const std::vector<long>& in, std::vector<long> out) {
        for (std::size_t r = 0; r < kN / 10; ++r) {
          out[r] = 0;
          for (std::size_t j = 0; j < 10; ++j) out[r] += in[r * 10 + j];
        }
        return out;
      });
}

// The held copies go with the call: under the none mechanism no device copy is left after it (the
// launches could not free what the call held), and results are right.
TEST(SkeletonOutOfMemory, HeldCopiesOfTheNoneMechanismGoAfterTheCall) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  const hdsm::ContainerOptions none{&rt, false, hdsm::Mechanism::none};
  hdsm::Vector<long> in(kN, 1L, none), out(kN, kOld, none);
  hdsm::Scan<oom_add> scan;
  scan.devices({0, 1})(out, in);
  EXPECT_EQ(out.core().device_copies(), 0U);
  EXPECT_EQ(in.core().device_copies(), 0U);
  for (std::size_t i = 0; i < kN; ++i) ASSERT_EQ(out[i], static_cast<long>(i + 1)) << i;
  hdsm::Map<oom_inc> inc;
  inc.devices({0, 1})(out, out);
  EXPECT_EQ(out.core().device_copies(), 0U);
  EXPECT_EQ(out[kN - 1], static_cast<long>(kN + 1));
}

// MapOverlap2D on one OpenCL device runs two kernels: the interior, then the frame, which also reads
// the halo rows. With device memory for the interior's operands but not for the halos, the frame's
// allocation failed after the interior kernel had written the output (57,072 of 63,000 elements).
TEST(SkeletonOutOfMemory, AMapOverlap2DOfTwoKernelsOnOpenclChangesNothing) {
  std::string why;
  const std::unique_ptr<hdsm::Runtime> rt =
      hdsm::test::opencl_runtime(why, hdsm::Config::defaults().set("HDSM_OPENCL_MEMORY", "1MiB"));
  if (!rt) GTEST_SKIP() << why;
  const std::size_t rows = 180, cols = 350;  // in and out: 1,008,000 B of 1 MiB; the halos do not fit
  hdsm::Matrix<long> in(rows, cols, 1L, hdsm::ContainerOptions{rt.get()});
  hdsm::Matrix<long> out(rows, cols, kOld, hdsm::ContainerOptions{rt.get()});
  hdsm::MapOverlap2D<oom_cross> st;
  st.overlap(8, 1).edge(hdsm::Edge::cyclic);
  EXPECT_THROW(st(out, in), hdsm::OutOfDeviceMemory);
  std::size_t written = 0;
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) written += out.at(i, j) != kOld ? 1 : 0;
  EXPECT_EQ(written, 0U) << "elements of the output the failed call wrote";
  // With a radius whose halos fit, the same two kernels run.
  st.overlap(1, 1)(out, in);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) ASSERT_EQ(out.at(i, j), 5) << i << ", " << j;
}

}  // namespace
