// The staging pipeline's memory (src/device/staging_pool.hpp): the one leasing rule, staging
// chunks (pinned when a chunk is free, pageable otherwise), the N-buffered ring of file I/O and
// the registry of a runtime's pinned pools.
#include "device/staging_pool.hpp"
#include "support/test_support.hpp"

#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

namespace {

class Staging : public ::testing::Test {
 protected:
  hdsm::Runtime rt_{hdsm::test::fast_sim_config()};
  hdsm::Device& device_ = rt_.default_device();
};

TEST_F(Staging, LeaseTakesWhatIsFreeAndNeverWaitsForASecondChunk) {
  hdsm::StagingPool pool(device_, 3 * 4096, 4096);
  {
    auto all = pool.lease(5, hdsm::StagingPool::Wait::for_first);
    EXPECT_EQ(all.size(), 3u) << "the first waited for, the rest only if free";
    EXPECT_TRUE(pool.lease(1, hdsm::StagingPool::Wait::never).empty()) << "none free: nothing, no wait";
  }
  EXPECT_EQ(pool.lease(2, hdsm::StagingPool::Wait::never).size(), 2u) << "leases end when dropped";
  EXPECT_TRUE(pool.lease(0, hdsm::StagingPool::Wait::for_first).empty());
}

TEST_F(Staging, AChunkIsPinnedWhenOneIsFreeAndPageableOtherwise) {
  hdsm::StagingPool pool(device_, 4096, 4096);
  hdsm::BufferCache cache(1 << 20);  // outlives the chunks that keep its buffers
  hdsm::StagingChunk first, second, large;
  first.acquire(&pool, 1000);
  EXPECT_TRUE(first.pinned());
  EXPECT_TRUE(device_.is_pinned(first.data(), 4096));
  second.acquire(&pool, 1000);  // the pool's one chunk is lent: pageable, without waiting
  EXPECT_FALSE(second.pinned());
  large.acquire(&pool, 8192, hdsm::StagingPool::Wait::never, &cache);  // above a chunk: pageable
  EXPECT_FALSE(large.pinned());
  std::memset(large.data(), 1, 8192);
}

TEST_F(Staging, SettleWaitsForTheDeviceWorkAndReportsItsError) {
  hdsm::StagingPool pool(device_, 4096, 4096);
  hdsm::StagingChunk chunk;
  chunk.acquire(&pool, 4096);
  const hdsm::DeviceBuffer buffer = device_.alloc(4096);
  auto queue = device_.create_queue();
  std::memset(chunk.data(), 7, 4096);
  queue->copy_to_device(buffer, 0, chunk.data(), 4096);
  chunk.pending().push_back(queue->record());
  std::exception_ptr error;
  queue->synchronize();
  EXPECT_TRUE(chunk.settled(error));
  EXPECT_FALSE(error);
  EXPECT_TRUE(chunk.pending().empty());
  // A failing kernel's event: settle rethrows it.
  auto fails =
      hdsm::per_thread("fails", [](const hdsm::Thread&) { throw std::runtime_error("kernel failed"); });
  queue->launch(fails, hdsm::cover(1), {});
  chunk.pending().push_back(queue->record());
  EXPECT_ANY_THROW(chunk.settle());
  EXPECT_NO_THROW(queue->synchronize());  // reported once, by the event
  device_.free(buffer);
}

TEST_F(Staging, ARingTakesUpToItsDepthAndAtLeastOne) {
  hdsm::StagingPool pool(device_, 3 * 4096, 4096);
  hdsm::StagingRing ring(pool, 2);
  EXPECT_EQ(ring.count(), 2u);
  EXPECT_EQ(ring.chunk(), 4096u);
  EXPECT_NE(ring.data(0), ring.data(1));
  EXPECT_EQ(ring.data(2), ring.data(0)) << "chunk i uses memory i % count";
  hdsm::StagingRing rest(pool, 2);
  EXPECT_EQ(rest.count(), 1u) << "one chunk was left";
  // None left: pageable memory of its own, page-aligned as the pool's chunks are (O_DIRECT I/O
  // through it was EINVAL: malloc's blocks of this size start 16 bytes into a page).
  hdsm::StagingPool big(device_, 1 << 20, 1 << 20);
  const auto lent = big.lease(1, hdsm::StagingPool::Wait::never);
  hdsm::StagingRing own(big, 2);
  ASSERT_EQ(own.count(), 1u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(own.data(0)) % 4096, 0u);
}

TEST_F(Staging, PoolsAreKeptByNameAndTheirErrorsNameTheirKnobs) {
  hdsm::PinnedPools pools(device_);
  hdsm::StagingPool& a = pools.get("staging", 8192, 4096, {});
  EXPECT_EQ(&pools.get("staging", 1, 1, {}), &a) << "made once, with its first user's sizes";
  EXPECT_NE(&pools.get("mpi", 4096, 4096, {"HDSM_MPI_STAGING_BYTES", "HDSM_MPI_CHUNK"}), &a);
  try {
    pools.get("tiny", 100, 4096, {"HDSM_MPI_STAGING_BYTES", "HDSM_MPI_CHUNK"});
    FAIL() << "a pool without a chunk was made";
  } catch (const hdsm::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("HDSM_MPI_STAGING_BYTES"), std::string::npos) << e.what();
  }
}

}  // namespace
