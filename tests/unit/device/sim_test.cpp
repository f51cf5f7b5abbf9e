// The sim backend: its link model, engines, bounce buffer and poisoning (its allocator, os::OffsetHeap,
// is tested in offset_heap_test.cpp).
#include <hdsm/hdsm.hpp>

#include "device/sim/link_model.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

hdsm::Config sim_config(const char* gbps = "0") {
  auto c = hdsm::Config::defaults();
  c.set("HDSM_SIM_MEMORY", "256MiB").set("HDSM_SIM_LINK_GBPS", gbps).set("HDSM_SIM_LATENCY_US", "0");
  return c;
}

// The host bus's arithmetic (its effect on copies is timed in tests/timing/copy_engine_timing_test.cpp).
// At 1 GB/s the bus carries one byte per nanosecond.
TEST(HostBus, OverlappingTransfersShareTheRate) {
  using ns = std::chrono::nanoseconds;
  const hdsm::sim::Clock::time_point t0{std::chrono::seconds(1)};
  hdsm::sim::HostBus bus(1);
  EXPECT_EQ(bus.carry(t0, 1000), t0 + ns(1000));  // an idle bus: the transfer's own bus time
  EXPECT_EQ(bus.carry(t0, 1000), t0 + ns(2000));  // at once with it: the two together take twice that
  EXPECT_EQ(bus.carry(t0 + ns(500), 1000), t0 + ns(3000));
  // Any number of overlapping transfers together move no more than the rate.
  for (int i = 0; i < 100; ++i) (void)bus.carry(t0 + ns(10 * i), 1000);
  EXPECT_EQ(bus.carry(t0, 0), t0 + ns(103000));
}

TEST(HostBus, OneStreamIsLimitedByItsLinkAlone) {
  using ns = std::chrono::nanoseconds;
  const hdsm::sim::Clock::time_point t0{std::chrono::seconds(1)};
  hdsm::sim::HostBus bus(2);
  // Transfers at half the bus rate, back to back (each 1000 bytes over a 1 GB/s link): the bus is
  // never what ends them.
  for (int i = 0; i < 10; ++i) EXPECT_LE(bus.carry(t0 + ns(1000 * i), 1000), t0 + ns(1000 * (i + 1)));
  // Two such streams at once (D2H and H2D of a staged copy) fill the bus and are still not delayed.
  for (int i = 10; i < 20; ++i)
    for (int stream = 0; stream < 2; ++stream)
      EXPECT_LE(bus.carry(t0 + ns(1000 * i), 1000), t0 + ns(1000 * (i + 1)));
  hdsm::sim::HostBus unlimited(0);
  EXPECT_FALSE(unlimited.limited());
  EXPECT_EQ(unlimited.carry(t0, std::size_t{1} << 30), t0);
}

TEST(SimDevice, PeerGroupsFollowConfiguration) {
  auto c = sim_config();
  c.set("HDSM_SIM_DEVICES", "4").set("HDSM_SIM_PEER", "0-1,2-3");
  hdsm::Runtime rt(c);
  ASSERT_EQ(rt.devices().size(), 4u);
  EXPECT_TRUE(rt.device(0).can_access_peer(rt.device(1)));
  EXPECT_TRUE(rt.device(3).can_access_peer(rt.device(2)));
  EXPECT_FALSE(rt.device(1).can_access_peer(rt.device(2)));
  EXPECT_EQ(rt.device(2).properties().peer_group, rt.device(3).properties().peer_group);
  auto bad = sim_config();
  bad.set("HDSM_SIM_DEVICES", "2").set("HDSM_SIM_PEER", "0-3");
  EXPECT_THROW(hdsm::Runtime{bad}, hdsm::ConfigError);
}

