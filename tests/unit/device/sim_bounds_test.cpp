// HDSM_SIM_BOUNDS_CHECK: guard pages around sim allocations. Kernels that leave a buffer die of
// SIGSEGV with a message naming the kernel, the device and the offset; in-bounds work is unaffected.
#include "support/death_style.hpp"
#include "support/test_support.hpp"

#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

hdsm::Config bounds_config(const char* bounds_check) {
  auto c = hdsm::test::fast_sim_config();
  c.set("HDSM_SIM_POISON", "0").set("HDSM_SIM_BOUNDS_CHECK", bounds_check);
  return c;
}

// x[i] = v for i < n; callers pass an n past the end to overrun.
const hdsm::Kernel& fill() {
  static const hdsm::Kernel k =
      hdsm::per_thread("fill", [](const hdsm::Thread& t, int* x, std::uint64_t n, int v) {
        if (const auto i = t.global_x(); i < n) x[i] = v;
      });
  return k;
}

// out[0] = x[-1]: reads the int right before the buffer.
const hdsm::Kernel& read_before() {
  static const hdsm::Kernel k =
      hdsm::per_thread("read_before", [](const hdsm::Thread& t, const int* x, int* out) {
        if (t.global_x() == 0) out[0] = *(static_cast<const volatile int*>(x) - 1);
      });
  return k;
}

using hdsm::test::default_disposition_under_sanitizers;

// x86-64 tells reads from writes; elsewhere the message says "accessed".
constexpr const char* kWrote = "(wrote|accessed)";
constexpr const char* kRead = "(read|accessed)";

class SimBoundsDeathTest : public ::testing::Test {
 protected:
  hdsm::test::DeathTestStyle style_{"threadsafe"};
};

TEST_F(SimBoundsDeathTest, AdsmCallWritingOnePastTheEndDies) {
  EXPECT_EXIT(
      {
        default_disposition_under_sanitizers();
        hdsm::Runtime rt(bounds_config("1"));
        int* x = rt.alloc<int>(1024);
        rt.call(fill(), hdsm::cover(1025), x, std::uint64_t{1025}, 7);  // one element too many
        rt.sync();
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV),
      std::string("hdsm: kernel 'fill' on sim0 ") + kWrote +
          " device address 0x[0-9a-f]+: offset 4096 of a 4096-byte buffer, past the end "
          "\\(HDSM_SIM_BOUNDS_CHECK\\)");
}

// A raw Device/Queue launch (no shared objects) whose second kernel writes past a 64-byte buffer.
void raw_launch_overrun() {
  default_disposition_under_sanitizers();
  hdsm::Runtime rt(bounds_config("on"));
  hdsm::Device& device = rt.device(1);
  auto queue = device.create_queue();
  auto buffer = device.alloc(1000 * sizeof(int));
  auto exact = device.alloc(16 * sizeof(int));
  const hdsm::KernelArg in_bounds[] = {hdsm::KernelArg::buffer(buffer),
                                       hdsm::KernelArg::value(std::uint64_t{1000}),
                                       hdsm::KernelArg::value(1)};
  queue->launch(fill(), hdsm::cover(1000), in_bounds);
  queue->synchronize();
  const hdsm::KernelArg overrun[] = {hdsm::KernelArg::buffer(exact, 8 * sizeof(int)),
                                     hdsm::KernelArg::value(std::uint64_t{11}), hdsm::KernelArg::value(2)};
  queue->launch(fill(), hdsm::cover(11), overrun);  // elements 8..18 of 16
  queue->synchronize();
}

TEST_F(SimBoundsDeathTest, RawLaunchWritingPastTheEndDies) {
  EXPECT_EXIT(
      {
        raw_launch_overrun();
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV),
      std::string("hdsm: kernel 'fill' on sim1 ") + kWrote +
          " device address 0x[0-9a-f]+: offset 64 of a 64-byte buffer, past the end");
}

TEST_F(SimBoundsDeathTest, ReadingBeforeTheStartDies) {
  EXPECT_EXIT(
      {
        default_disposition_under_sanitizers();
        hdsm::Runtime rt(bounds_config("1"));
        int* x = rt.alloc<int>(1024);  // a page: its start lies against the front guard
        int* out = rt.alloc<int>(1);
        rt.call(read_before(), hdsm::cover(1), x, out);
        rt.sync();
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV),
      std::string("hdsm: kernel 'read_before' on sim0 ") + kRead +
          " device address 0x[0-9a-f]+: offset -4 of a 4096-byte buffer, before the start");
}

