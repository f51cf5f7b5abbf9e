// The copy engine's route planner (src/transfer/plan.hpp): which route and which steps it chooses
// for each pair of places, and that every staged plan moves each byte exactly once through slots
// that are never overwritten before they are read. No device is involved: plans are values.
#include "transfer/plan.hpp"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <vector>

namespace {

using hdsm::CopyRoute;
using hdsm::transfer::CopyPlan;
using hdsm::transfer::Endpoint;
using hdsm::transfer::Lane;
using hdsm::transfer::Op;
using hdsm::transfer::Options;
using hdsm::transfer::Place;
using hdsm::transfer::plan_copy;
using hdsm::transfer::Step;
using hdsm::transfer::Topology;

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;

/// Three devices on 3 GB/s links with 5 us latency (the sim's defaults); 0 and 1 are peers.
Topology machine(double gbps = 3, double latency_us = 5) {
  Topology t;
  t.devices.assign(3, {2, gbps, gbps, latency_us});
  t.peer.assign(9, 0);
  t.peer[0 * 3 + 1] = t.peer[1 * 3 + 0] = 1;
  return t;
}

const Endpoint dev0 = Endpoint::on(0), dev1 = Endpoint::on(1), dev2 = Endpoint::on(2);
const Endpoint pageable = Endpoint::host(false), pinned = Endpoint::host(true);

/// Checks what makes a staged plan correct whatever the timing, given that each step waits for the
/// previous step that used its slot: the chunks tile [0, bytes) in order; each slot is filled and
/// then emptied, alternately, by steps naming the same chunk; every chunk fits the largest chunk.
void expect_sound_staging(const CopyPlan& p) {
  ASSERT_EQ(p.route, CopyRoute::staged);
  ASSERT_GT(p.buffers, 0u);
  std::map<int, const Step*> filled;  // slot -> the producer whose chunk it holds
  std::size_t produced = 0, consumed = 0;
  for (const Step& s : p.steps) {
    ASSERT_GE(s.slot, 0);
    ASSERT_LT(s.slot, static_cast<int>(p.buffers));
    ASSERT_LE(s.bytes, p.chunk);
    ASSERT_GT(s.bytes, 0u);
    if (s.to == Place::slot) {
      EXPECT_EQ(s.from, Place::source);
      EXPECT_EQ(filled.count(s.slot), 0u) << "slot " << s.slot << " overwritten before it was read";
      EXPECT_EQ(s.offset, produced) << "chunks must tile the copy in order";
      produced += s.bytes;
      filled[s.slot] = &s;
    } else {
      EXPECT_EQ(s.from, Place::slot);
      EXPECT_EQ(s.to, Place::destination);
      ASSERT_EQ(filled.count(s.slot), 1u) << "slot " << s.slot << " read before it was filled";
      EXPECT_EQ(s.offset, filled[s.slot]->offset);
      EXPECT_EQ(s.bytes, filled[s.slot]->bytes);
      EXPECT_EQ(s.offset, consumed);
      consumed += s.bytes;
      filled.erase(s.slot);
    }
  }
  EXPECT_EQ(produced, p.bytes);
  EXPECT_EQ(consumed, p.bytes);
  EXPECT_TRUE(filled.empty());
}

TEST(CopyPlan, HostToHostIsOneCpuCopy) {
  const CopyPlan p = plan_copy(pageable, pinned, 4096, machine(), {});
  EXPECT_EQ(p.route, CopyRoute::host);
  ASSERT_EQ(p.steps.size(), 1u);
  EXPECT_EQ(p.steps[0], (Step{Op::host_copy, Lane::host, Place::source, Place::destination, 0, 4096, -1}));
  EXPECT_EQ(p.link_bytes(), 0u);
}

TEST(CopyPlan, OneDeviceCopiesOnTheDevice) {
  const CopyPlan p = plan_copy(dev2, dev2, 64 * MiB, machine(), {});
  EXPECT_EQ(p.route, CopyRoute::on_device);
  ASSERT_EQ(p.steps.size(), 1u);
  EXPECT_EQ(p.steps[0],
            (Step{Op::on_device, Lane::destination, Place::source, Place::destination, 0, 64 * MiB, -1}));
  EXPECT_EQ(p.link_bytes(), 0u);
}

TEST(CopyPlan, PinnedHostMemoryIsOneDma) {
  for (std::size_t bytes : {std::size_t{4096}, 256 * MiB}) {
    const CopyPlan up = plan_copy(pinned, dev1, bytes, machine(), {});
    EXPECT_EQ(up.route, CopyRoute::direct);
    ASSERT_EQ(up.steps.size(), 1u);
    EXPECT_EQ(up.steps[0],
              (Step{Op::to_device, Lane::destination, Place::source, Place::destination, 0, bytes, -1}));
    const CopyPlan down = plan_copy(dev1, pinned, bytes, machine(), {});
    EXPECT_EQ(down.route, CopyRoute::direct);
    ASSERT_EQ(down.steps.size(), 1u);
    EXPECT_EQ(down.steps[0],
              (Step{Op::to_host, Lane::source, Place::source, Place::destination, 0, bytes, -1}));
  }
}

TEST(CopyPlan, PeersUsePeerDma) {
  for (std::size_t bytes : {std::size_t{4096}, 256 * KiB, 8 * MiB, 256 * MiB}) {
    for (const auto& [src, dst] : {std::pair{dev0, dev1}, std::pair{dev1, dev0}}) {
      const CopyPlan p = plan_copy(src, dst, bytes, machine(), {});
      EXPECT_EQ(p.route, CopyRoute::peer) << bytes;
      ASSERT_EQ(p.steps.size(), 1u);
      EXPECT_EQ(p.steps[0],
                (Step{Op::from_peer, Lane::destination, Place::source, Place::destination, 0, bytes, -1}));
      EXPECT_EQ(p.link_bytes(), bytes);
    }
  }
}

TEST(CopyPlan, ASlowPeerLinkIsStagedAround) {
  Topology t = machine(6);
  t.peer_gbps = 1;  // e.g. peer access across a root complex
  const CopyPlan p = plan_copy(dev0, dev1, 64 * MiB, t, {});
  EXPECT_EQ(p.route, CopyRoute::staged);
  expect_sound_staging(p);
  t.peer_gbps = 6;
  EXPECT_EQ(plan_copy(dev0, dev1, 64 * MiB, t, {}).route, CopyRoute::peer);
}

TEST(CopyPlan, DevicesWithoutPeerAccessAreDoubleBufferedThroughTheHost) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{4096}, 256 * KiB, 8 * MiB + 12345, 256 * MiB}) {
    const CopyPlan p = plan_copy(dev0, dev2, bytes, machine(), {});
    SCOPED_TRACE(p.describe());
    expect_sound_staging(p);
    EXPECT_LE(p.chunk, Options{}.chunk_bytes);
    EXPECT_EQ(p.link_bytes(), 2 * bytes) << "D2H and H2D each cross a link";
    for (const Step& s : p.steps) {
      if (s.to == Place::slot)
        EXPECT_EQ(s,
                  (Step{Op::to_host, Lane::source, Place::source, Place::slot, s.offset, s.bytes, s.slot}));
      else
        EXPECT_EQ(s, (Step{Op::to_device, Lane::destination, Place::slot, Place::destination, s.offset,
                           s.bytes, s.slot}));
    }
    if (p.steps.size() >= 4) {
      // Two buffers: the D2H of chunk 1 is issued before the H2D of chunk 0, so they overlap.
      EXPECT_EQ(p.buffers, 2u);
      EXPECT_EQ(p.steps[0].slot, 0);
      EXPECT_EQ(p.steps[1].slot, 1);
      EXPECT_EQ(p.steps[1].op, Op::to_host);
      EXPECT_EQ(p.steps[2].op, Op::to_device);
      EXPECT_EQ(p.steps[2].slot, 0);
    }
  }
}

