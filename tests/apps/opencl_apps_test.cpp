// Every app's kernels have OpenCL C bodies: on an OpenCL device (PoCL where it is installed) the
// adsm version under every protocol and the explicit-copy version compute the app's reference
// output within the app's tolerance. Without an OpenCL device the tests skip and say why.
#include "apps/app.hpp"
#include "apps/stencil.hpp"
#include "apps/vecadd.hpp"
#include "support/test_support.hpp"

#include <hdsm/hdsm.hpp>

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

// The Parboil-like apps, then the stencil and vecadd workloads in the same form (vecadd has no
// explicit-copy version).
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
    return v;
  }();
  return all;
}

const App& workload(std::string_view name) {
  for (const App& app : workloads())
    if (app.name == name) return app;
  throw std::invalid_argument("no workload " + std::string(name));
}

// {workload, mode}: mode is a protocol for the adsm version or "explicit".
std::vector<std::tuple<std::string, std::string>> cases() {
  std::vector<std::tuple<std::string, std::string>> out;
  for (const App& app : workloads()) {
    for (const char* protocol : {"batch", "lazy", "rolling"}) out.emplace_back(app.name, protocol);
    if (app.run_explicit != nullptr) out.emplace_back(app.name, "explicit");
  }
  return out;
}

class AppsOnOpencl : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    if (hdsm::test::opencl_only_without_lsan())
      GTEST_SKIP() << "OpenCL under ASan runs in apps.opencl_without_lsan";
    const std::string& mode = std::get<1>(GetParam());
    auto config = hdsm::Config::defaults();
    config.set("HDSM_DEVICE", "opencl")
        .set("HDSM_OPENCL", "on")
        .set("HDSM_OPENCL_MEMORY", "256MiB")
        .set("HDSM_PROTOCOL", mode == "explicit" ? "rolling" : mode);
    try {
      rt_ = std::make_unique<hdsm::Runtime>(config);
    } catch (const hdsm::NoDevice& e) {
      GTEST_SKIP() << "no OpenCL device here: " << e.what();
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

TEST_P(AppsOnOpencl, MatchesReference) {
  const auto& [name, mode] = GetParam();
  const App& app = workload(name);
  const Output want = app.run_reference(Scale::test);
  ASSERT_FALSE(want.values.empty());

  hdsm::Device& device = rt_->default_device();
  ASSERT_EQ(device.properties().backend, hdsm::Backend::opencl) << device.properties().name;
  const Output got = mode == "explicit"
                         ? app.run_explicit(device, Scale::test)
                         : app.run_adsm(*rt_, static_cast<int>(device.properties().index), Scale::test);
  EXPECT_EQ(hdsm::apps::compare(got, want, app.tolerance), "")
      << name << ", " << mode << " on " << device.properties().description;
  EXPECT_GT(launches_on(device), 0u) << "no kernel ran on " << device.properties().name;
  EXPECT_EQ(device.memory_used(), 0u) << "the app leaked device memory";
}

INSTANTIATE_TEST_SUITE_P(opencl, AppsOnOpencl, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string s = std::get<0>(info.param) + "_" + std::get<1>(info.param);
  for (char& ch : s)
    if (ch == '-') ch = '_';
  return s;
});

}  // namespace
