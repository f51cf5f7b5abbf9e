// Bulk memory on shared objects (seed 000 §4.4): Runtime::memset, memcpy and memmove decide per
// block by its state. Invalid blocks are worked on in the device copy and stay invalid (nothing is
// fetched); read-only blocks the call overwrites entirely go the same way; read-only blocks it
// changes in part are written on both sides and stay valid; dirty blocks are written on the host.
// None of it raises a page fault. The randomized model test covers the data; these tests pin the
// rules down with the statistics, and the errors.
#include <hdsm/hdsm.h>
#include <hdsm/hdsm.hpp>

#include "support/death_style.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kBlock = 4096;

const hdsm::Kernel& fill_kernel() {
  static const hdsm::Kernel k =
      hdsm::per_thread("bulk_fill", [](const hdsm::Thread& t, unsigned char* p, std::uint64_t n, int v) {
        if (const auto i = t.global_x(); i < n) p[i] = static_cast<unsigned char>(v);
      });
  return k;
}

const hdsm::Kernel& copy_kernel() {
  static const hdsm::Kernel k = hdsm::per_thread(
      "bulk_copy", [](const hdsm::Thread& t, unsigned char* dst, const unsigned char* src, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) dst[i] = src[i];
      });
  return k;
}

std::uint64_t faults(const hdsm::Stats& s) { return s.read_faults + s.write_faults; }
std::uint64_t bulk_bytes(const hdsm::Stats& s) { return s.action(hdsm::Action::bulk).bytes; }
std::uint64_t fetched_bytes(const hdsm::Stats& s) { return s.action(hdsm::Action::fault).bytes; }

class Bulk : public ::testing::TestWithParam<const char*> {
 protected:
  Bulk() : rt_(hdsm::test::fast_sim_config(GetParam(), "4KiB").set("HDSM_SIM_DEVICES", "2")) {}

  bool detects() const { return std::string(GetParam()) != "batch"; }

  /// An object of `blocks` blocks whose host copy is invalid (lazy, rolling): a kernel filled it
  /// with `value` after the CPU wrote it.
  unsigned char* invalid_object(std::size_t blocks, int value, int device = 0) {
    auto* p = static_cast<unsigned char*>(rt_.alloc(blocks * kBlock, device));
    std::memset(p, 1, blocks * kBlock);
    rt_.call(fill_kernel(), hdsm::cover(blocks * kBlock), hdsm::inout(p), std::uint64_t{blocks * kBlock},
             value);
    rt_.sync();
    return p;
  }

  /// The device copy of [p, p + n), read by a kernel into a fresh object and brought to the host.
  std::vector<unsigned char> device_copy(const unsigned char* p, std::size_t n) {
    auto* out = static_cast<unsigned char*>(rt_.alloc(n));
    rt_.call(copy_kernel(), hdsm::cover(n), hdsm::out(out), hdsm::in(p), std::uint64_t{n});
    rt_.sync();
    std::vector<unsigned char> v(out, out + n);
    rt_.free(out);
    return v;
  }

  hdsm::Runtime rt_;
};

TEST_P(Bulk, MemsetOfInvalidBlocksRunsOnTheDeviceAndFetchesNothing) {
  if (!detects()) GTEST_SKIP() << "batch-update has no invalid host copies between calls";
  unsigned char* p = invalid_object(4, 9);
  rt_.reset_stats();
  rt_.memset(p + 100, 7, 2 * kBlock);
  const hdsm::Stats s = rt_.stats();
  EXPECT_EQ(faults(s), 0u);
  EXPECT_EQ(bulk_bytes(s), 0u) << "a device fill moves nothing over the link";
  EXPECT_EQ(fetched_bytes(s), 0u);
  // Still invalid: the first CPU read faults and fetches the device's data.
  EXPECT_EQ(p[100], 7);
  EXPECT_EQ(p[99], 9);
  EXPECT_EQ(p[100 + 2 * kBlock], 9);
  EXPECT_GE(rt_.stats().read_faults, 1u);
  rt_.free(p);
}

TEST_P(Bulk, CopyOutOfInvalidBlocksReadsTheDeviceCopy) {
  if (!detects()) GTEST_SKIP() << "batch-update has no invalid host copies between calls";
  unsigned char* p = invalid_object(3, 4);
  rt_.reset_stats();
  std::vector<unsigned char> got(3 * kBlock);
  rt_.memcpy(got.data(), p, got.size());
  EXPECT_EQ(got, std::vector<unsigned char>(3 * kBlock, 4));
  const hdsm::Stats s = rt_.stats();
  EXPECT_EQ(faults(s), 0u);
  EXPECT_EQ(bulk_bytes(s), 3 * kBlock);
  EXPECT_EQ(fetched_bytes(s), 0u);
  rt_.free(p);
}