TEST(CopyPlan, BuffersAndChunkComeFromTheOptions) {
  Options three{.buffers = 3, .chunk_bytes = 1 * MiB};
  const CopyPlan p = plan_copy(dev2, dev0, 64 * MiB, machine(), three);
  expect_sound_staging(p);
  EXPECT_EQ(p.buffers, 3u);
  EXPECT_EQ(p.chunk, 1 * MiB);
  // Producers run two chunks ahead: D2H 0, D2H 1, D2H 2, H2D 0, ...
  EXPECT_EQ(p.steps[0].op, Op::to_host);
  EXPECT_EQ(p.steps[1].op, Op::to_host);
  EXPECT_EQ(p.steps[2].op, Op::to_host);
  EXPECT_EQ(p.steps[3].op, Op::to_device);

  const CopyPlan one = plan_copy(dev2, dev0, 8 * MiB, machine(), {.buffers = 1});
  expect_sound_staging(one);
  EXPECT_EQ(one.buffers, 1u);
  for (std::size_t i = 0; i < one.steps.size(); ++i)
    EXPECT_EQ(one.steps[i].op, i % 2 == 0 ? Op::to_host : Op::to_device) << "one buffer: no overlap";
}

TEST(CopyPlan, LargeCopiesUseLargeChunksSmallOnesSmallChunks) {
  const CopyPlan p = plan_copy(dev0, dev2, 64 * MiB, machine(), {});
  expect_sound_staging(p);
  EXPECT_EQ(p.chunk, 2 * MiB) << p.describe();
  // The model's time is close to the link's: >= 90 % of 3 GB/s one way, and no better than
  // (bytes + one chunk) / rate, the bound of a two-stage pipeline.
  const double link_us = static_cast<double>(64 * MiB) / 3e3;
  EXPECT_LT(p.cost_us, link_us / 0.9) << p.describe();
  EXPECT_GT(p.cost_us, static_cast<double>(64 * MiB + p.chunk) / 3e3);
  const CopyPlan eight = plan_copy(dev0, dev2, 8 * MiB, machine(), {});
  EXPECT_LT(eight.chunk, 2 * MiB) << eight.describe();
  EXPECT_GE(eight.chunk, Options{}.min_chunk_bytes) << eight.describe();
}

