// Every app's kernels have OpenCL C and CUDA bodies: on an OpenCL device (PoCL where it is
// installed) and on a CUDA device (a GPU, scripts/gpu-check), the adsm version under every protocol
// (unified memory too, on CUDA) and the explicit-copy version compute the app's reference output
// within the app's tolerance. Without such a device, or without the CUDA bodies (a build without
// nvcc), the tests skip and say why.
#include "apps/app.hpp"
#include "apps/cuda.hpp"
#include "apps/iterate.hpp"
#include "apps/stencil.hpp"
#include "apps/vecadd.hpp"
#include "support/test_support.hpp"

#include <hdsm/hdsm.hpp>
#include <hdsm/kernel_registry.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace {

using hdsm::apps::App;
using hdsm::apps::Output;
using hdsm::apps::Scale;

const hdsm::apps::StencilProblem kStencil{40, 24, 16, 5, 2};
constexpr std::size_t kVecaddLength = 50'000;  // not a multiple of the launch block

// The Parboil-like apps, then the stencil, vecadd and iterate workloads in the same form (vecadd has
// no explicit-copy version).
const std::vector<App>& workloads() {
  static const std::vector<App> all = [] {
    const auto parboil = hdsm::apps::parboil_apps();
    std::vector<App> v(parboil.begin(), parboil.end());
    v.push_back(
        {"stencil", "",
         [](hdsm::Runtime& rt, int d, Scale) { return hdsm::apps::stencil_adsm(rt, d, kStencil, -1); },
         [](hdsm::Device& d, Scale) { return hdsm::apps::stencil_explicit(d, kStencil, -1); },
         [](Scale) { return hdsm::apps::stencil_reference(kStencil); }, hdsm::apps::kStencilTolerance});
    v.push_back(
        {"vecadd", "",
         [](hdsm::Runtime& rt, int d, Scale) { return hdsm::apps::vecadd_adsm(rt, d, kVecaddLength); },
         nullptr, [](Scale) { return hdsm::apps::vecadd_reference(kVecaddLength); }, 0});
    v.push_back(hdsm::apps::iterate_app());
    return v;
  }();
  return all;
}

const App& workload(std::string_view name) {
  for (const App& app : workloads())
    if (app.name == name) return app;
  throw std::invalid_argument("no workload " + std::string(name));
}

// {backend, workload, mode}: mode is a protocol for the adsm version ("um-prefetch": um with
// HDSM_UM_PREFETCH=1) or "explicit". Unified memory is a CUDA mode: OpenCL devices have none.
// host-mapped runs everywhere (on a discrete GPU its kernels reach host memory over the link).
using Case = std::tuple<std::string, std::string, std::string>;
std::vector<Case> cases(const std::string& backend) {
  std::vector<std::string> protocols{"batch", "lazy", "rolling", "host-mapped"};
  if (backend == "cuda") protocols.insert(protocols.end(), {"um", "um-prefetch"});
  std::vector<Case> out;
  for (const App& app : workloads()) {
    for (const std::string& protocol : protocols) out.emplace_back(backend, app.name, protocol);
    if (app.run_explicit != nullptr) out.emplace_back(backend, app.name, "explicit");
  }
  return out;
}

class AppsOnDevice : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const auto& [backend, name, mode] = GetParam();
    if (backend == "opencl" && hdsm::test::opencl_only_without_lsan())
      GTEST_SKIP() << "OpenCL under ASan runs in apps.opencl_without_lsan";
    if (backend == "cuda" && !hdsm::apps::have_cuda_bodies())
      GTEST_SKIP() << "hdsm_apps has no CUDA kernel bodies (CMake found no CUDA compiler at configure time)";
    std::string protocol = mode;
    if (mode == "explicit") protocol = "rolling";
    if (mode == "um-prefetch") protocol = "um";
    auto config = hdsm::Config::defaults();
    config.set("HDSM_DEVICE", backend)
        .set(backend == "opencl" ? "HDSM_OPENCL" : "HDSM_CUDA", "on")
        .set(backend == "opencl" ? "HDSM_OPENCL_MEMORY" : "HDSM_CUDA_MEMORY", "256MiB")
        .set("HDSM_PROTOCOL", protocol)
        .set("HDSM_UM_PREFETCH", mode == "um-prefetch" ? "1" : "0");
    try {
      rt_ = std::make_unique<hdsm::Runtime>(config);
    } catch (const hdsm::NoDevice& e) {
      GTEST_SKIP() << backend << ": " << e.what();
    }
  }

  // The kernel launches the runtime counted on `device`.
  std::uint64_t launches_on(const hdsm::Device& device) const {
    for (const hdsm::DeviceStats& d : rt_->stats().devices)
      if (d.name == device.properties().name) return d.kernel_launches;
    return 0;
  }

  std::unique_ptr<hdsm::Runtime> rt_;
};

TEST_P(AppsOnDevice, MatchesReference) {
  const auto& [backend, name, mode] = GetParam();
  const App& app = workload(name);
  const Output want = app.run_reference(Scale::test);
  ASSERT_FALSE(want.values.empty());

  hdsm::Device& device = rt_->default_device();
  ASSERT_EQ(hdsm::to_string(device.properties().backend), backend) << device.properties().name;
  const Output got = mode == "explicit"
                         ? app.run_explicit(device, Scale::test)
                         : app.run_adsm(*rt_, static_cast<int>(device.properties().index), Scale::test);
  EXPECT_EQ(hdsm::apps::compare(got, want, app.tolerance), "")
      << name << ", " << mode << " on " << device.properties().description;
  EXPECT_GT(launches_on(device), 0u) << "no kernel ran on " << device.properties().name;
  EXPECT_EQ(device.memory_used(), 0u) << "the app leaked device memory";
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = std::get<1>(info.param) + "_" + std::get<2>(info.param);
  for (char& ch : s)
    if (ch == '-') ch = '_';
  return s;
}

// Every app kernel's CUDA body is registered by name when the program loads (HDSM_CUDA_KERNEL in
// apps/cuda/*.cu): their objects are linked into the program even though nothing refers to them.
// Only the registry is read, so this runs without a GPU.
TEST(AppsCudaBodies, EveryAppKernelFindsItsRegisteredBody) {
  if (!hdsm::apps::have_cuda_bodies())
    GTEST_SKIP() << "hdsm_apps has no CUDA kernel bodies (CMake found no CUDA compiler at configure time)";
  for (const char* name : {"cp_energy",         "fft_stage",       "fft_cross",      "merge_pass",
                           "merge_split",       "mriq_phi_mag",    "mriq_compute_q", "mrifhd_rho_phi",
                           "mrifhd_compute_fh", "pns_simulate",    "rpes_pairs",     "rpes_eri",
                           "sad_4x4",           "sad_8x8",         "sad_16x16",      "stencil7",
                           "stencil_slab",      "tpacf_histogram", "vecadd",         "relax"})
    EXPECT_NE(hdsm::detail::registered_cuda_body(name), nullptr) << name;
}

INSTANTIATE_TEST_SUITE_P(opencl, AppsOnDevice, ::testing::ValuesIn(cases("opencl")), case_name);
INSTANTIATE_TEST_SUITE_P(cuda, AppsOnDevice, ::testing::ValuesIn(cases("cuda")), case_name);

}  // namespace