TEST_P(Bulk, WholeReadOnlyBlocksAreOverwrittenOnTheDevice) {
  if (!detects()) GTEST_SKIP() << "batch-update keeps both copies valid";
  auto* p = static_cast<unsigned char*>(rt_.alloc(2 * kBlock));  // read-only zeros
  std::vector<unsigned char> data(2 * kBlock);
  std::iota(data.begin(), data.end(), static_cast<unsigned char>(3));
  rt_.reset_stats();
  rt_.memcpy(p, data.data(), data.size());
  hdsm::Stats s = rt_.stats();
  EXPECT_EQ(faults(s), 0u);
  EXPECT_EQ(bulk_bytes(s), data.size()) << "uploaded once, never written to the host view";
  EXPECT_EQ(std::memcmp(p, data.data(), data.size()), 0);
  EXPECT_GE(rt_.stats().read_faults, 1u) << "the host copy was invalid after the copy";
  rt_.free(p);
}

TEST_P(Bulk, PartOfAReadOnlyBlockIsWrittenOnBothSides) {
  auto* p = static_cast<unsigned char*>(rt_.alloc(2 * kBlock));
  EXPECT_EQ(p[0], 0);  // read-only (batch: dirty, written on the host)
  rt_.reset_stats();
  rt_.memset(p + 10, 5, 100);
  EXPECT_EQ(faults(rt_.stats()), 0u);
  EXPECT_EQ(p[9], 0);
  EXPECT_EQ(p[10], 5);
  EXPECT_EQ(p[109], 5);
  EXPECT_EQ(p[110], 0);
  if (detects()) {
    EXPECT_EQ(faults(rt_.stats()), 0u) << "still read-only: reading it does not fault";
  }
  std::vector<unsigned char> expected(2 * kBlock, 0);
  std::memset(expected.data() + 10, 5, 100);
  EXPECT_EQ(device_copy(p, 2 * kBlock), expected);
  rt_.free(p);
}

TEST_P(Bulk, DirtyBlocksAreWrittenOnTheHost) {
  auto* p = static_cast<unsigned char*>(rt_.alloc(kBlock));
  p[0] = 1;  // dirty
  rt_.reset_stats();
  const char text[] = "dirty blocks stay on the host";
  rt_.memcpy(p + 8, text, sizeof text);
  const hdsm::Stats s = rt_.stats();
  EXPECT_EQ(faults(s), 0u);
  EXPECT_EQ(bulk_bytes(s), 0u);
  EXPECT_STREQ(reinterpret_cast<const char*>(p + 8), text);
  EXPECT_EQ(device_copy(p, kBlock)[8], 'd');
  rt_.free(p);
}

TEST_P(Bulk, CopiesBetweenObjectsOnOneAndOnTwoDevices) {
  if (!detects()) GTEST_SKIP() << "needs invalid blocks";
  for (int device : {0, 1}) {
    unsigned char* src = invalid_object(3, 6, 0);
    auto* dst = static_cast<unsigned char*>(rt_.alloc(3 * kBlock, device));
    rt_.reset_stats();
    rt_.memcpy(dst + kBlock, src + 5, kBlock);  // one whole read-only block of dst
    EXPECT_EQ(faults(rt_.stats()), 0u);
    // Rolling: the block is a whole read-only unit, copied on the device. Lazy: a part of the object,
    // written on both sides.
    if (device == 0 && std::string(GetParam()) == "rolling") {
      EXPECT_EQ(bulk_bytes(rt_.stats()), 0u) << "one device: copied on the device";
    }
    EXPECT_EQ(dst[kBlock - 1], 0);
    EXPECT_EQ(dst[kBlock], 6);
    EXPECT_EQ(dst[2 * kBlock - 1], 6);
    EXPECT_EQ(dst[2 * kBlock], 0);
    rt_.free(src);
    rt_.free(dst);
  }
}

TEST_P(Bulk, OverlappingMovesInsideOneObject) {
  auto* p = static_cast<unsigned char*>(rt_.alloc(4 * kBlock));
  std::vector<unsigned char> ref(4 * kBlock);
  for (std::size_t i = 0; i < ref.size(); ++i) ref[i] = static_cast<unsigned char>(i * 7);
  rt_.memcpy(p, ref.data(), ref.size());
  rt_.memmove(p + 3, p, 2 * kBlock + 11);  // upwards
  std::memmove(ref.data() + 3, ref.data(), 2 * kBlock + 11);
  rt_.memmove(p + 100, p + kBlock + 1, 2 * kBlock);  // downwards
  std::memmove(ref.data() + 100, ref.data() + kBlock + 1, 2 * kBlock);
  EXPECT_EQ(std::memcmp(p, ref.data(), ref.size()), 0);
  rt_.free(p);
}

