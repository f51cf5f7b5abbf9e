// The multi-device stencil split over MPI ranks as seed 003 Listing 4 does: each rank owns half of
// the cube (a slab of planes with a halo plane either side) in shared objects on its device, and
// every step exchanges its boundary plane with the other rank by MPI_Sendrecv straight on the shared
// objects (libhdsm_mpi moves them between the device and the network). Rank 0 gathers the result and
// checks it against the serial reference; with poisoning, a halo that never arrived is garbage.
#include "apps/multi.hpp"
#include "apps/stencil.hpp"
#include "support/test_support.hpp"

#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

using hdsm::apps::stencil_kernel::Planes;
using hdsm::apps::stencil_kernel::Shape;

TEST(MpiStencil, TwoRanksMatchTheReference) {
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks != 2) GTEST_SKIP() << "runs under mpirun -np 2 (" << ranks << " ranks here)";
  const hdsm::apps::MultiApp& app = *hdsm::apps::find_multi_app("stencil");
  const std::size_t size = app.sizes(hdsm::apps::Scale::test).front();
  const Shape s = hdsm::apps::stencil_cube(size);
  const std::vector<float> volume = hdsm::apps::stencil_cube_volume(s);
  const std::size_t plane = std::size_t{s.nx} * s.ny;
  const std::uint32_t planes = s.nz / 2, z0 = static_cast<std::uint32_t>(rank) * planes;
  const std::int32_t origin = static_cast<std::int32_t>(z0) - 1;
  const int other = 1 - rank;

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
  // Rank 0 sends its last plane and receives into its right halo; rank 1 its first, into its left.
  const std::uint32_t send_plane = rank == 0 ? planes : 1, halo_plane = rank == 0 ? planes + 1 : 0;
  for (unsigned step = 0; step < hdsm::apps::kStencilCubeSteps; ++step) {
    launch(rank == 0 ? planes : 1, 1);  // the boundary plane first
    MPI_Status status;
    ASSERT_EQ(MPI_Sendrecv(next + send_plane * plane, static_cast<int>(plane), MPI_FLOAT, other, 0,
                           next + halo_plane * plane, static_cast<int>(plane), MPI_FLOAT, other, 0,
                           MPI_COMM_WORLD, &status),
              MPI_SUCCESS);
    launch(rank == 0 ? 1 : 2, planes - 1);  // the rest of the slab
    std::swap(u, next);
  }
  rt.sync();
  std::vector<float> mine(planes * plane), all(rank == 0 ? volume.size() : 0);
  rt.memcpy(mine.data(), u + plane, mine.size() * sizeof(float));
  MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, all.data(), static_cast<int>(mine.size()),
             MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_EQ(hdsm::apps::compare(hdsm::apps::sampled(std::span<const float>(all)), app.run_reference(size),
                                  app.tolerance),
              "");
  }
  rt.free(u);
  rt.free(next);
}

}  // namespace
