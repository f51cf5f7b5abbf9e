// Remote access in kernels (seed 003 §4.2): a call runs on the device of its first shared-pointer
// argument; an object of a peer device is released on its own device, passed as that device's
// address and acquired there at the sync; a non-peer object fails the call (naming the kernel, the
// argument, both devices and HDSM_REMOTE) unless HDSM_REMOTE=copy, which passes a temporary copy on
// the call's device and copies it back unless the kernel only reads it. On poisoning sim devices,
// under every protocol.
#include "support/test_support.hpp"

#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>

namespace {

// y[i] += x[i] (y first: the call runs on y's device).
const hdsm::Kernel& accumulate() {
  static const hdsm::Kernel k =
      hdsm::per_thread("remote_accumulate", [](const hdsm::Thread& t, int* y, const int* x, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) y[i] += x[i];
      });
  return k;
}

// x[i] = v for i < n.
const hdsm::Kernel& fill() {
  static const hdsm::Kernel k =
      hdsm::per_thread("remote_fill", [](const hdsm::Thread& t, int* x, std::uint64_t n, int v) {
        if (const auto i = t.global_x(); i < n) x[i] = v;
      });
  return k;
}

// dst[i] = src[i] * 2 for i < n; src is first, so the call runs on src's device and writes remotely.
const hdsm::Kernel& twice_into() {
  static const hdsm::Kernel k = hdsm::per_thread(
      "remote_twice_into", [](const hdsm::Thread& t, const int* src, int* dst, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) dst[i] = src[i] * 2;
      });
  return k;
}

enum class Mode { peer, not_peer, copy };

hdsm::Config config(const std::string& protocol, Mode mode) {
  auto c = hdsm::test::fast_sim_config(protocol).set("HDSM_SIM_DEVICES", "2");
  if (mode != Mode::peer) c.set("HDSM_SIM_PEER", "none");
  if (mode == Mode::copy) c.set("HDSM_REMOTE", "copy");
  return c;
}

class AdsmRemote : public ::testing::TestWithParam<std::tuple<std::string, Mode, bool>> {
 protected:
  std::string protocol() const { return std::get<0>(GetParam()); }
  Mode mode() const { return std::get<1>(GetParam()); }
  bool annotated() const { return std::get<2>(GetParam()); }
  hdsm::Runtime rt{config(protocol(), mode())};
  static constexpr std::size_t n = 5000;  // several 4 KiB blocks, the last one partial
};

TEST_P(AdsmRemote, KernelReadsAndWritesAnObjectOfTheOtherDevice) {
  int* y = rt.alloc<int>(n, 0);
  int* x = rt.alloc<int>(n, 1);
  for (std::size_t i = 0; i < n; ++i) {
    y[i] = static_cast<int>(i);
    x[i] = 1000 + static_cast<int>(i);  // dirty on the host: must reach device 1 before the kernel
  }
  const auto launches = rt.stats().kernel_launches;
  const auto call = [&] {
    if (annotated())
      rt.call(accumulate(), hdsm::cover(n), hdsm::inout(y), hdsm::in(x), std::uint64_t{n});
    else
      rt.call(accumulate(), hdsm::cover(n), y, x, std::uint64_t{n});
  };
  if (mode() == Mode::not_peer) {
    try {
      call();
      FAIL() << "a call with an object of a non-peer device was accepted";
    } catch (const hdsm::Unsupported& e) {
      const std::string what = e.what();
      for (const char* part : {"remote_accumulate", "argument 1", "device 1", "device 0", "HDSM_REMOTE=copy"})
        EXPECT_NE(what.find(part), std::string::npos) << part << " missing from: " << what;
    }
    EXPECT_EQ(rt.stats().kernel_launches, launches);
    EXPECT_EQ(y[10], 10);  // nothing happened to either object
    EXPECT_EQ(x[10], 1010);
  } else {
    call();
    rt.sync();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], 1000 + 2 * static_cast<int>(i)) << "element " << i;
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], 1000 + static_cast<int>(i)) << "element " << i;
    const hdsm::Stats s = rt.stats();
    if (mode() == Mode::peer) {
      EXPECT_EQ(s.copy(hdsm::CopyRoute::staged).transfers, 0u);  // passed by address, never copied
    } else {
      // Copied in; copied back only when the kernel may have written it (unannotated).
      EXPECT_EQ(s.copy(hdsm::CopyRoute::staged).transfers, annotated() ? 1u : 2u);
      // Each transfer counts under one action, these copies too (the call's and the sync's).
      std::uint64_t actions = 0;
      for (int a = 0; a < hdsm::kActionCount; ++a) actions += s.action(static_cast<hdsm::Action>(a)).bytes;
      EXPECT_EQ(actions, s.route(hdsm::Route::h2d).bytes + s.route(hdsm::Route::d2h).bytes);
    }
  }
  // The objects are as coherent as if each kernel had run on their own device: device 1 works on x.
  // (out(): the rest of x is device 1's copy, which the remote call's release brought up to date.)
  if (mode() == Mode::not_peer)
    rt.call(fill(), hdsm::cover(n / 2), hdsm::inout(x), std::uint64_t{n / 2}, -1);
  else
    rt.call(fill(), hdsm::cover(n / 2), hdsm::out(x), std::uint64_t{n / 2}, -1);
  rt.sync();
  EXPECT_EQ(x[0], -1);
  EXPECT_EQ(x[n - 1], 1000 + static_cast<int>(n) - 1);
  rt.free(x);
  rt.free(y);
}

