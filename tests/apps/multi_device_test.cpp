// The multi-device apps (apps/multi.hpp: stencil, fft, mergesort) compute their references over 1, 2
// and 4 sim devices, in the hdsm version (with peer groups, where the copy engine moves the exchange
// by peer DMA, and without, where it stages it through pinned host memory; each route is checked in
// the statistics) and in the explicit-copy version, and on OpenCL where it is installed. The inputs
// are random and the sim devices poison memory nobody wrote, so an exchange that is missing, late or
// sent to the wrong place shows up as wrong values.
#include "apps/cuda.hpp"
#include "apps/multi.hpp"
#include "support/test_support.hpp"

#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace {

using hdsm::apps::MultiApp;
using hdsm::apps::Scale;

// {app, devices, mode}: mode "explicit", or "<protocol>-peer" / "<protocol>-staged" for the hdsm
// version with every sim device in one peer group or none.
using Case = std::tuple<std::string, unsigned, std::string>;

std::vector<Case> sim_cases() {
  std::vector<Case> out;
  for (const MultiApp& app : hdsm::apps::multi_device_apps())
    for (unsigned devices : {1u, 2u, 4u}) {
      out.emplace_back(app.name, devices, "explicit");
      out.emplace_back(app.name, devices, "rolling-peer");
      out.emplace_back(app.name, devices, "rolling-staged");
      out.emplace_back(app.name, devices, "host-mapped");
      if (devices == 4)
        for (const char* mode : {"lazy-peer", "batch-staged"}) out.emplace_back(app.name, devices, mode);
    }
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s =
      std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "_" + std::get<2>(info.param);
  for (char& ch : s)
    if (ch == '-') ch = '_';
  return s;
}

const MultiApp& app_named(const std::string& name) {
  const MultiApp* app = hdsm::apps::find_multi_app(name);
  if (app == nullptr) throw std::invalid_argument("no multi-device app " + name);
  return *app;
}

class MultiDeviceSim : public ::testing::TestWithParam<Case> {};

