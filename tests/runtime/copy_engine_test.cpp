// The copy engine under Runtime::memcpy and memcpy_async (seed 003 §3.1, §5.2), on three sim devices
// of which 0 and 1 are peers and 2 is in no peer group, with poisoning on: every route delivers the
// right bytes and is the route the planner should pick (Stats::copy), overlapping ranges keep
// memmove semantics, ranges past the end of an object write nothing, and copies in opposite
// directions from several threads at once stay correct. Results are read back through the user
// view (page faults and the protocol's own fetches), not through the copy engine.
#include <hdsm/hdsm.hpp>

#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using hdsm::test::pattern;

using hdsm::CopyRoute;

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;
constexpr std::size_t kBytes = 4 * MiB;  // large enough that staging pageable memory pays

/// The first byte where [p, p + n) differs from `want`, or -1.
long first_difference(const void* p, const std::vector<unsigned char>& want) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < want.size(); ++i)
    if (b[i] != want[i]) return static_cast<long>(i);
  return -1;
}

hdsm::Config config(const std::string& protocol, const std::string& peers = "0-1") {
  return hdsm::test::fast_sim_config(protocol, "64KiB", "64MiB")
      .set("HDSM_SIM_DEVICES", "3")
      .set("HDSM_SIM_PEER", peers)
      .set("HDSM_STAGING_BYTES", "1MiB")
      .set("HDSM_STAGING_CHUNK", "64KiB");  // many chunks per copy
}

class CopyEngine : public ::testing::TestWithParam<const char*> {
 protected:
  CopyEngine() : rt_(config(GetParam())) {}

  bool device_resident() const { return std::string(GetParam()) != "batch"; }

  /// An object on `device` holding pattern(n, salt); under lazy and rolling only its device copy is
  /// valid (the whole object was overwritten by a bulk copy).
  unsigned char* object(std::size_t n, int device, unsigned salt) {
    auto* p = static_cast<unsigned char*>(rt_.alloc(n, device));
    const std::vector<unsigned char> data = pattern(n, salt);
    rt_.memcpy(p, data.data(), n);
    return p;
  }

  hdsm::RouteStats copies(CopyRoute r) const { return rt_.stats().copy(r); }

  hdsm::Runtime rt_;
};

TEST_P(CopyEngine, PeerDevicesCopyWithOnePeerDma) {
  unsigned char* src = object(kBytes, 0, 1);
  unsigned char* dst = object(kBytes, 1, 2);
  rt_.reset_stats();
  rt_.memcpy(dst, src, kBytes);
  if (device_resident()) {
    EXPECT_EQ(copies(CopyRoute::peer).transfers, 1u);
    EXPECT_EQ(copies(CopyRoute::peer).bytes, kBytes);
    EXPECT_EQ(rt_.stats().route(hdsm::Route::peer).bytes, kBytes);
    EXPECT_EQ(rt_.stats().route(hdsm::Route::d2h).bytes, 0u) << "nothing goes through the host";
  }
  EXPECT_EQ(first_difference(dst, pattern(kBytes, 1)), -1);
  EXPECT_EQ(first_difference(src, pattern(kBytes, 1)), -1);
  rt_.free(src);
  rt_.free(dst);
}

TEST_P(CopyEngine, DevicesWithoutPeerAccessStageThroughPinnedChunks) {
  for (const auto& [from, to] : {std::pair{0, 2}, std::pair{2, 1}}) {
    unsigned char* src = object(kBytes, from, 3);
    unsigned char* dst = object(kBytes, to, 4);
    rt_.reset_stats();
    rt_.memcpy(dst + 1000, src + 1000, kBytes - 3000);
    if (device_resident()) {
      EXPECT_EQ(copies(CopyRoute::staged).transfers, 1u) << from << " -> " << to;
      EXPECT_EQ(copies(CopyRoute::staged).bytes, kBytes - 3000);
      EXPECT_EQ(copies(CopyRoute::peer).transfers, 0u);
      EXPECT_EQ(rt_.stats().route(hdsm::Route::d2h).bytes, kBytes - 3000) << "each byte once down";
      EXPECT_EQ(rt_.stats().route(hdsm::Route::h2d).bytes, kBytes - 3000) << "and once up";
    }
    std::vector<unsigned char> want = pattern(kBytes, 4);
    std::memcpy(want.data() + 1000, pattern(kBytes, 3).data() + 1000, kBytes - 3000);
    EXPECT_EQ(first_difference(dst, want), -1) << from << " -> " << to;
    rt_.free(src);
    rt_.free(dst);
  }
}