TEST(SimDevice, PoisonMarksNewFreedAndDiscardedMemory) {
  auto c = sim_config();
  c.set("HDSM_SIM_POISON", "1");
  hdsm::Runtime rt(c);
  auto& d = rt.default_device();
  auto q = d.create_queue();
  auto buf = d.alloc(4096);
  std::vector<unsigned char> out(4096);
  q->copy_to_host(out.data(), buf, 0, 4096);
  q->synchronize();
  EXPECT_EQ(out[0], 0xDE);
  EXPECT_EQ(out[1], 0xAD);
  std::vector<unsigned char> zeros(4096, 0);
  q->copy_to_device(buf, 0, zeros.data(), 4096);
  q->synchronize();
  d.discard(buf, 1024, 1024);
  q->copy_to_host(out.data(), buf, 0, 4096);
  q->synchronize();
  EXPECT_EQ(out[1023], 0);
  EXPECT_NE(out[1024] | out[1025] | out[1026] | out[1027], 0);
  EXPECT_EQ(out[2048], 0);
  d.free(buf);
}

TEST(SimDevice, WithoutPoisonDiscardKeepsData) {
  hdsm::Runtime rt(sim_config());
  auto& d = rt.default_device();
  auto q = d.create_queue();
  auto buf = d.alloc(64);
  std::vector<unsigned char> in(64, 7), out(64);
  q->copy_to_device(buf, 0, in.data(), 64);
  q->synchronize();
  d.discard(buf, 0, 64);
  q->copy_to_host(out.data(), buf, 0, 64);
  q->synchronize();
  EXPECT_EQ(out, in);
  d.free(buf);
}

// Out of memory with room in all but none in one piece says so, with the largest free range: "X of Y
// in use" alone read as if the buffer fitted.
TEST(SimDevice, OutOfMemoryWithScatteredFreeMemorySaysSo) {
  auto config = sim_config();
  config.set("HDSM_SIM_MEMORY", "1MiB").set("HDSM_SIM_BOUNDS_CHECK", "0");
  hdsm::Runtime rt(config);
  auto& d = rt.default_device();
  std::vector<hdsm::DeviceBuffer> quarters;
  for (int i = 0; i < 4; ++i) quarters.push_back(d.alloc(256 << 10));
  d.free(quarters[0]);
  d.free(quarters[2]);
  try {
    d.alloc(384 << 10);
    ADD_FAILURE() << "384 KiB fitted in two free 256 KiB ranges";
  } catch (const hdsm::OutOfDeviceMemory& e) {
    EXPECT_NE(std::string(e.what()).find("scattered: the largest free range is 256 KiB"), std::string::npos)
        << e.what();
  }
  try {
    d.alloc(768 << 10);
    ADD_FAILURE() << "768 KiB fitted in 512 KiB";
  } catch (const hdsm::OutOfDeviceMemory& e) {
    EXPECT_EQ(std::string(e.what()).find("scattered"), std::string::npos) << "it does not fit at all";
  }
  d.free(quarters[1]);
  d.free(quarters[3]);
}

