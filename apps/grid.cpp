#include "apps/grid.hpp"

#include "apps/parboil/parboil.hpp"
#include "exec/executor.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace hdsm::apps {

struct ProcessTarget::Impl {
  explicit Impl(unsigned threads) : executor(exec::ExecutorOptions{threads}) {}
  exec::Executor executor;
};

ProcessTarget::ProcessTarget(unsigned threads) : impl_(std::make_unique<Impl>(threads)) {}
ProcessTarget::~ProcessTarget() = default;

void* ProcessTarget::alloc_bytes(std::size_t bytes) {
  constexpr std::size_t kPage = 4096;
  const std::size_t rounded = (bytes + kPage - 1) / kPage * kPage;
  void* p = std::aligned_alloc(kPage, rounded == 0 ? kPage : rounded);
  if (p == nullptr)
    throw Error(Errc::system, fmt::format("aligned_alloc of {} for a grid app", format_bytes(bytes)));
  std::memset(p, 0, rounded);
  return p;
}

void ProcessTarget::free(void* p) { std::free(p); }  // NOLINT(cppcoreguidelines-no-malloc)

void ProcessTarget::to_global(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }

void ProcessTarget::from_global(void* dst, const void* src, std::size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void ProcessTarget::launch(const Kernel& kernel, const Launch& shape, const ArgPack& args) {
  if (!kernel.host) throw Unsupported(fmt::format("kernel '{}' has no host body", kernel.name));
  kernel.host(impl_->executor, shape, args);
}

std::span<const GridApp> grid_apps() {
  static const std::array<GridApp, 6> apps{
      GridApp{"cp", "one launch a chunk of atoms adds its potential to the whole plane", parboil::cp_grid,
              parboil::cp().run_reference, parboil::cp().tolerance},
      GridApp{"mri-fhd",
              "one launch computes rhoPhi, then one a k-space chunk accumulates FhD of every voxel",
              parboil::mri_fhd_grid, parboil::mri_fhd().run_reference, parboil::mri_fhd().tolerance},
      GridApp{"tpacf", "one launch a pair of point sets writes every block's histogram", parboil::tpacf_grid,
              parboil::tpacf().run_reference, parboil::tpacf().tolerance},
      GridApp{"blackscholes", "every iteration's launch rewrites the call and put prices of every option",
              grid::blackscholes, grid::blackscholes_reference, 1e-4},
      GridApp{"scan", "every iteration scans the array in three launches (segments, totals, add)", grid::scan,
              grid::scan_reference, 0.0},
      GridApp{"mri-q", "one launch computes phiMag, then one a k-space chunk accumulates Q of every voxel",
              parboil::mri_q_grid, parboil::mri_q().run_reference, parboil::mri_q().tolerance},
  };
  return apps;
}

const GridApp* find_grid_app(std::string_view name) {
  for (const GridApp& app : grid_apps())
    if (app.name == name) return &app;
  return nullptr;
}

}  // namespace hdsm::apps
