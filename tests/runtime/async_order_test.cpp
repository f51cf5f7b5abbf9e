// Asynchronous copies (memcpy_async) and the kernel calls after them: a call that reads bytes the copy
// writes, or writes bytes the copy reads or writes, runs after the copy, whether it names the object
// whole, by a range annotation (hdsm::in(p, first, count)) or unannotated; a call whose range is
// elsewhere in the object does not wait (tests/timing/async_overlap_timing_test.cpp times that). The
// link is slow (a 256 KiB copy takes milliseconds), so a call that did not wait would see the bytes
// before the copy moved them.
#include <hdsm/hdsm.hpp>

#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using hdsm::test::pattern;

constexpr std::size_t kBytes = 256 * 1024;

const hdsm::Kernel& fill_range_kernel() {
  static const hdsm::Kernel k = hdsm::per_thread(
      "order_fill_range",
      [](const hdsm::Thread& t, unsigned char* p, std::uint64_t first, std::uint64_t n, int v) {
        if (const auto i = t.global_x(); i < n) p[first + i] = static_cast<unsigned char>(v);
      });
  return k;
}

const hdsm::Kernel& copy_kernel() {
  static const hdsm::Kernel k = hdsm::per_thread(
      "order_copy", [](const hdsm::Thread& t, unsigned char* dst, const unsigned char* src, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) dst[i] = src[i];
      });
  return k;
}

/// How a call names the object it shares with an asynchronous copy.
enum class Naming { whole, range, unannotated };
std::string to_string(Naming n) {
  switch (n) {
    case Naming::whole:
      return "whole";
    case Naming::range:
      return "range";
    case Naming::unannotated:
      return "unannotated";
  }
  return "?";
}

class AsyncOrder : public ::testing::TestWithParam<const char*> {
 protected:
  AsyncOrder()
      : rt_(hdsm::test::fast_sim_config(GetParam(), "4KiB")
                .set("HDSM_SIM_DEVICES", "2")
                .set("HDSM_SIM_PEER", "none")
                .set("HDSM_SIM_LINK_GBPS", "0.1")
                .set("HDSM_SIM_LATENCY_US", "100")) {}

  unsigned char* object(std::size_t n, int device, const std::vector<unsigned char>& data = {}) {
    auto* p = static_cast<unsigned char*>(rt_.alloc(n, device));
    if (!data.empty()) rt_.memcpy(p, data.data(), data.size());
    return p;
  }

  /// Fills [first, first + n) of p with v, the call naming p as `naming` says (a range annotated out
  /// leaves the other bytes as they were).
  void fill(unsigned char* p, std::size_t first, std::size_t n, int v, Naming naming) {
    const auto go = [&](auto arg) {
      rt_.call(fill_range_kernel(), hdsm::cover(n), arg, std::uint64_t{first}, std::uint64_t{n}, v);
    };
    if (naming == Naming::whole) go(hdsm::inout(p));  // out(p) would say it writes every byte
    if (naming == Naming::range) go(hdsm::out(p, first, n));
    if (naming == Naming::unannotated) go(p);
  }

  std::vector<unsigned char> host(const unsigned char* p, std::size_t n) {
    std::vector<unsigned char> v(n);
    rt_.memcpy(v.data(), p, n);
    return v;
  }

  hdsm::Runtime rt_;
};

TEST_P(AsyncOrder, ACallReadingTheDestinationSeesTheCopiedBytes) {
  for (Naming naming : {Naming::whole, Naming::range, Naming::unannotated}) {
    unsigned char* a = object(kBytes, 0, pattern(kBytes, 1));
    unsigned char* b = object(kBytes, 1);
    unsigned char* c = object(kBytes, 1);
    hdsm::Event copied = rt_.memcpy_async(b, a, kBytes);
    const auto go = [&](auto src) {
      rt_.call(copy_kernel(), hdsm::cover(kBytes), hdsm::out(c), src, std::uint64_t{kBytes});
    };
    if (naming == Naming::whole) go(hdsm::in(b));
    if (naming == Naming::range) go(hdsm::in(b, 0, kBytes));
    if (naming == Naming::unannotated)
      rt_.call(copy_kernel(), hdsm::cover(kBytes), c, b, std::uint64_t{kBytes});
    rt_.sync();
    copied.wait();
    EXPECT_EQ(host(c, kBytes), pattern(kBytes, 1)) << to_string(naming);
    for (void* p : {a, b, c}) rt_.free(p);
  }
}

TEST_P(AsyncOrder, ACallWritingTheSourceWaitsUntilTheCopyReadIt) {
  for (Naming naming : {Naming::whole, Naming::range, Naming::unannotated}) {
    unsigned char* a = object(kBytes, 0, pattern(kBytes, 2));
    unsigned char* b = object(kBytes, 1);
    hdsm::Event copied = rt_.memcpy_async(b, a, kBytes);
    fill(a, 0, kBytes, 9, naming);
    rt_.sync();
    copied.wait();
    EXPECT_EQ(host(b, kBytes), pattern(kBytes, 2)) << to_string(naming) << ": the copy read the new bytes";
    EXPECT_EQ(host(a, kBytes), std::vector<unsigned char>(kBytes, 9)) << to_string(naming);
    for (void* p : {a, b}) rt_.free(p);
  }
}

