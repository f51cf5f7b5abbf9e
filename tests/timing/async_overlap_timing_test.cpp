// A kernel call whose range annotation (hdsm::inout(p, first, count)) lies outside the bytes an
// asynchronous copy of the same object moves runs while the copy does (the multi-device stencil's
// interior beside its halo exchange, seed 003 §5.3); one that overlaps them by a byte, or names the
// whole object, waits for it. Rolling-update, whose blocks let the copy go device to device: lazy-update
// writes part of an object on both sides, and so uploads it on the object's own queue, and batch-update
// uploads every object at the call. The copy crosses a 0.1 GB/s link (4 MiB: over 40 ms), the call touches
// 4 KiB; tests/runtime/async_order_test.cpp checks the data of every case.
#include <hdsm/hdsm.hpp>

#include "timing/slow_link.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t kCopy = 4 * MiB;
constexpr std::size_t kTouch = 4096;

const hdsm::Kernel& fill_kernel() {
  static const hdsm::Kernel k = hdsm::per_thread(
      "overlap_fill",
      [](const hdsm::Thread& t, unsigned char* p, std::uint64_t first, std::uint64_t n, int v) {
        if (const auto i = t.global_x(); i < n) p[first + i] = static_cast<unsigned char>(v);
      });
  return k;
}

hdsm::Config slow_link(const char* protocol) {
  return hdsm::test::slow_link("none").set("HDSM_PROTOCOL", protocol);
}

/// Whether the copy into the first kCopy bytes of an object of device 1 was still running when a
/// call that writes kTouch bytes from `first`, named as `ranged` says, had completed.
bool call_overtakes_copy(hdsm::Runtime& rt, std::size_t first, bool ranged) {
  const std::vector<unsigned char> data(kCopy, 7);
  auto* src = static_cast<unsigned char*>(rt.alloc(kCopy, 0));
  auto* dst = static_cast<unsigned char*>(rt.alloc(2 * kCopy, 1));
  rt.memcpy(src, data.data(), kCopy);
  const hdsm::Event copied = rt.memcpy_async(dst, src, kCopy);
  const auto range = ranged ? hdsm::inout(dst, first, kTouch) : hdsm::inout(dst);
  rt.call(fill_kernel(), hdsm::cover(kTouch), range, std::uint64_t{first}, std::uint64_t{kTouch}, 1);
  rt.sync();
  const bool overtook = !copied.query();
  copied.wait();
  rt.free(src);
  rt.free(dst);
  return overtook;
}

TEST(AsyncOverlapTiming, ACallOnOtherBytesRunsWhileTheCopyDoes) {
  hdsm::Runtime rt(slow_link("rolling"));
  EXPECT_TRUE(call_overtakes_copy(rt, kCopy, true)) << "the call waited for a copy of other bytes";
  EXPECT_FALSE(call_overtakes_copy(rt, kCopy - 1, true)) << "a call overlapping the copy by one byte";
  EXPECT_FALSE(call_overtakes_copy(rt, kCopy, false)) << "a call naming the whole object";
}

}  // namespace