TEST_P(MultiDeviceSim, MatchesReference) {
  const auto& [name, devices, mode] = GetParam();
  const MultiApp& app = app_named(name);
  const std::size_t size = app.sizes(Scale::test).front();
  const hdsm::apps::Output want = app.run_reference(size);
  ASSERT_FALSE(want.values.empty());

  const bool explicit_version = mode == "explicit";
  const std::string protocol = explicit_version        ? "rolling"
                               : mode == "host-mapped" ? mode
                                                       : mode.substr(0, mode.find('-'));
  const bool peer = mode.ends_with("-peer");
  hdsm::Config config = hdsm::test::fast_sim_config(protocol, "4KiB", "64MiB");
  config.set("HDSM_SIM_DEVICES", "4").set("HDSM_SIM_PEER", peer ? "all" : "none");
  hdsm::Runtime rt{config};

  hdsm::apps::MultiRun got;
  if (explicit_version) {
    std::vector<hdsm::Device*> used(rt.devices().begin(), rt.devices().begin() + devices);
    got = app.run_explicit(used, size);
  } else {
    std::vector<unsigned> used;
    for (unsigned d = 0; d < devices; ++d) used.push_back(d);
    got = app.run_hdsm(rt, used, size);
  }
  EXPECT_EQ(hdsm::apps::compare(got.output, want, app.tolerance), "")
      << name << " over " << devices << " devices, " << mode;
  EXPECT_GT(got.seconds, 0);
  EXPECT_LE(got.exchange_seconds, got.seconds * 1.5 + 0.01);  // wall time of the exchanges, not more

  const hdsm::Stats stats = rt.stats();
  for (unsigned d = 0; d < devices; ++d) {
    EXPECT_GT(stats.devices[d].kernel_launches, 0u) << "no kernel ran on sim" << d;
    EXPECT_EQ(rt.device(d).memory_used(), 0u) << "the app leaked memory of sim" << d;
  }
  // Under batch-update the host copy of an object a kernel only read stays the one a copy writes to
  // (uploaded at the next call), so its exchanges go through host memory; the others copy between
  // the device copies.
  if (protocol == "host-mapped") {
    for (int r = 0; r < hdsm::kRouteCount; ++r)
      EXPECT_EQ(stats.routes[r].bytes, 0u) << "host-mapped moves nothing";
  } else if (!explicit_version && devices > 1 && protocol != "batch") {
    const hdsm::CopyRoute route = peer ? hdsm::CopyRoute::peer : hdsm::CopyRoute::staged;
    const hdsm::CopyRoute other = peer ? hdsm::CopyRoute::staged : hdsm::CopyRoute::peer;
    EXPECT_GT(stats.copy(route).transfers, 0u)
        << "the exchange took no " << hdsm::to_string(route) << " route";
    // Staged copies also serve pageable host memory (the inputs and outputs), so only the peer route
    // must be absent without peer groups.
    if (!peer) {
      EXPECT_EQ(stats.copy(other).transfers, 0u);
    }
  }
  if (explicit_version) {
    EXPECT_EQ(stats.copy(hdsm::CopyRoute::peer).transfers, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(sim, MultiDeviceSim, ::testing::ValuesIn(sim_cases()), case_name);

// The same on the OpenCL devices (PoCL's CPU device, split in two runs of one host thread each when it
// is the only one) and the CUDA devices (a GPU, scripts/gpu-check): the kernels' OpenCL C and CUDA
// bodies and both versions' exchanges. Without such a device, or without the CUDA bodies, they skip.
class MultiDeviceOnBackend
    : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {};

TEST_P(MultiDeviceOnBackend, MatchesReference) {
  const auto& [backend, name, mode] = GetParam();
  if (backend == "opencl" && hdsm::test::opencl_only_without_lsan())
    GTEST_SKIP() << "OpenCL under ASan runs in apps.opencl_without_lsan";
  if (backend == "cuda" && !hdsm::apps::have_cuda_bodies())
    GTEST_SKIP() << "hdsm_apps has no CUDA kernel bodies (CMake found no CUDA compiler at configure time)";
  const MultiApp& app = app_named(name);
  hdsm::Config config = hdsm::Config::defaults();
  config.set("HDSM_DEVICE", backend)
      .set(backend == "opencl" ? "HDSM_OPENCL" : "HDSM_CUDA", "on")
      .set(backend == "opencl" ? "HDSM_OPENCL_MEMORY" : "HDSM_CUDA_MEMORY", "256MiB");
  std::unique_ptr<hdsm::Runtime> rt;
  try {
    rt = std::make_unique<hdsm::Runtime>(config);
  } catch (const hdsm::NoDevice& e) {
    GTEST_SKIP() << backend << ": " << e.what();
  }
  std::vector<hdsm::Device*> devices;
  std::vector<unsigned> indices;
  for (hdsm::Device* d : rt->devices())
    if (hdsm::to_string(d->properties().backend) == backend && devices.size() < 4) {
      devices.push_back(d);
      indices.push_back(d->properties().index);
    }
  ASSERT_FALSE(devices.empty());
  // Two members on one device when there is only one: the exchange then runs between two halves of
  // the data on the same device, through the same code.
  if (devices.size() == 1) {
    devices.push_back(devices.front());
    indices.push_back(indices.front());
  }
  if (devices.size() == 3) {  // 1, 2 or 4 devices
    devices.pop_back();
    indices.pop_back();
  }
  const std::size_t size = app.sizes(Scale::test).front();
  const hdsm::apps::MultiRun got =
      mode == "explicit" ? app.run_explicit(devices, size) : app.run_hdsm(*rt, indices, size);
  EXPECT_EQ(hdsm::apps::compare(got.output, app.run_reference(size), app.tolerance), "")
      << name << ", " << mode << " on " << devices.front()->properties().description;
  for (hdsm::Device* d : devices) EXPECT_EQ(d->memory_used(), 0u);
}

std::string backend_case_name(
    const ::testing::TestParamInfo<std::tuple<std::string, std::string, std::string>>& info) {
  return std::get<1>(info.param) + "_" + std::get<2>(info.param);
}

INSTANTIATE_TEST_SUITE_P(opencl, MultiDeviceOnBackend,
                         ::testing::Combine(::testing::Values("opencl"),
                                            ::testing::Values("stencil", "fft", "mergesort"),
                                            ::testing::Values("explicit", "hdsm")),
                         backend_case_name);
INSTANTIATE_TEST_SUITE_P(cuda, MultiDeviceOnBackend,
                         ::testing::Combine(::testing::Values("cuda"),
                                            ::testing::Values("stencil", "fft", "mergesort"),
                                            ::testing::Values("explicit", "hdsm")),
                         backend_case_name);

}  // namespace