TEST(CopyPlan, StagingBeatsTheTwoCopyVersionFromEightMiB) {
  // The target, in the model: staged >= 85 % of the link rate for >= 8 MiB.
  for (std::size_t bytes : {8 * MiB, 32 * MiB, 256 * MiB}) {
    const CopyPlan p = plan_copy(dev0, dev2, bytes, machine(), {});
    EXPECT_LT(p.cost_us, static_cast<double>(bytes) / 3e3 / 0.85) << p.describe();
  }
}

TEST(CopyPlan, PageableHostMemoryIsStagedWhenLarge) {
  const CopyPlan small_up = plan_copy(pageable, dev0, 4096, machine(), {});
  EXPECT_EQ(small_up.route, CopyRoute::direct) << small_up.describe();
  const CopyPlan small_down = plan_copy(dev0, pageable, 4096, machine(), {});
  EXPECT_EQ(small_down.route, CopyRoute::direct) << small_down.describe();

  const CopyPlan up = plan_copy(pageable, dev0, 64 * MiB, machine(), {});
  expect_sound_staging(up);
  EXPECT_EQ(up.link_bytes(), 64 * MiB);
  // A host producer is followed at once by its DMA: the CPU copies chunk i + 1 while it runs.
  for (std::size_t i = 0; i < up.steps.size(); ++i) {
    const Step& s = up.steps[i];
    EXPECT_EQ(s.op, i % 2 == 0 ? Op::host_copy : Op::to_device);
    EXPECT_EQ(s.lane, i % 2 == 0 ? Lane::host : Lane::destination);
  }
  const CopyPlan down = plan_copy(dev0, pageable, 64 * MiB, machine(), {});
  expect_sound_staging(down);
  EXPECT_EQ(down.steps[0].op, Op::to_host);
  EXPECT_EQ(down.steps[1].op, Op::to_host);
  EXPECT_EQ(down.steps[2].op, Op::host_copy);
  EXPECT_EQ(down.steps[2].lane, Lane::host);
  // The two-copy version (CPU copy and DMA one after the other) is what staging must beat.
  const CopyPlan two_copy =
      plan_copy(dev0, pageable, 64 * MiB, machine(), {.buffers = 1, .chunk_bytes = 64 * MiB});
  EXPECT_LT(down.cost_us * 1.3, two_copy.cost_us);
}

