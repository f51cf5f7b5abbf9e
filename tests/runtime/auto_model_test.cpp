// HDSM_PROTOCOL=auto, the default: each device gets host-mapped where it reports memory shared with
// the host, rolling elsewhere; an explicit protocol wins; a device that claims shared memory but
// refuses to map it falls back to rolling with a one-line notice; a runtime whose devices get
// different models routes each object to its device's model and refuses calls that mix them.
#include <hdsm/hdsm.hpp>

#include "runtime/internal.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <typeinfo>

namespace {

using hdsm::detail::model_choices;

const hdsm::Kernel& add_one() {
  static const hdsm::Kernel k = [] {
    auto kernel = hdsm::per_thread("auto_add_one", [](const hdsm::Thread& t, int* x, std::uint64_t n) {
      if (const auto i = t.global_x(); i < n) x[i] += 1;
    });
    kernel.opencl_source = R"(
      __kernel void auto_add_one(__global int* x, ulong n) {
        const size_t i = get_global_id(0);
        if (i < n) x[i] += 1;
      })";
    return kernel;
  }();
  return k;
}

const hdsm::Kernel& copy_kernel() {
  static const hdsm::Kernel k = [] {
    auto kernel =
        hdsm::per_thread("auto_copy", [](const hdsm::Thread& t, const int* x, int* y, std::uint64_t n) {
          if (const auto i = t.global_x(); i < n) y[i] = x[i];
        });
    kernel.opencl_source = R"(
      __kernel void auto_copy(__global const int* x, __global int* y, ulong n) {
        const size_t i = get_global_id(0);
        if (i < n) y[i] = x[i];
      })";
    return kernel;
  }();
  return k;
}

std::uint64_t bytes_moved(const hdsm::Stats& s) {
  std::uint64_t total = 0;
  for (const auto& r : s.routes) total += r.bytes;
  return total;
}

// Runs add_one twice over a fresh object of `device` and checks the result on the host.
void add_twice(hdsm::Runtime& rt, std::size_t device) {
  const std::uint64_t n = 50000;
  int* x = rt.alloc<int>(n, device);
  for (std::uint64_t i = 0; i < n; ++i) x[i] = static_cast<int>(i);
  rt.call(add_one(), hdsm::cover(n), x, n);
  rt.call(add_one(), hdsm::cover(n), x, n);
  rt.sync();
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], static_cast<int>(i) + 2) << i;
  rt.free(x);
}

TEST(AutoModel, DiscreteSimDevicesAreRollingAndCopy) {
  auto config = hdsm::test::fast_sim_config("auto");
  hdsm::Runtime rt(config);
  const auto choices = model_choices(rt);
  ASSERT_EQ(choices.size(), rt.devices().size());
  for (const auto& c : choices) {
    EXPECT_EQ(c.model, "rolling");
    EXPECT_NE(c.why.find("auto"), std::string::npos) << c.why;
  }
  add_twice(rt, 0);
  EXPECT_GT(bytes_moved(rt.stats()), 0u) << "a discrete device's objects are copied";
  EXPECT_GT(rt.stats().read_faults + rt.stats().write_faults, 0u);
}

TEST(AutoModel, IntegratedSimDevicesAreHostMappedWithNoCopyAndNoFault) {
  auto config = hdsm::test::fast_sim_config("auto");
  config.set("HDSM_SIM_KIND", "integrated");
  hdsm::Runtime rt(config);
  for (const auto& c : model_choices(rt)) {
    EXPECT_EQ(c.model, "host-mapped");
    EXPECT_NE(c.why.find("HDSM_SIM_KIND=integrated"), std::string::npos) << c.why;
  }
  EXPECT_TRUE(rt.default_device().properties().shares_host_memory);
  add_twice(rt, 0);
  add_twice(rt, 1);
  const hdsm::Stats s = rt.stats();
  EXPECT_EQ(bytes_moved(s), 0u);
  EXPECT_EQ(s.read_faults + s.write_faults, 0u);
  EXPECT_EQ(s.kernel_launches, 4u);
}

TEST(AutoModel, AnExplicitProtocolWins) {
  for (const char* protocol : {"batch", "lazy", "rolling"}) {
    auto config = hdsm::test::fast_sim_config(protocol);
    config.set("HDSM_SIM_KIND", "integrated");
    hdsm::Runtime rt(config);
    for (const auto& c : model_choices(rt)) EXPECT_EQ(c.model, protocol);
    add_twice(rt, 0);
    EXPECT_GT(bytes_moved(rt.stats()), 0u) << protocol;
  }
  auto config = hdsm::test::fast_sim_config("host-mapped");  // on a discrete device too
  hdsm::Runtime rt(config);
  for (const auto& c : model_choices(rt)) EXPECT_EQ(c.model, "host-mapped");
  add_twice(rt, 1);
  EXPECT_EQ(bytes_moved(rt.stats()), 0u);
}