TEST_P(AsyncOrder, ACallWritingOneByteOfTheDestinationWritesAfterTheCopy) {
  for (Naming naming : {Naming::whole, Naming::range, Naming::unannotated}) {
    unsigned char* a = object(kBytes, 0, pattern(kBytes, 3));
    unsigned char* b = object(kBytes, 1);
    hdsm::Event copied = rt_.memcpy_async(b, a, kBytes);
    fill(b, kBytes - 1, 1, 200, naming);
    rt_.sync();
    copied.wait();
    std::vector<unsigned char> want = pattern(kBytes, 3);
    want.back() = 200;
    EXPECT_EQ(host(b, kBytes), want) << to_string(naming);
    for (void* p : {a, b}) rt_.free(p);
  }
}

TEST_P(AsyncOrder, CallsOnOtherBytesOfTheObjectsLeaveTheCopyWhole) {
  // The copy reads a's first half and writes b's first half; the calls write the second halves.
  unsigned char* a = object(2 * kBytes, 0, pattern(2 * kBytes, 4));
  unsigned char* b = object(2 * kBytes, 1);
  hdsm::Event copied = rt_.memcpy_async(b, a, kBytes);
  fill(b, kBytes, kBytes, 5, Naming::range);
  fill(a, kBytes, kBytes, 6, Naming::range);
  rt_.sync();
  copied.wait();
  std::vector<unsigned char> want_b = pattern(kBytes, 4), want_a = pattern(2 * kBytes, 4);
  want_b.resize(2 * kBytes, 5);
  std::fill(want_a.begin() + kBytes, want_a.end(), 6);
  EXPECT_EQ(host(b, 2 * kBytes), want_b);
  EXPECT_EQ(host(a, 2 * kBytes), want_a);
  for (void* p : {a, b}) rt_.free(p);
}

TEST_P(AsyncOrder, ACpuAccessBesideTheCopyFetchesItsBlockAfterTheCopy) {
  // The copy writes bytes [0, 100) of b's device copy, whose host copy a kernel made invalid (lazy,
  // rolling); the CPU then reads byte 200, of the same block (allowed: not a byte the copy writes),
  // and the fetch of that block must wait for the copy, or the host keeps the block without its bytes.
  unsigned char* a = object(kBytes, 0, pattern(kBytes, 6));
  unsigned char* b = object(kBytes, 1);
  fill(b, 0, kBytes, 1, Naming::whole);
  rt_.sync();
  hdsm::Event copied = rt_.memcpy_async(b, a, 100);
  EXPECT_EQ(static_cast<volatile unsigned char*>(b)[200], 1);
  copied.wait();
  std::vector<unsigned char> want(kBytes, 1);
  std::copy_n(pattern(100, 6).begin(), 100, want.begin());
  EXPECT_EQ(std::vector<unsigned char>(b, b + kBytes), want) << "the CPU's view of b";
  for (void* p : {a, b}) rt_.free(p);
}

TEST_P(AsyncOrder, FreeingAnObjectWaitsForItsCopies) {
  unsigned char* a = object(kBytes, 0, pattern(kBytes, 5));
  unsigned char* b = object(kBytes, 1);
  hdsm::Event copied = rt_.memcpy_async(b, a, kBytes);
  rt_.free(b);
  EXPECT_TRUE(copied.query()) << "the destination's buffer went while the copy still wrote it";
  unsigned char* c = object(kBytes, 1);
  copied = rt_.memcpy_async(c, a, kBytes);
  rt_.free(a);
  EXPECT_TRUE(copied.query()) << "the source's buffer went while the copy still read it";
  EXPECT_EQ(host(c, kBytes), pattern(kBytes, 5));
  rt_.free(c);
}

TEST_P(AsyncOrder, ARangeMustLieWithinItsObject) {
  unsigned char* a = object(kBytes, 0);
  const auto message = [&](auto arg) -> std::string {
    try {
      rt_.call(fill_range_kernel(), hdsm::cover(1), arg, std::uint64_t{0}, std::uint64_t{0}, 1);
    } catch (const hdsm::InvalidArgument& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message(hdsm::out(a, kBytes - 10, 11)).find("leave object"), std::string::npos)
      << message(hdsm::out(a, kBytes - 10, 11));
  EXPECT_NE(message(hdsm::out(a + 100, kBytes - 100, 1)).find("leave object"), std::string::npos);
  EXPECT_NE(message(hdsm::in(a, 5, 0)).find("empty range"), std::string::npos);
  EXPECT_NE(message(hdsm::in(a, SIZE_MAX / 2, 2)).find("leave object"), std::string::npos);
  // A count too large to add is no wrapped-around end ("bytes [4, 2)" before, for ints).
  EXPECT_NE(message(hdsm::inout(a, 1, SIZE_MAX)).find("bytes [1, SIZE_MAX or more) from it"),
            std::string::npos)
      << message(hdsm::inout(a, 1, SIZE_MAX));
  auto* ints = reinterpret_cast<int*>(a);
  EXPECT_NE(message(hdsm::inout(ints, 1, SIZE_MAX)).find("bytes [4, SIZE_MAX or more) from it"),
            std::string::npos)
      << message(hdsm::inout(ints, 1, SIZE_MAX));
  EXPECT_EQ(message(hdsm::inout(a + 100, 0, kBytes - 100)), "no error");
  rt_.sync();
  rt_.free(a);
}

INSTANTIATE_TEST_SUITE_P(Protocols, AsyncOrder, ::testing::Values("batch", "lazy", "rolling"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