TEST_P(CopyEngine, OneDeviceCopiesOnTheDevice) {
  unsigned char* src = object(kBytes, 2, 5);
  unsigned char* dst = object(kBytes, 2, 6);
  rt_.reset_stats();
  rt_.memcpy(dst, src, kBytes);
  if (device_resident()) {
    EXPECT_EQ(copies(CopyRoute::on_device).transfers, 1u);
    EXPECT_EQ(rt_.stats().action(hdsm::Action::bulk).bytes, 0u) << "nothing crosses a link";
  }
  EXPECT_EQ(first_difference(dst, pattern(kBytes, 5)), -1);
  rt_.free(src);
  rt_.free(dst);
}

TEST_P(CopyEngine, PageableHostMemoryIsStagedWhenLargeAndDirectWhenSmall) {
  auto* p = static_cast<unsigned char*>(rt_.alloc(kBytes, 2));
  const std::vector<unsigned char> data = pattern(kBytes, 7);
  rt_.reset_stats();
  rt_.memcpy(p, data.data(), kBytes);  // whole blocks: written on the device (lazy, rolling)
  if (device_resident()) {
    EXPECT_EQ(copies(CopyRoute::staged).transfers, 1u);
  }
  std::vector<unsigned char> back(kBytes);
  rt_.reset_stats();
  rt_.memcpy(back.data(), p, kBytes);
  if (device_resident()) {
    EXPECT_EQ(copies(CopyRoute::staged).transfers, 1u);
  }
  EXPECT_EQ(back, data);

  std::vector<unsigned char> small(4 * KiB);
  rt_.reset_stats();
  rt_.memcpy(small.data(), p + 12345, small.size());
  if (device_resident()) {
    EXPECT_EQ(copies(CopyRoute::direct).transfers, 1u);
  }
  EXPECT_EQ(0, std::memcmp(small.data(), data.data() + 12345, small.size()));
  EXPECT_EQ(first_difference(p, data), -1);
  rt_.free(p);
}

TEST_P(CopyEngine, PinnedHostMemoryIsOneDma) {
  hdsm::Device& d = rt_.device(0);
  auto* pinned = static_cast<unsigned char*>(d.alloc_pinned(kBytes));
  const std::vector<unsigned char> data = pattern(kBytes, 8);
  std::memcpy(pinned, data.data(), kBytes);
  auto* p = static_cast<unsigned char*>(rt_.alloc(kBytes, 1));
  rt_.reset_stats();
  rt_.memcpy(p, pinned, kBytes);
  std::memset(pinned, 0, kBytes);
  rt_.memcpy(pinned, p, kBytes);
  if (device_resident()) {
    EXPECT_EQ(copies(CopyRoute::direct).transfers, 2u);
    EXPECT_EQ(copies(CopyRoute::staged).transfers, 0u);
  }
  EXPECT_EQ(0, std::memcmp(pinned, data.data(), kBytes));
  EXPECT_EQ(first_difference(p, data), -1);
  rt_.free(p);
  d.free_pinned(pinned);
}