// Every thread of the executor writes past the end at once: the process still ends with one message
// of one thread (the kernel's line, then the dispatcher's), not their pieces interleaved.
TEST_F(SimBoundsDeathTest, ThreadsLeavingABufferAtOnceReportOnce) {
  EXPECT_EXIT(
      {
        default_disposition_under_sanitizers();
        auto c = bounds_config("1");
        c.set("HDSM_THREADS", "8");
        hdsm::Runtime rt(c);
        int* x = rt.alloc<int>(1024);
        // Blocks of 16 ints: 64 of them write into the back guard page, from every thread.
        rt.call(fill(), hdsm::cover(2048 + 1024, 16), x, std::uint64_t{2048 + 1024}, 7);
        rt.sync();
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV),
      std::string("^hdsm: kernel 'fill' on sim0 ") + kWrote +
          " device address 0x[0-9a-f]+: offset [0-9]+ of a 4096-byte buffer, past the end "
          "\\(HDSM_SIM_BOUNDS_CHECK\\)\nhdsm: segmentation fault at 0x[0-9a-f]+ \\(refused by the resolver "
          "of "
          "its registered range\\)\n$");
}

class SimBounds : public ::testing::TestWithParam<const char*> {};

TEST_P(SimBounds, InBoundsWorkIsUnaffected) {
  hdsm::Runtime rt(bounds_config(GetParam()));
  hdsm::Device& device = rt.device(0);
  auto queue = device.create_queue();
  const std::vector<std::size_t> sizes = {1, 4, 100, 4096, 5000, std::size_t{3} << 20};
  std::vector<hdsm::DeviceBuffer> buffers;
  std::size_t expected_used = 0;
  for (std::size_t bytes : sizes) {
    buffers.push_back(device.alloc(bytes));
    expected_used += (bytes + 255) / 256 * 256;
    const std::uint64_t ints = bytes / sizeof(int);
    if (ints == 0) continue;
    const hdsm::KernelArg args[] = {hdsm::KernelArg::buffer(buffers.back()), hdsm::KernelArg::value(ints),
                                    hdsm::KernelArg::value(static_cast<int>(bytes))};
    queue->launch(fill(), hdsm::cover(ints), args);
  }
  queue->synchronize();
  EXPECT_EQ(device.memory_used(), expected_used);  // guards are not device memory
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::size_t ints = sizes[i] / sizeof(int);
    EXPECT_EQ(device.address(buffers[i], 0) % 64, 0u) << sizes[i];
    std::vector<int> back(ints);
    if (ints == 0) continue;
    queue->copy_to_host(back.data(), buffers[i], 0, ints * sizeof(int));
    queue->synchronize();
    EXPECT_EQ(back.front(), static_cast<int>(sizes[i]));
    EXPECT_EQ(back.back(), static_cast<int>(sizes[i]));
  }
  for (auto b : buffers) device.free(b);
  EXPECT_EQ(device.memory_used(), 0u);
  // The whole capacity is still available, guards or not.
  auto all = device.alloc(device.properties().memory_bytes);
  EXPECT_THROW((void)device.alloc(1), hdsm::OutOfDeviceMemory);
  device.free(all);

  // Shared objects and kernels through the ADSM API, written up to their last element.
  int* x = rt.alloc<int>(1000);
  rt.call(fill(), hdsm::cover(1000), x, std::uint64_t{1000}, 3);
  rt.sync();
  EXPECT_EQ(x[0], 3);
  EXPECT_EQ(x[999], 3);
  rt.free(x);
}

INSTANTIATE_TEST_SUITE_P(Modes, SimBounds, ::testing::Values("0", "1", "auto"), [](const auto& info) {
  return std::string(info.param) == "auto" ? "Auto" : std::string(info.param) == "1" ? "On" : "Off";
});

TEST(SimBoundsConfig, AcceptedValues) {
  auto c = hdsm::Config::defaults();
  EXPECT_EQ(c.get("HDSM_SIM_BOUNDS_CHECK"), "auto");
  for (const char* v : {"auto", "0", "1", "on", "OFF"})
    EXPECT_NO_THROW(c.set("HDSM_SIM_BOUNDS_CHECK", v)) << v;
  EXPECT_THROW(c.set("HDSM_SIM_BOUNDS_CHECK", "sometimes"), hdsm::ConfigError);
}

}  // namespace
