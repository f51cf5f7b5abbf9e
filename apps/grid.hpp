// Apps written for a grid of blocks over global memory, the CUDA model the cluster runtime runs
// (seed 004, Table 2): the program allocates global memory, copies inputs in, launches kernels and
// copies results out, through a GridTarget. Two targets run them: the cluster runtime on every rank
// of an MPI job (ClusterTarget, in programs that link hdsm::cluster), and ProcessTarget, the same
// kernels on one process's executor with plain memory: the baseline of the seed's Fig. 3. Constant
// data (CUDA's constant memory) is plain host memory that every rank computes the same way.
#pragma once

#include "apps/app.hpp"

#include <hdsm/kernel.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

namespace hdsm::apps {

class GridTarget {
 public:
  virtual ~GridTarget() = default;
  /// Zero-filled global memory.
  virtual void* alloc_bytes(std::size_t bytes) = 0;
  virtual void free(void* p) = 0;
  /// Host data into global memory (on the cluster, rank 0's data), and back out (on every rank).
  virtual void to_global(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void from_global(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void launch(const Kernel& kernel, const Launch& shape, const ArgPack& args) = 0;

  template <class T>
  T* alloc(std::size_t n) {
    return static_cast<T*>(alloc_bytes(n * sizeof(T)));
  }
  template <class... P, class... A>
  void call(const KernelOf<P...>& kernel, const Launch& shape, A&&... args) {
    static_assert(sizeof...(P) == sizeof...(A),
                  "the call passes a different number of arguments than the kernel takes");
    const HostArgs<P...> packed(static_cast<P>(std::forward<A>(args))...);
    launch(kernel, shape, packed.pack());
  }
};

/// The baseline: one process, the exec layer's executor, plain page-aligned memory.
class ProcessTarget final : public GridTarget {
 public:
  explicit ProcessTarget(unsigned threads = 0);
  ~ProcessTarget() override;
  void* alloc_bytes(std::size_t bytes) override;
  void free(void* p) override;
  void to_global(void* dst, const void* src, std::size_t bytes) override;
  void from_global(void* dst, const void* src, std::size_t bytes) override;
  void launch(const Kernel& kernel, const Launch& shape, const ArgPack& args) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct GridApp {
  std::string_view name;     // "cp", as in the seed's Table 2
  std::string_view pattern;  // one line: the kernels and what they write
  Output (*run)(GridTarget& target, Scale scale);
  Output (*run_reference)(Scale scale);
  double tolerance;
};

/// cp, mri-fhd, tpacf, blackscholes, scan, mri-q: the order of seed 004's Table 3.
std::span<const GridApp> grid_apps();
const GridApp* find_grid_app(std::string_view name);

namespace grid {
Output blackscholes(GridTarget& target, Scale scale);
Output blackscholes_reference(Scale scale);
Output scan(GridTarget& target, Scale scale);
Output scan_reference(Scale scale);
}  // namespace grid

}  // namespace hdsm::apps