TEST_P(CopyEngine, OverlappingCopiesKeepMemmoveSemantics) {
  for (int device : {0, 2}) {
    unsigned char* p = object(kBytes, device, 9);
    std::vector<unsigned char> ref = pattern(kBytes, 9);
    const std::size_t n = kBytes / 2 + 4097;
    rt_.memcpy(p + 65536 + 3, p, n);  // upwards, over many blocks
    std::memmove(ref.data() + 65536 + 3, ref.data(), n);
    rt_.memmove(p + 11, p + 3 * 65536 + 1, n);  // downwards
    std::memmove(ref.data() + 11, ref.data() + 3 * 65536 + 1, n);
    rt_.memcpy(p + 5, p + 4, 100);  // by one byte, inside one block
    std::memmove(ref.data() + 5, ref.data() + 4, 100);
    EXPECT_EQ(first_difference(p, ref), -1) << "device " << device;
    rt_.free(p);
  }
}

TEST_P(CopyEngine, CopiesPastTheEndOfAnObjectWriteNothing) {
  unsigned char* src = object(MiB, 0, 11);
  unsigned char* dst = object(MiB, 2, 12);
  const std::size_t half = MiB / 2;
  for (bool async : {false, true}) {
    const auto copy = [&](void* to, const void* from, std::size_t n) {
      if (async)
        rt_.memcpy_async(to, from, n).wait();
      else
        rt_.memcpy(to, from, n);
    };
    try {
      copy(dst + half, src, MiB);  // the destination runs past its end
      ADD_FAILURE() << "no error for a destination past the end";
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("byte 524288"), std::string::npos) << e.what();
    }
    EXPECT_THROW(copy(dst, src + half, MiB), hdsm::InvalidArgument);  // the source does
    EXPECT_THROW(copy(dst, src + MiB, 1), hdsm::InvalidArgument);     // one past the end
    std::vector<unsigned char> host(MiB, 0x77);
    EXPECT_THROW(copy(host.data(), src + 1, MiB), hdsm::InvalidArgument);
    EXPECT_EQ(host, std::vector<unsigned char>(MiB, 0x77)) << "the host buffer is untouched";
  }
  EXPECT_EQ(first_difference(dst, pattern(MiB, 12)), -1) << "the destination is untouched";
  EXPECT_EQ(first_difference(src, pattern(MiB, 11)), -1);
  rt_.free(src);
  rt_.free(dst);
}

TEST_P(CopyEngine, AsyncCopiesCompleteThroughTheirEvent) {
  unsigned char* a = object(kBytes, 0, 13);
  unsigned char* b = static_cast<unsigned char*>(rt_.alloc(kBytes, 1));
  unsigned char* c = static_cast<unsigned char*>(rt_.alloc(kBytes, 2));
  rt_.reset_stats();
  hdsm::Event to_peer = rt_.memcpy_async(b, a, kBytes);
  hdsm::Event staged = rt_.memcpy_async(c, a, kBytes);  // both only read a
  to_peer.wait();
  staged.wait();
  EXPECT_TRUE(to_peer.query());
  if (device_resident()) {
    EXPECT_EQ(copies(CopyRoute::peer).transfers, 1u);
    EXPECT_EQ(copies(CopyRoute::staged).transfers, 1u);
  }
  std::vector<unsigned char> host(kBytes);
  rt_.memcpy_async(host.data(), c, kBytes).wait();
  EXPECT_EQ(host, pattern(kBytes, 13));
  EXPECT_EQ(first_difference(b, pattern(kBytes, 13)), -1);
  // Host memory only: plain memmove, the event complete at once.
  std::vector<unsigned char> x(100, 1), y(100, 2);
  hdsm::Event done = rt_.memcpy_async(x.data(), y.data(), 100);
  EXPECT_TRUE(done.query());
  EXPECT_EQ(x, y);
  rt_.free(a);
  rt_.free(b);
  rt_.free(c);
}