TEST_P(AdsmRemote, KernelWritesAnObjectOfTheOtherDevice) {
  if (mode() == Mode::not_peer) GTEST_SKIP() << "the refusal is checked above";
  int* src = rt.alloc<int>(n, 1);
  int* dst = rt.alloc<int>(n, 0);
  for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<int>(i);
  dst[3] = 77;  // dirty on the host; an out() call overwrites it anyway
  for (int round = 1; round <= 2; ++round) {
    if (annotated())
      rt.call(twice_into(), hdsm::cover(n), hdsm::in(src), hdsm::out(dst), std::uint64_t{n});
    else
      rt.call(twice_into(), hdsm::cover(n), src, dst, std::uint64_t{n});
    // A second call before the sync sees the first one's results (an object's device copy is
    // current in queue order).
    rt.call(accumulate(), hdsm::cover(n), hdsm::inout(src), hdsm::in(dst), std::uint64_t{n});
    rt.sync();
    for (std::size_t i = 0; i < n; ++i) {
      const int before = round == 1 ? static_cast<int>(i) : static_cast<int>(i) * 3;
      ASSERT_EQ(dst[i], 2 * before) << "round " << round << " element " << i;
      ASSERT_EQ(src[i], 3 * before) << "round " << round << " element " << i;
    }
  }
  rt.free(src);
  rt.free(dst);
}

TEST_P(AdsmRemote, FreeOfARemoteObjectWaitsAndTheSyncSkipsIt) {
  if (mode() == Mode::not_peer) GTEST_SKIP() << "no remote call is accepted";
  int* y = rt.alloc<int>(n, 0);
  int* x = rt.alloc<int>(n, 1);
  rt.call(accumulate(), hdsm::cover(n), hdsm::inout(y), hdsm::in(x), std::uint64_t{n});
  rt.free(x);
  rt.sync();
  EXPECT_EQ(y[n - 1], 0);
  rt.free(y);
}

// A kernel that fails with a remote argument fails its sync: the events that order the object's
// device after the kernel (and the copy back) are recorded after the call's own, so they do not take
// the failure, which a queue reports once.
TEST_P(AdsmRemote, AKernelsFailureWithARemoteArgumentReachesTheSync) {
  if (mode() == Mode::not_peer) GTEST_SKIP() << "no remote call is accepted";
  static const hdsm::Kernel boom =
      hdsm::per_thread("remote_boom", [](const hdsm::Thread& t, int* y, const int* x, std::uint64_t n) {
        if (t.global_x() == 7) throw std::runtime_error("boom at 7");
        if (const auto i = t.global_x(); i < n) y[i] = x[i];
      });
  int* y = rt.alloc<int>(n, 0);
  int* x = rt.alloc<int>(n, 1);
  for (const bool remote_written : {false, true}) {
    SCOPED_TRACE(remote_written ? "remote inout" : "remote in");
    if (annotated() && remote_written)
      rt.call(boom, hdsm::cover(n), hdsm::inout(x), hdsm::inout(y), std::uint64_t{n});
    else if (annotated())
      rt.call(boom, hdsm::cover(n), hdsm::inout(y), hdsm::in(x), std::uint64_t{n});
    else
      rt.call(boom, hdsm::cover(n), y, x, std::uint64_t{n});
    try {
      rt.sync();
      ADD_FAILURE() << "the sync returned: the kernel's failure was lost";
    } catch (const hdsm::KernelFailure& e) {
      EXPECT_NE(std::string(e.what()).find("boom at 7"), std::string::npos) << e.what();
    }
  }
  rt.free(x);
  rt.free(y);
}

std::string name(const ::testing::TestParamInfo<std::tuple<std::string, Mode, bool>>& info) {
  const Mode m = std::get<1>(info.param);
  return std::get<0>(info.param) +
         (m == Mode::peer   ? "_peer"
          : m == Mode::copy ? "_copy"
                            : "_not_peer") +
         (std::get<2>(info.param) ? "_annotated" : "_raw");
}

INSTANTIATE_TEST_SUITE_P(All, AdsmRemote,
                         ::testing::Combine(::testing::Values("batch", "lazy", "rolling"),
                                            ::testing::Values(Mode::peer, Mode::not_peer, Mode::copy),
                                            ::testing::Bool()),
                         name);

}  // namespace