// No object starts where another ends (a range's end names one object), so a range that runs off
// an object's end is refused whatever was allocated after it, and writes nothing. Before, objects
// whose size was a whole number of blocks could be neighbours, and such a range went on into the next.
TEST_P(Bulk, ARangeOffAnObjectsEndIsRefusedWhateverFollows) {
  auto* a = static_cast<unsigned char*>(rt_.alloc(2 * kBlock));
  auto* b = static_cast<unsigned char*>(rt_.alloc(2 * kBlock));
  EXPECT_NE(b, a + 2 * kBlock);
  try {
    rt_.memset(a + kBlock, 3, 2 * kBlock);
    ADD_FAILURE() << "a memset off the end of an object was done";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("byte " + std::to_string(kBlock)), std::string::npos) << e.what();
  }
  std::vector<unsigned char> got(2 * kBlock, 7);
  EXPECT_THROW(rt_.memcpy(got.data(), a + kBlock, got.size()), hdsm::InvalidArgument);
  EXPECT_EQ(got, std::vector<unsigned char>(2 * kBlock, 7));
  for (std::size_t i = 0; i < 2 * kBlock; ++i) ASSERT_EQ(a[i] | b[i], 0) << "byte " << i;
  rt_.free(a);
  rt_.free(b);
}

TEST_P(Bulk, BadRangesWriteNothing) {
  auto* p = static_cast<unsigned char*>(rt_.alloc(kBlock + 100));
  std::memset(p, 2, kBlock + 100);
  // Past the end of the object, into the rest of its last block.
  EXPECT_THROW(rt_.memset(p + kBlock, 9, 200), hdsm::InvalidArgument);
  std::vector<unsigned char> host(300, 1);
  EXPECT_THROW(rt_.memcpy(p + kBlock, host.data(), 300), hdsm::InvalidArgument);
  EXPECT_THROW(rt_.memcpy(host.data(), p + kBlock, 300), hdsm::InvalidArgument);
  EXPECT_EQ(host, std::vector<unsigned char>(300, 1));
  for (std::size_t i = 0; i < kBlock + 100; ++i) ASSERT_EQ(p[i], 2) << "byte " << i;
  try {
    rt_.memset(p + kBlock, 9, 200);
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("byte 100"), std::string::npos) << e.what();
  }
  // A freed object, and another runtime's memory.
  auto* q = static_cast<unsigned char*>(rt_.alloc(kBlock));
  rt_.free(q);
  EXPECT_THROW(rt_.memset(q, 0, 10), hdsm::InvalidArgument);
  hdsm::Runtime other(hdsm::test::fast_sim_config(GetParam(), "4KiB"));
  void* foreign = other.alloc(kBlock);
  EXPECT_THROW(rt_.memcpy(foreign, host.data(), 10), hdsm::InvalidArgument);
  EXPECT_THROW(rt_.memset(foreign, 0, 10), hdsm::InvalidArgument);
  other.free(foreign);
  // Zero bytes: nothing to check, nothing done.
  EXPECT_EQ(rt_.memset(q, 0, 0), q);
  rt_.free(p);
}

TEST_P(Bulk, HostMemoryOnlyIsPlainLibc) {
  std::vector<unsigned char> a(64, 1), b(64, 2);
  EXPECT_EQ(rt_.memcpy(a.data(), b.data(), 64), a.data());
  EXPECT_EQ(a, b);
  rt_.memset(a.data(), 5, 64);
  EXPECT_EQ(a, std::vector<unsigned char>(64, 5));
  rt_.memmove(a.data() + 1, a.data(), 10);
  EXPECT_EQ(a[10], 5);
}

INSTANTIATE_TEST_SUITE_P(Protocols, Bulk, ::testing::Values("batch", "lazy", "rolling"),
                         [](const auto& info) { return std::string(info.param); });

