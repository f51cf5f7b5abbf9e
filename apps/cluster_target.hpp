// The grid apps (apps/grid.hpp) on the cluster runtime: global memory is the cluster's, launches
// split over the ranks. For programs that link hdsm::cluster and run under mpirun.
#pragma once

#include "apps/grid.hpp"

#include <hdsm/cluster.hpp>

namespace hdsm::apps {

class ClusterTarget final : public GridTarget {
 public:
  void* alloc_bytes(std::size_t bytes) override { return cluster::alloc_bytes(bytes); }
  void free(void* p) override { cluster::free(p); }
  void to_global(void* dst, const void* src, std::size_t bytes) override { cluster::memcpy(dst, src, bytes); }
  void from_global(void* dst, const void* src, std::size_t bytes) override {
    cluster::memcpy(dst, src, bytes);
  }
  void launch(const Kernel& kernel, const Launch& shape, const ArgPack& args) override {
    cluster::launch(kernel, shape, args);
  }
};

}  // namespace hdsm::apps