TEST(AutoModel, ADeviceThatCannotMapFallsBackToCopyingWithOneNotice) {
  auto config = hdsm::test::fast_sim_config("auto");
  config.set("HDSM_SIM_KIND", "integrated-unmappable").set("HDSM_SIM_DEVICES", "1");
  hdsm::Runtime rt(config);
  EXPECT_EQ(model_choices(rt)[0].model, "host-mapped") << "the device claims shared memory";
  testing::internal::CaptureStderr();
  add_twice(rt, 0);
  add_twice(rt, 0);
  const std::string notice = testing::internal::GetCapturedStderr();
  EXPECT_NE(notice.find("sim0"), std::string::npos) << notice;
  EXPECT_NE(notice.find("integrated-unmappable"), std::string::npos) << "names the error: " << notice;
  EXPECT_EQ(std::count(notice.begin(), notice.end(), '\n'), 1) << "one line, once: " << notice;
  const auto choice = model_choices(rt)[0];
  EXPECT_EQ(choice.model, "rolling");
  EXPECT_NE(choice.why.find("fell back"), std::string::npos) << choice.why;
  EXPECT_GT(bytes_moved(rt.stats()), 0u) << "its objects are copied now";
}

// An object too large for the device (here: for the host memory it would live in) is that object's
// OutOfDeviceMemory: the device still maps host memory, and auto goes on mapping. Before, any error of
// the mapping counted as a platform that refuses to map, and one oversized allocation switched the
// device to copying for good (its next objects could not share a call with the earlier ones).
TEST(AutoModel, AnObjectTooLargeIsOutOfMemoryAndTheDeviceStaysHostMapped) {
  auto config = hdsm::test::fast_sim_config("auto");
  config.set("HDSM_SIM_KIND", "integrated").set("HDSM_SIM_DEVICES", "1");
  hdsm::Runtime rt(config);
  testing::internal::CaptureStderr();
  EXPECT_THROW((void)rt.alloc(std::size_t{1} << 62), hdsm::OutOfDeviceMemory);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "no fallback notice";
  EXPECT_EQ(model_choices(rt)[0].model, "host-mapped");
  add_twice(rt, 0);
  EXPECT_EQ(bytes_moved(rt.stats()), 0u) << "still mapped, not copied";
}

TEST(AutoModel, ExplicitHostMappedOnADeviceThatCannotMapIsAnError) {
  auto config = hdsm::test::fast_sim_config("host-mapped");
  config.set("HDSM_SIM_KIND", "integrated-unmappable");
  hdsm::Runtime rt(config);
  try {
    rt.alloc(4096);
    FAIL() << "alloc succeeded on a device that refuses host mappings";
  } catch (const hdsm::Unsupported& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("sim0"), std::string::npos) << what;
    EXPECT_NE(what.find("map_host"), std::string::npos) << what;
    EXPECT_EQ(typeid(e), typeid(hdsm::Unsupported)) << "the public type, not an internal one";
  }
}

TEST(AutoModel, HostMappedObjectsReachEveryDevice) {
  auto config = hdsm::test::fast_sim_config("auto");
  config.set("HDSM_SIM_KIND", "integrated").set("HDSM_SIM_DEVICES", "3");
  hdsm::Runtime rt(config);
  const std::uint64_t n = 1000;
  int* x = rt.alloc<int>(n, 0);
  int* y = rt.alloc<int>(n, 2);
  for (std::uint64_t i = 0; i < n; ++i) x[i] = static_cast<int>(3 * i);
  rt.call(copy_kernel(), hdsm::cover(n), hdsm::in(x), hdsm::out(y), n);  // on device 0, y mapped there
  rt.call(add_one(), hdsm::cover(n), y, n);                              // on device 2
  rt.sync();
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], static_cast<int>(3 * i) + 1) << i;
  std::uint64_t launched = 0;
  for (const auto& d : rt.stats().devices) {
    if (d.name == "sim1") {
      EXPECT_EQ(d.kernel_launches, 0u);
    }
    launched += d.kernel_launches;
  }
  EXPECT_EQ(launched, 2u);
  rt.free(x);
  rt.free(y);
}

// sim0 and sim1 discrete (rolling), opencl0 a CPU device (host-mapped): one runtime, two models.
TEST(AutoModel, OpenclCpuDeviceIsHostMappedBesideDiscreteSimDevices) {
  if (hdsm::test::opencl_only_without_lsan()) GTEST_SKIP() << "OpenCL under ASan runs without LeakSanitizer";
  auto config = hdsm::test::fast_sim_config("auto");
  config.set("HDSM_DEVICE", "opencl").set("HDSM_OPENCL_MEMORY", "64MiB");
  std::unique_ptr<hdsm::Runtime> rt;
  try {
    rt = std::make_unique<hdsm::Runtime>(config);
  } catch (const hdsm::NoDevice& e) {
    GTEST_SKIP() << "no OpenCL device here: " << e.what();
  }
  const auto choices = model_choices(*rt);
  const std::size_t cl = rt->default_device().properties().index;
  EXPECT_EQ(choices[0].model, "rolling");
  if (!rt->default_device().properties().shares_host_memory) GTEST_SKIP() << "the OpenCL device is discrete";
  EXPECT_EQ(choices[cl].model, "host-mapped") << choices[cl].why;
  const hdsm::Stats before = rt->stats();
  add_twice(*rt, cl);
  EXPECT_EQ(bytes_moved(rt->stats()), bytes_moved(before)) << "host-mapped objects move nothing";
  add_twice(*rt, 0);  // a discrete sim device's object, copied
  EXPECT_GT(bytes_moved(rt->stats()), 0u);

  const std::uint64_t n = 64;
  int* mapped = rt->alloc<int>(n, cl);
  int* copied = rt->alloc<int>(n, 0);
  try {
    rt->call(copy_kernel(), hdsm::cover(n), hdsm::in(mapped), hdsm::out(copied), n);
    FAIL() << "a call mixing objects of two models was accepted";
  } catch (const hdsm::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("host-mapped"), std::string::npos) << what;
    EXPECT_NE(what.find("hdsm info"), std::string::npos) << what;
  }
  rt->memcpy(copied, mapped, n * sizeof(int));  // bulk memory takes both
  rt->free(mapped);
  rt->free(copied);
}