TEST(BulkCApi, MemcpyAndMemsetOnTheDefaultRuntime) {
  // A fresh process, whose default runtime is not made yet (a fork of this one may have it).
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_EXIT(
      {
        bool ok = hdsm_config_set("HDSM_SIM_MEMORY", "32MiB") == HDSM_SUCCESS;
        ok &= hdsm_config_set("HDSM_ARENA_SEGMENT", "1GiB") == HDSM_SUCCESS;
        void* p = nullptr;
        ok &= hdsm_alloc(8192, -1, &p) == HDSM_SUCCESS;
        ok &= hdsm_memset(p, 4, 8192) == HDSM_SUCCESS;
        char host[16] = "from the host";
        ok &= hdsm_memcpy(static_cast<char*>(p) + 100, host, sizeof host) == HDSM_SUCCESS;
        ok &= hdsm_memmove(static_cast<char*>(p) + 1, p, 200) == HDSM_SUCCESS;
        char back[16] = {};
        ok &= hdsm_memcpy(back, static_cast<char*>(p) + 101, sizeof back) == HDSM_SUCCESS;
        ok &= std::strcmp(back, "from the host") == 0;
        ok &= static_cast<unsigned char*>(p)[8191] == 4;
        ok &= hdsm_memset(static_cast<char*>(p) + 8000, 0, 500) == HDSM_ERROR_INVALID_ARGUMENT;
        ok &= std::string(hdsm_last_error()).find("not in a live shared object") != std::string::npos;
        // Null pointers are an error code, not a crash in the runtime (0 bytes is nothing to do).
        ok &= hdsm_memcpy(p, nullptr, 16) == HDSM_ERROR_INVALID_ARGUMENT;
        ok &= std::string(hdsm_last_error()) == "memcpy: the source is a null pointer (16 bytes)";
        ok &= hdsm_memmove(nullptr, p, 16) == HDSM_ERROR_INVALID_ARGUMENT;
        ok &= hdsm_memset(nullptr, 0, 16) == HDSM_ERROR_INVALID_ARGUMENT;
        hdsm_event event = nullptr;
        ok &= hdsm_memcpy_async(p, nullptr, 16, &event) == HDSM_ERROR_INVALID_ARGUMENT && event == nullptr;
        ok &= hdsm_memcpy(p, nullptr, 0) == HDSM_SUCCESS;
        ok &= hdsm_free(p) == HDSM_SUCCESS;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(BulkCApi, MemcpyAsyncBetweenDevicesGivesAnEvent) {
  // A fresh process, whose default runtime is not made yet (a fork of this one may have it).
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_EXIT(
      {
        bool ok = hdsm_config_set("HDSM_SIM_MEMORY", "32MiB") == HDSM_SUCCESS;
        ok &= hdsm_config_set("HDSM_ARENA_SEGMENT", "1GiB") == HDSM_SUCCESS;
        ok &= hdsm_config_set("HDSM_SIM_DEVICES", "2") == HDSM_SUCCESS;
        ok &= hdsm_config_set("HDSM_SIM_PEER", "none") == HDSM_SUCCESS;  // the staged route
        constexpr std::size_t kBytes = 3 << 20;
        void* a = nullptr;
        void* b = nullptr;
        ok &= hdsm_alloc(kBytes, 0, &a) == HDSM_SUCCESS && hdsm_alloc(kBytes, 1, &b) == HDSM_SUCCESS;
        std::vector<unsigned char> pattern(kBytes);
        for (std::size_t i = 0; i < kBytes; ++i) pattern[i] = static_cast<unsigned char>(i * 7 + i / 4096);
        ok &= hdsm_memcpy(a, pattern.data(), kBytes) == HDSM_SUCCESS;
        hdsm_event event = nullptr;
        ok &= hdsm_memcpy_async(b, a, kBytes, &event) == HDSM_SUCCESS && event != nullptr;
        ok &= hdsm_event_wait(event) == HDSM_SUCCESS;
        int done = 0;
        ok &= hdsm_event_query(event, &done) == HDSM_SUCCESS && done == 1;
        ok &= hdsm_event_destroy(event) == HDSM_SUCCESS;
        ok &= std::memcmp(b, pattern.data(), kBytes) == 0;
        // Bad input: no event is made and the message names the call.
        hdsm_event none = reinterpret_cast<hdsm_event>(&ok);
        ok &= hdsm_memcpy_async(static_cast<char*>(b) + 1, a, kBytes, &none) == HDSM_ERROR_INVALID_ARGUMENT;
        ok &= none == nullptr;
        ok &= hdsm_memcpy_async(b, a, 16, nullptr) == HDSM_ERROR_INVALID_ARGUMENT;
        ok &= std::string(hdsm_last_error()).find("hdsm_memcpy_async") != std::string::npos;
        ok &= hdsm_event_wait(nullptr) == HDSM_ERROR_INVALID_ARGUMENT;
        ok &= hdsm_event_destroy(nullptr) == HDSM_SUCCESS;
        ok &= hdsm_free(a) == HDSM_SUCCESS && hdsm_free(b) == HDSM_SUCCESS;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