TEST_P(CopyEngine, ThreadsCopyInBothDirectionsAtOnce) {
  // Staged (0 <-> 2) and peer (0 <-> 1) copies in opposite directions, synchronous and asynchronous,
  // from four threads: the engine's queues are shared and must neither deadlock nor mix chunks.
  constexpr std::size_t n = MiB;
  struct Pair {
    int from, to;
    unsigned char *src = nullptr, *dst = nullptr;
  };
  std::vector<Pair> pairs{{0, 2}, {2, 0}, {0, 1}, {1, 0}};
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    pairs[i].src = object(n, pairs[i].from, static_cast<unsigned>(20 + i));
    pairs[i].dst = static_cast<unsigned char*>(rt_.alloc(n, pairs[i].to));
  }
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < pairs.size(); ++i)
    threads.emplace_back([&, i] {
      for (int round = 0; round < 6; ++round) {
        if (round % 2 == 0)
          rt_.memcpy(pairs[i].dst, pairs[i].src, n);
        else
          rt_.memcpy_async(pairs[i].dst, pairs[i].src, n).wait();
      }
    });
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    EXPECT_EQ(first_difference(pairs[i].dst, pattern(n, static_cast<unsigned>(20 + i))), -1)
        << pairs[i].from << " -> " << pairs[i].to;
    rt_.free(pairs[i].src);
    rt_.free(pairs[i].dst);
  }
}

INSTANTIATE_TEST_SUITE_P(Protocols, CopyEngine, ::testing::Values("batch", "lazy", "rolling"),
                         [](const auto& info) { return std::string(info.param); });

TEST(CopyEngineConfig, WithoutPeerGroupsEveryPairIsStaged) {
  hdsm::Runtime rt(config("rolling", "none"));
  auto* a = static_cast<unsigned char*>(rt.alloc(MiB, 0));
  auto* b = static_cast<unsigned char*>(rt.alloc(MiB, 1));
  const std::vector<unsigned char> data = pattern(MiB, 30);
  rt.memcpy(a, data.data(), MiB);
  rt.reset_stats();
  rt.memcpy(b, a, MiB);
  EXPECT_EQ(rt.stats().copy(CopyRoute::staged).transfers, 1u);
  EXPECT_EQ(rt.stats().copy(CopyRoute::peer).transfers, 0u);
  EXPECT_EQ(first_difference(b, data), -1);
  rt.free(a);
  rt.free(b);
}

TEST(CopyEngineConfig, APoolOfOneChunkStillCopiesEverything) {
  // One chunk for staged copies and host staging alike: plans are made again for one buffer, and
  // concurrent copies wait for the chunk in turn.
  hdsm::Runtime rt(config("rolling").set("HDSM_STAGING_BYTES", "64KiB").set("HDSM_COPY_BUFFERS", "4"));
  auto* a = static_cast<unsigned char*>(rt.alloc(kBytes, 0));
  auto* b = static_cast<unsigned char*>(rt.alloc(kBytes, 2));
  auto* c = static_cast<unsigned char*>(rt.alloc(kBytes, 2));
  auto* d = static_cast<unsigned char*>(rt.alloc(kBytes, 0));
  const std::vector<unsigned char> x = pattern(kBytes, 31), y = pattern(kBytes, 32);
  rt.memcpy(a, x.data(), kBytes);
  rt.memcpy(c, y.data(), kBytes);
  std::thread other([&] { rt.memcpy(d, c, kBytes); });
  rt.memcpy(b, a, kBytes);
  other.join();
  EXPECT_GE(rt.stats().copy(CopyRoute::staged).transfers, 2u);
  EXPECT_EQ(first_difference(b, x), -1);
  EXPECT_EQ(first_difference(d, y), -1);
  for (auto* p : {a, b, c, d}) rt.free(p);
}

TEST(CopyEngineConfig, StatisticsNameTheRoutes) {
  hdsm::Runtime rt(config("rolling"));
  auto* a = static_cast<unsigned char*>(rt.alloc(MiB, 0));
  auto* b = static_cast<unsigned char*>(rt.alloc(MiB, 2));
  const std::vector<unsigned char> data = pattern(MiB, 33);
  rt.memcpy(a, data.data(), MiB);
  rt.memcpy(b, a, MiB);
  const std::string text = rt.stats().to_string();
  EXPECT_NE(text.find("copies staged"), std::string::npos) << text;
  EXPECT_EQ(std::string(hdsm::to_string(CopyRoute::on_device)), "on-device");
  rt.free(a);
  rt.free(b);
}

}  // namespace