// memcpy_async between a rolling object (a discrete sim device's, valid on the device only) and a
// host-mapped one (the OpenCL CPU device's) returns with the device transfer under way; the
// host-mapped object's model orders what comes after it: a call on that object waits for the copy,
// and so does its free (a new object at its address is not written by the copy). Before, the direct
// model knew nothing of the copy: the call read zeros, and the copy wrote into the next object.
class AutoMixed : public ::testing::Test {
 protected:
  void SetUp() override {
    if (hdsm::test::opencl_only_without_lsan())
      GTEST_SKIP() << "OpenCL under ASan runs without LeakSanitizer";
    auto config = hdsm::test::fast_sim_config("auto");
    // A slow link: the sim device's transfers take 50 ms each.
    config.set("HDSM_DEVICE", "opencl")
        .set("HDSM_OPENCL_MEMORY", "64MiB")
        .set("HDSM_SIM_LATENCY_US", "50000");
    try {
      rt_ = std::make_unique<hdsm::Runtime>(config);
    } catch (const hdsm::NoDevice& e) {
      GTEST_SKIP() << "no OpenCL device here: " << e.what();
    }
    cl_ = rt_->default_device().properties().index;
    if (model_choices(*rt_)[cl_].model != "host-mapped") GTEST_SKIP() << "the OpenCL device is discrete";
  }
  // An object of sim0 whose every element is `value` on the device alone.
  int* device_only(std::uint64_t n, int value) {
    int* x = rt_->alloc<int>(n, 0);
    for (std::uint64_t i = 0; i < n; ++i) x[i] = value - 1;
    rt_->call(add_one(), hdsm::cover(n), x, n);
    rt_->sync();
    return x;
  }
  std::unique_ptr<hdsm::Runtime> rt_;
  std::size_t cl_ = 0;
};

TEST_F(AutoMixed, ACallOnAHostMappedObjectWaitsForAnAsyncCopyIntoIt) {
  const std::uint64_t n = 4096;
  int* src = device_only(n, 5);
  int* mapped = rt_->alloc<int>(n, cl_);
  int* out = rt_->alloc<int>(n, cl_);
  rt_->call(copy_kernel(), hdsm::cover(n), hdsm::in(mapped), hdsm::out(out), n);  // builds the program
  rt_->sync();
  const hdsm::Event copied = rt_->memcpy_async(mapped, src, n * sizeof(int));
  EXPECT_FALSE(copied.query()) << "the copy is still under way (else this test shows nothing)";
  rt_->call(copy_kernel(), hdsm::cover(n), hdsm::in(mapped), hdsm::out(out), n);
  rt_->sync();
  copied.wait();
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 5) << i;
  // The other way: a call that writes the host-mapped source waits until the copy has read it.
  int* dst = rt_->alloc<int>(n, 0);
  for (std::uint64_t i = 0; i < n; ++i) mapped[i] = 7;
  rt_->call(add_one(), hdsm::cover(n), dst, n);  // dst valid on sim0 alone: the copy goes up to it
  rt_->sync();
  const hdsm::Event up = rt_->memcpy_async(dst, mapped, n * sizeof(int));
  rt_->call(add_one(), hdsm::cover(n), mapped, n);
  rt_->sync();
  up.wait();
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(dst[i], 7) << i;
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(mapped[i], 8) << i;
  for (int* p : {src, mapped, out, dst}) rt_->free(p);
}

TEST_F(AutoMixed, FreeOfAHostMappedObjectWaitsForAnAsyncCopy) {
  const std::uint64_t n = 4096;
  int* src = device_only(n, 3);
  int* mapped = rt_->alloc<int>(n, cl_);
  const hdsm::Event copied = rt_->memcpy_async(mapped, src, n * sizeof(int));
  EXPECT_FALSE(copied.query()) << "the copy is still under way (else this test shows nothing)";
  rt_->free(mapped);
  EXPECT_TRUE(copied.query()) << "free waited for the copy into the object";
  int* again = rt_->alloc<int>(n, cl_);  // often at the freed address
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(again[i], 0) << i;
  rt_->free(again);
  rt_->free(src);
}

}  // namespace