// Pageable memory is staged through the bounce buffer: correct data at every chunk boundary.
TEST(SimDevice, PageableCopiesCrossBounceChunks) {
  hdsm::Runtime rt(sim_config());
  auto& d = rt.default_device();
  auto q = d.create_queue();
  const std::size_t n = (5 << 20) / 2 + 3;
  std::vector<unsigned char> in(n), out(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<unsigned char>(i / 4096 + i);
  auto buf = d.alloc(n);
  q->copy_to_device(buf, 0, in.data(), n);
  q->copy_to_host(out.data(), buf, 0, n);
  q->synchronize();
  EXPECT_EQ(in, out);
  const auto s = rt.stats();
  EXPECT_EQ(s.route(hdsm::Route::h2d).bytes, n);
  EXPECT_EQ(s.route(hdsm::Route::h2d).transfers, 3u);  // three bounce chunks
  d.free(buf);
}

TEST(SimDevice, FreeWaitsForQueuedWork) {
  hdsm::Runtime rt(sim_config("1"));
  auto& d = rt.default_device();
  auto q = d.create_queue();
  const std::size_t n = 8 << 20;
  auto buf = d.alloc(n);
  std::vector<unsigned char> host(n, 3);
  q->copy_to_device(buf, 0, host.data(), n);
  d.free(buf);  // must not return while the copy still writes into the freed range
  EXPECT_EQ(d.memory_used(), 0u);
  EXPECT_NO_THROW(q->synchronize());
}

// A failed kernel is reported once: by the first event after it (or synchronize(), had that come
// first). Before, every later event and the next synchronize() reported it again, so a layer that
// waits on events (the containers, the ADSM sync) failed with it forever.
TEST(SimDevice, AQueueReportsAFailureOnce) {
  hdsm::Runtime rt(sim_config());
  auto& d = rt.default_device();
  auto q = d.create_queue();
  const auto fails =
      hdsm::per_thread("fails_once", [](const hdsm::Thread&) { throw std::runtime_error("boom"); });
  const auto noop = hdsm::per_thread("noop_after", [](const hdsm::Thread&) {});
  q->launch(fails, hdsm::cover(1), {});
  const hdsm::Event after_failure = q->record();
  q->launch(noop, hdsm::cover(1), {});
  const hdsm::Event later = q->record();
  EXPECT_THROW(after_failure.wait(), hdsm::KernelFailure);
  EXPECT_NO_THROW(later.wait());
  EXPECT_NO_THROW(q->synchronize());
  q->launch(fails, hdsm::cover(1), {});
  EXPECT_THROW(q->synchronize(), hdsm::KernelFailure);  // no event in between: synchronize reports it
  EXPECT_NO_THROW(q->record().wait());
}

// Kernel code that waits for device work (another queue's synchronize, an event) would wait for
// good for the executor its block holds: InvalidArgument, not a hang.
TEST(SimDevice, KernelCodeMayNotWaitForDeviceWork) {
  hdsm::Runtime rt(sim_config());
  auto outer = rt.device(0).create_queue();
  static std::unique_ptr<hdsm::Queue> inner;
  inner = rt.device(1).create_queue();
  static const auto child = hdsm::per_thread("child", [](const hdsm::Thread&) {});
  const auto waits = hdsm::per_thread("waits_inside", [](const hdsm::Thread&, int how) {
    inner->launch(child, hdsm::cover(1), {});
    if (how == 0)
      inner->synchronize();
    else
      inner->record().wait();
  });
  for (int how : {0, 1}) {
    const hdsm::KernelArg args[] = {hdsm::KernelArg::value(how)};
    outer->launch(waits, hdsm::cover(1), args);
    try {
      outer->synchronize();
      ADD_FAILURE() << "the wait inside the kernel was accepted (" << how << ")";
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("from inside a kernel"), std::string::npos) << e.what();
    }
  }
  inner->synchronize();  // the child kernels ran
  inner.reset();
}

// The executor's own failures (shared memory beyond the block's) name the kernel and the device too.
TEST(SimDevice, ASharedMemoryOverflowNamesTheKernel) {
  hdsm::Runtime rt(sim_config());
  auto q = rt.default_device().create_queue();
  const auto greedy = hdsm::per_block("greedy_shared", [](hdsm::Block& b) { (void)b.shared<char>(1 << 30); });
  q->launch(greedy, hdsm::cover(1), {});
  try {
    q->synchronize();
    ADD_FAILURE() << "no failure reported";
  } catch (const hdsm::KernelFailure& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("kernel 'greedy_shared' on sim0 failed: block (0, 0, 0)", 0), 0u) << what;
  }
}

// A kernel that throws what is not a std::exception (`throw 42`) fails as a KernelFailure naming the
// kernel and the device, as any other failure; the bare int reached the program before.
TEST(SimDevice, AKernelThrowingANonStandardExceptionIsAKernelFailure) {
  hdsm::Runtime rt(sim_config());
  auto q = rt.default_device().create_queue();
  const auto throws_int = hdsm::per_thread("throws_int", [](const hdsm::Thread&) { throw 42; });
  q->launch(throws_int, hdsm::cover(4), {});
  try {
    q->synchronize();
    ADD_FAILURE() << "no failure reported";
  } catch (const hdsm::KernelFailure& e) {
    EXPECT_STREQ(e.what(),
                 "kernel 'throws_int' on sim0 failed: it threw an exception that is not a std::exception");
  }
}

}  // namespace