TEST(CopyPlan, SmallCopiesSplitOnlyWhereOverlapPays) {
  // 256 KiB at 3 GB/s: one chunk each way (2 x 87 us) loses to two overlapped halves.
  const CopyPlan p = plan_copy(dev0, dev2, 256 * KiB, machine(), {});
  expect_sound_staging(p);
  EXPECT_GE(p.steps.size(), 4u) << p.describe();
  // With a huge latency per transfer, fewer chunks win.
  const CopyPlan slow = plan_copy(dev0, dev2, 256 * KiB, machine(3, 500), {});
  expect_sound_staging(slow);
  EXPECT_EQ(slow.steps.size(), 2u) << slow.describe();
}

TEST(CopyPlan, NoBuffersMeansDirectWhereItCan) {
  const Options none{.buffers = 0};
  EXPECT_EQ(plan_copy(pageable, dev0, 64 * MiB, machine(), none).route, CopyRoute::direct);
  EXPECT_EQ(plan_copy(dev0, pageable, 64 * MiB, machine(), none).route, CopyRoute::direct);
  const CopyPlan only = plan_copy(dev0, dev2, 64 * MiB, machine(), none);
  expect_sound_staging(only);
  EXPECT_EQ(only.buffers, 1u) << "between devices without peer access staging is the only route";
}

TEST(CopyPlan, ZeroBytesHaveNoSteps) {
  EXPECT_TRUE(plan_copy(dev0, dev2, 0, machine(), {}).steps.empty());
  EXPECT_EQ(plan_copy(dev0, dev2, 0, machine(), {}).route, CopyRoute::staged);
  EXPECT_EQ(plan_copy(dev0, dev1, 0, machine(), {}).route, CopyRoute::peer);
  EXPECT_TRUE(plan_copy(pageable, dev0, 0, machine(), {}).steps.empty());
}

TEST(CopyPlan, IsAPureFunctionOfItsInputs) {
  const CopyPlan a = plan_copy(dev0, dev2, 10 * MiB + 3, machine(), {});
  const CopyPlan b = plan_copy(dev0, dev2, 10 * MiB + 3, machine(), {});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, plan_copy(dev0, dev2, 10 * MiB + 3, machine(), {.buffers = 3}));
}

TEST(CopyPlan, UnknownDevicesAreRejected) {
  EXPECT_THROW(plan_copy(Endpoint::on(3), dev0, 10, machine(), {}), std::invalid_argument);
  EXPECT_THROW(plan_copy(dev0, Endpoint::on(7), 10, machine(), {}), std::invalid_argument);
}

TEST(CopyPlan, DescribeNamesRouteAndChunks) {
  const CopyPlan p = plan_copy(dev0, dev2, 8 * MiB, machine(), {});
  const std::string text = p.describe();
  EXPECT_NE(text.find("staged 8 MiB device 0 -> device 2"), std::string::npos) << text;
  EXPECT_NE(text.find("2 buffers"), std::string::npos) << text;
  EXPECT_EQ(plan_copy(dev0, dev1, 8 * MiB, machine(), {}).describe(), "peer 8 MiB device 0 -> device 1");
}

}  // namespace
