// The bookkeeping of driver-allocated buffers that the OpenCL and CUDA backends share
// (src/device/buffer_table.hpp): capacity, the largest buffer, live-buffer and range checks.
#include "device/buffer_table.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace {

using Table = hdsm::BufferTable<int>;

TEST(BufferTable, ReservationsStayWithinTheCapacityAndGoBack) {
  Table t("dev0", 100);
  t.reserve(60);
  EXPECT_THROW(t.reserve(41), hdsm::OutOfDeviceMemory);
  EXPECT_EQ(t.used(), 60u) << "a refused reservation took nothing";
  t.reserve(40);
  EXPECT_EQ(t.used(), 100u);
  t.unreserve(40);
  EXPECT_EQ(t.used(), 60u);
}

TEST(BufferTable, AHugeRequestCannotWrapTheCheckAround) {
  Table t("dev0", 100);
  t.reserve(10);
  // used + bytes would wrap to 9 and pass a check written that way.
  EXPECT_THROW(t.reserve(std::numeric_limits<std::size_t>::max()), hdsm::OutOfDeviceMemory);
  EXPECT_EQ(t.used(), 10u);
}

// The limit on one buffer is named as such, beside the device's real capacity and use (before, the
// message gave the limit as the capacity: "0 B of 8 GiB in use" on a device with 21 GiB).
TEST(BufferTable, OneBufferAboveTheLargestIsRefusedNamingThatLimit) {
  Table t("dev0", 4096, 1024, false, "CL_DEVICE_MAX_MEM_ALLOC_SIZE");
  t.reserve(512);
  try {
    t.reserve(1025);
    FAIL() << "a buffer above the largest was accepted";
  } catch (const hdsm::OutOfDeviceMemory& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "out of device memory on dev0 (one buffer holds at most 1 KiB, CL_DEVICE_MAX_MEM_ALLOC_SIZE): "
        "cannot allocate 1.0 KiB (1025 bytes); 512 B of 4 KiB in use. Free device memory, or allocate less.");
    EXPECT_EQ(e.capacity(), 4096u);
    EXPECT_EQ(e.used(), 512u);
  }
  t.reserve(1024);
}

// What a typed allocation asks for when its count's bytes overflow (SIZE_MAX, detail::bytes_of) is
// said as such, not as "16 EiB" or a count of TiB; sizes past TiB have their units.
TEST(OutOfDeviceMemory, AnOverflowingSizeIsNamedAsOne) {
  const hdsm::OutOfDeviceMemory e("the cluster's global memory", SIZE_MAX, 0, std::size_t{1} << 30,
                                  "HDSM_CLUSTER_SPACE");
  EXPECT_NE(
      std::string(e.what()).find("cannot allocate SIZE_MAX bytes (more than any memory: SIZE_MAX itself, or "
                                 "an element count whose size in bytes overflows)"),
      std::string::npos)
      << e.what();
  // No knob or free makes room for it: no advice to raise one.
  EXPECT_EQ(std::string(e.what()).find("raise"), std::string::npos) << e.what();
  EXPECT_NE(std::string(hdsm::OutOfDeviceMemory("the cluster's global memory", 1 << 30, 0, 1 << 20,
                                                "HDSM_CLUSTER_SPACE")
                            .what())
                .find("Free some or raise HDSM_CLUSTER_SPACE."),
            std::string::npos);
  EXPECT_EQ(hdsm::format_bytes(std::size_t{3} << 50), "3 PiB");
  EXPECT_EQ(hdsm::format_bytes(std::size_t{1} << 62), "4 EiB");
}

TEST(BufferTable, LiveBuffersResolveWithinTheirBytesAndFreeOnce) {
  Table t("dev0", 100, 100, /*hex_handles=*/true);
  t.reserve(50);
  t.insert(0xabc, 50, 7);
  EXPECT_EQ(t.with({0xabc, 50}, 10, 40, "copy", [](int v) { return v; }), 7);
  EXPECT_THROW(t.with({0xabc, 50}, 10, 41, "copy", [](int v) { return v; }), hdsm::InvalidArgument);
  EXPECT_EQ(t.take({0xabc, 50}), 7);
  EXPECT_EQ(t.used(), 0u);
  try {
    t.take({0xabc, 50});
    FAIL() << "a double free was accepted";
  } catch (const hdsm::InvalidPointer& e) {
    EXPECT_NE(std::string(e.what()).find("0xabc"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.with({0xabc, 50}, 0, 1, "copy", [](int v) { return v; }), hdsm::InvalidPointer);
}

TEST(BufferTable, ForEachSeesEveryLiveBuffer) {
  Table t("dev0", 100);
  for (int i = 1; i <= 3; ++i) {
    t.reserve(10);
    t.insert(static_cast<std::uint64_t>(i), 10, i);
  }
  (void)t.take({2, 10});
  int sum = 0;
  t.for_each([&](std::uint64_t, std::size_t bytes, int v) { sum += v + static_cast<int>(bytes); });
  EXPECT_EQ(sum, 1 + 3 + 20);
}

}  // namespace
