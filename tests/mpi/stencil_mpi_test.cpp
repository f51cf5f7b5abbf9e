// The multi-device stencil split over MPI ranks as seed 003 Listing 4 does: each rank owns a slab of
// the cube's planes (with a halo plane either side) in shared objects on its device, and every step
// exchanges its boundary planes with its neighbours by MPI_Sendrecv straight on the shared objects
// (libhdsm_mpi moves them between the device and the network). Any number of ranks up to the cube's
// planes; under one rank there is nothing to exchange. Rank 0 gathers the result and checks it
// against the serial reference; with poisoning, a halo that never arrived is garbage.
#include "apps/multi.hpp"
#include "apps/stencil.hpp"
#include "support/test_support.hpp"

#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace {

using hdsm::apps::stencil_kernel::Planes;
using hdsm::apps::stencil_kernel::Shape;

TEST(MpiStencil, EveryRankCountMatchesTheReference) {
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const hdsm::apps::MultiApp& app = *hdsm::apps::find_multi_app("stencil");
  const std::size_t size = app.sizes(hdsm::apps::Scale::test).front();
  const Shape s = hdsm::apps::stencil_cube(size);
  if (static_cast<std::uint32_t>(ranks) > s.nz) GTEST_SKIP() << "more ranks than the cube has planes";
  const std::vector<float> volume = hdsm::apps::stencil_cube_volume(s);
  const std::size_t plane = std::size_t{s.nx} * s.ny;
  // Rank r owns planes [z0, z0 + planes): the first nz % ranks ranks one more than the others.
  const auto slab = [&](int r) {
    const std::uint32_t n = static_cast<std::uint32_t>(ranks), k = static_cast<std::uint32_t>(r);
    const std::uint32_t base = s.nz / n, extra = s.nz % n;
    return std::pair{k * base + std::min(k, extra), base + (k < extra ? 1u : 0u)};
  };
  const auto [z0, planes] = slab(rank);
  const std::int32_t origin = static_cast<std::int32_t>(z0) - 1;
  const int left = rank == 0 ? MPI_PROC_NULL : rank - 1;
  const int right = rank == ranks - 1 ? MPI_PROC_NULL : rank + 1;

  hdsm::Runtime rt{hdsm::test::fast_sim_config("rolling", "4KiB").set("HDSM_MPI_CHUNK", "16KiB")};
  float* u = rt.alloc<float>((planes + 2) * plane);
  float* next = rt.alloc<float>((planes + 2) * plane);
  // The slab and its halos from the initial volume (the halo outside the cube stays zero).
  for (std::uint32_t local = 0; local < planes + 2; ++local) {
    const std::int32_t z = origin + static_cast<std::int32_t>(local);
    if (z >= 0 && z < static_cast<std::int32_t>(s.nz))
      rt.memcpy(u + local * plane, volume.data() + static_cast<std::size_t>(z) * plane,
                plane * sizeof(float));
  }
  const auto launch = [&](std::uint32_t first, std::uint32_t count) {
    rt.call(hdsm::apps::stencil_slab_kernel(), hdsm::apps::stencil_slab_launch(s, count), hdsm::in(u),
            hdsm::inout(next), s, Planes{first, origin});
  };
  const int plane_floats = static_cast<int>(plane);
  for (unsigned step = 0; step < hdsm::apps::kStencilCubeSteps; ++step) {
    // The boundary planes first, then the exchange, then the interior.
    launch(1, 1);
    if (planes > 1) launch(planes, 1);
    MPI_Status status;
    // The last plane goes right while the left halo comes from the left, then the other way.
    ASSERT_EQ(MPI_Sendrecv(next + planes * plane, plane_floats, MPI_FLOAT, right, 0, next, plane_floats,
                           MPI_FLOAT, left, 0, MPI_COMM_WORLD, &status),
              MPI_SUCCESS);
    ASSERT_EQ(MPI_Sendrecv(next + plane, plane_floats, MPI_FLOAT, left, 1, next + (planes + 1) * plane,
                           plane_floats, MPI_FLOAT, right, 1, MPI_COMM_WORLD, &status),
              MPI_SUCCESS);
    if (planes > 2) launch(2, planes - 2);
    std::swap(u, next);
  }
  rt.sync();
  std::vector<float> mine(planes * plane), all(rank == 0 ? volume.size() : 0);
  rt.memcpy(mine.data(), u + plane, mine.size() * sizeof(float));
  std::vector<int> counts(static_cast<std::size_t>(ranks)), offsets(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    counts[static_cast<std::size_t>(r)] = static_cast<int>(slab(r).second * plane);
    offsets[static_cast<std::size_t>(r)] = static_cast<int>(slab(r).first * plane);
  }
  ASSERT_EQ(MPI_Gatherv(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, all.data(), counts.data(),
                        offsets.data(), MPI_FLOAT, 0, MPI_COMM_WORLD),
            MPI_SUCCESS);
  if (rank == 0) {
    EXPECT_EQ(hdsm::apps::compare(hdsm::apps::sampled(std::span<const float>(all)), app.run_reference(size),
                                  app.tolerance),
              "");
  }
  rt.free(u);
  rt.free(next);
}

}  // namespace
