// The device conformance suite: written once, run on every backend. A backend that has no device
// on this machine (or is not built yet) is reported as skipped, never as passed.
#include <hdsm/hdsm.hpp>

#include "device/host_mapping.hpp"
#include "os/mapping.hpp"
#include "support/cuda_kernels.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

namespace {

class DeviceConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "opencl" && hdsm::test::opencl_only_without_lsan())
      GTEST_SKIP() << "OpenCL under ASan runs in conformance.opencl_without_lsan";
    auto config = hdsm::Config::defaults();
    config.set("HDSM_DEVICE", GetParam())
        .set("HDSM_SIM_MEMORY", "256MiB")
        .set("HDSM_OPENCL_MEMORY", "256MiB")
        .set("HDSM_CUDA_MEMORY", "256MiB")
        .set("HDSM_SIM_POISON", "1")
        .set("HDSM_SIM_LINK_GBPS", "0")
        .set("HDSM_SIM_LATENCY_US", "0");
    try {
      runtime_ = std::make_unique<hdsm::Runtime>(config);
    } catch (const hdsm::NoDevice& e) {
      GTEST_SKIP() << "backend " << GetParam() << " has no device here: " << e.what();
    }
    device_ = &runtime_->default_device();
    queue_ = device_->create_queue();
  }

  void TearDown() override {
    queue_.reset();
    runtime_.reset();
  }

  // Another device of the same backend, or nullptr.
  hdsm::Device* other_device() const {
    for (hdsm::Device* d : runtime_->devices())
      if (d != device_ && d->properties().backend == device_->properties().backend) return d;
    return nullptr;
  }

  static std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
    return hdsm::test::pattern(n, seed);
  }

  std::unique_ptr<hdsm::Runtime> runtime_;
  hdsm::Device* device_ = nullptr;
  std::unique_ptr<hdsm::Queue> queue_;
};

TEST_P(DeviceConformance, PropertiesDescribeTheDevice) {
  const auto& p = device_->properties();
  EXPECT_FALSE(p.name.empty());
  EXPECT_EQ(hdsm::to_string(p.backend), GetParam());
  EXPECT_GT(p.memory_bytes, 0u);
  EXPECT_GE(p.copy_engines, 1u);
}

TEST_P(DeviceConformance, AllocationIsAccountedAndReturned) {
  const std::size_t before = device_->memory_used();
  auto a = device_->alloc(1000);
  auto b = device_->alloc(1 << 20);
  EXPECT_NE(a.handle, b.handle);
  EXPECT_EQ(a.bytes, 1000u);
  EXPECT_GE(device_->memory_used(), before + 1000 + (1 << 20));
  device_->free(a);
  device_->free(b);
  EXPECT_EQ(device_->memory_used(), before);
}

// SharedSpace relies on zeroed_alloc to skip filling a new object's device copy: the buffer must
// read as zero even where a freed buffer held data.
TEST_P(DeviceConformance, AllocationsClaimedZeroedReadAsZero) {
  if (!device_->properties().zeroed_alloc)
    GTEST_SKIP() << device_->name() << " does not claim zeroed buffers";
  constexpr std::size_t kBytes = 3 << 20;
  for (int round = 0; round < 3; ++round) {
    auto b = device_->alloc(kBytes);
    std::vector<unsigned char> got(kBytes, 0xAA);
    queue_->copy_to_host(got.data(), b, 0, kBytes);
    queue_->synchronize();
    EXPECT_EQ(std::count(got.begin(), got.end(), 0), static_cast<std::ptrdiff_t>(kBytes))
        << "round " << round;
    const auto data = pattern(kBytes, round + 1);
    queue_->copy_to_device(b, 0, data.data(), kBytes);
    queue_->synchronize();
    device_->free(b);
  }
}

TEST_P(DeviceConformance, ZeroSizeAllocationIsAnError) {
  EXPECT_THROW(device_->alloc(0), hdsm::InvalidArgument);
}

TEST_P(DeviceConformance, AllocationAboveCapacityFailsWithTypedErrorAndLosesNothing) {
  auto keep = device_->alloc(4096);
  const auto data = pattern(4096, 1);
  queue_->copy_to_device(keep, 0, data.data(), data.size());
  const std::size_t used = device_->memory_used();
  const std::size_t too_much = device_->properties().memory_bytes + 1;
  try {
    (void)device_->alloc(too_much);
    FAIL() << "an allocation above capacity succeeded";
  } catch (const hdsm::OutOfDeviceMemory& e) {
    EXPECT_EQ(e.requested(), too_much);
    EXPECT_NE(std::string(e.what()).find(device_->name()), std::string::npos) << e.what();
  }
  EXPECT_EQ(device_->memory_used(), used);
  // Filling the device exactly still works after the failure, and the kept data is intact.
  auto rest = device_->alloc(device_->properties().memory_bytes - used);
  std::vector<unsigned char> back(4096);
  queue_->copy_to_host(back.data(), keep, 0, back.size());
  queue_->synchronize();
  EXPECT_EQ(back, data);
  device_->free(rest);
  device_->free(keep);
}

TEST_P(DeviceConformance, DoubleAndForeignFreesAreErrors) {
  auto a = device_->alloc(256);
  device_->free(a);
  EXPECT_THROW(device_->free(a), hdsm::InvalidPointer);
  EXPECT_THROW(device_->free(hdsm::DeviceBuffer{0x1234, 16}), hdsm::InvalidPointer);
  EXPECT_THROW(device_->free(hdsm::DeviceBuffer{}), hdsm::InvalidPointer);
  if (hdsm::Device* other = other_device()) {
    auto b = other->alloc(256);
    EXPECT_THROW(device_->free(b), hdsm::InvalidPointer);
    other->free(b);
  }
}

TEST_P(DeviceConformance, RoundTripPageableAndPinnedAtManySizes) {
  for (std::size_t n : {std::size_t{1}, std::size_t{4096 + 7}, std::size_t{3 << 20} + 5}) {
    auto buf = device_->alloc(n + 64);
    const auto in = pattern(n, static_cast<unsigned>(n));
    // pageable in, pinned out, at an offset
    queue_->copy_to_device(buf, 64, in.data(), n);
    auto* pinned = static_cast<unsigned char*>(device_->alloc_pinned(n));
    EXPECT_TRUE(device_->is_pinned(pinned, n));
    queue_->copy_to_host(pinned, buf, 64, n);
    queue_->synchronize();
    EXPECT_EQ(0, std::memcmp(pinned, in.data(), n)) << "pinned read back of " << n << " bytes";
    // pinned in, pageable out
    const auto in2 = pattern(n, 99);
    std::memcpy(pinned, in2.data(), n);
    queue_->copy_to_device(buf, 0, pinned, n);
    std::vector<unsigned char> out(n);
    queue_->copy_to_host(out.data(), buf, 0, n);
    queue_->synchronize();
    EXPECT_EQ(out, in2) << "pageable read back of " << n << " bytes";
    device_->free_pinned(pinned);
    device_->free(buf);
  }
}

TEST_P(DeviceConformance, CopiesOnOneDeviceAndFill) {
  const std::size_t n = 100000;
  auto a = device_->alloc(n), b = device_->alloc(n);
  const auto in = pattern(n, 5);
  queue_->copy_to_device(a, 0, in.data(), n);
  queue_->copy_on_device(b, 10, a, 0, n - 10);
  queue_->fill(b, 0, 10, 0x3C);
  std::vector<unsigned char> out(n);
  queue_->copy_to_host(out.data(), b, 0, n);
  queue_->synchronize();
  for (std::size_t i = 0; i < 10; ++i) ASSERT_EQ(out[i], 0x3C) << i;
  EXPECT_TRUE(std::equal(out.begin() + 10, out.end(), in.begin()));
  device_->free(a);
  device_->free(b);
}

TEST_P(DeviceConformance, CopiesPastTheEndAreRejectedAndEnqueueNothing) {
  auto a = device_->alloc(4096);
  std::vector<unsigned char> host(8192, 0x11);
  EXPECT_THROW(queue_->copy_to_device(a, 0, host.data(), 4097), hdsm::InvalidArgument);
  EXPECT_THROW(queue_->copy_to_device(a, 4000, host.data(), 100), hdsm::InvalidArgument);
  EXPECT_THROW(queue_->copy_to_host(host.data(), a, 1, 4096), hdsm::InvalidArgument);
  EXPECT_THROW(queue_->copy_to_host(host.data(), a, SIZE_MAX, 2), hdsm::InvalidArgument);
  EXPECT_THROW(queue_->copy_on_device(a, 0, a, 2048, 4096), hdsm::InvalidArgument);
  EXPECT_THROW(queue_->fill(a, 4096, 1, 0), hdsm::InvalidArgument);
  EXPECT_THROW(queue_->copy_to_device(a, 0, nullptr, 16), hdsm::InvalidArgument);
  device_->free(a);
  EXPECT_THROW(queue_->copy_to_device(a, 0, host.data(), 16), hdsm::InvalidPointer);
  EXPECT_NO_THROW(queue_->synchronize());
}

// A launch shape no backend runs is refused by the launch, naming the kernel and the device, and
// enqueues nothing: the next synchronize has nothing to report (before, it threw the error there).
TEST_P(DeviceConformance, LaunchShapesNoDeviceRunsAreRefusedAtTheLaunch) {
  auto a = device_->alloc(4096);
  auto noop = hdsm::per_thread("noop_shape", [](const hdsm::Thread&, int*) {});
  noop.opencl_source = "__kernel void noop_shape(__global int* x) {}";
  const hdsm::KernelArg args[] = {hdsm::KernelArg::buffer(a)};
  for (const hdsm::Launch& bad :
       {hdsm::Launch{hdsm::Dim3{1}, hdsm::Dim3{2048}, 0}, hdsm::Launch{hdsm::Dim3{0}, hdsm::Dim3{32}, 0},
        hdsm::Launch{hdsm::Dim3{1}, hdsm::Dim3{32}, std::size_t{2} << 30}}) {
    try {
      queue_->launch(noop, bad, args);
      ADD_FAILURE() << "a launch no device runs was accepted";
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("kernel 'noop_shape' on " + device_->name()), std::string::npos)
          << e.what();
    }
  }
  EXPECT_NO_THROW(queue_->synchronize());
  EXPECT_EQ(runtime_->stats().kernel_launches, 0u);
  device_->free(a);
}

TEST_P(DeviceConformance, PeerCopiesWhereCapable) {
  hdsm::Device* other = other_device();
  if (other == nullptr) GTEST_SKIP() << "only one " << GetParam() << " device";
  const std::size_t n = (1 << 20) + 3;
  auto src = other->alloc(n);
  auto dst = device_->alloc(n);
  const auto in = pattern(n, 7);
  auto other_queue = other->create_queue();
  other_queue->copy_to_device(src, 0, in.data(), n);
  other_queue->synchronize();
  if (!device_->can_access_peer(*other)) {
    EXPECT_THROW(queue_->copy_from_peer(dst, 0, *other, src, 0, n), hdsm::Unsupported);
  } else {
    EXPECT_TRUE(other->can_access_peer(*device_));
    queue_->copy_from_peer(dst, 0, *other, src, 0, n);
    std::vector<unsigned char> out(n);
    queue_->copy_to_host(out.data(), dst, 0, n);
    queue_->synchronize();
    EXPECT_EQ(out, in);
    EXPECT_THROW(queue_->copy_from_peer(dst, 1, *other, src, 0, n), hdsm::InvalidArgument);
  }
  EXPECT_FALSE(device_->can_access_peer(*device_));
  device_->free(dst);
  other->free(src);
}

TEST_P(DeviceConformance, EventsOrderWorkAcrossQueues) {
  // A large copy then a marker on queue A; queue B waits for A's event before reading. Without the
  // wait, B's read would overtake A's copies.
  const std::size_t n = 32 << 20;
  auto buf = device_->alloc(n);
  std::vector<unsigned char> big(n, 0x5A);
  auto q2 = device_->create_queue();
  queue_->copy_to_device(buf, 0, big.data(), n);
  const unsigned char marker[4] = {1, 2, 3, 4};
  queue_->copy_to_device(buf, n - 4, marker, 4);
  hdsm::Event done = queue_->record();
  q2->wait(done);
  unsigned char seen[4] = {};
  q2->copy_to_host(seen, buf, n - 4, 4);
  hdsm::Event read = q2->record();
  read.wait();
  EXPECT_TRUE(done.query());
  EXPECT_TRUE(read.query());
  EXPECT_EQ(0, std::memcmp(seen, marker, 4));
  EXPECT_TRUE(hdsm::Event().query());
  device_->free(buf);
}

TEST_P(DeviceConformance, KernelLaunchWithBuffersAndValues) {
  const int n = 1000;  // not a multiple of the block
  auto a = device_->alloc(n * sizeof(float)), b = device_->alloc(n * sizeof(float)),
       c = device_->alloc(n * sizeof(float));
  std::vector<float> ha(n), hb(n), hc(n, -1.f);
  std::iota(ha.begin(), ha.end(), 0.f);
  std::iota(hb.begin(), hb.end(), 1000.f);
  auto vecadd = hdsm::per_thread(
      "vecadd", [](const hdsm::Thread& t, const float* x, const float* y, float* z, int count) {
        const auto i = t.global_x();
        if (i < static_cast<std::uint64_t>(count)) z[i] = x[i] + y[i];
      });
  vecadd.opencl_source = R"(
    __kernel void vecadd(__global const float* x, __global const float* y, __global float* z, int count) {
      const size_t i = get_global_id(0);
      if (i < (size_t)count) z[i] = x[i] + y[i];
    })";
  if (!hdsm::test::give_cuda_body(vecadd, *device_)) GTEST_SKIP() << hdsm::test::kNoCudaKernels;
  queue_->copy_to_device(a, 0, ha.data(), n * sizeof(float));
  queue_->copy_to_device(b, 0, hb.data(), n * sizeof(float));
  const hdsm::KernelArg args[] = {hdsm::KernelArg::buffer(a), hdsm::KernelArg::buffer(b),
                                  hdsm::KernelArg::buffer(c), hdsm::KernelArg::value(n)};
  queue_->launch(vecadd, hdsm::cover(n, 128), args);
  queue_->copy_to_host(hc.data(), c, 0, n * sizeof(float));
  queue_->synchronize();
  for (int i = 0; i < n; ++i) ASSERT_EQ(hc[i], ha[i] + hb[i]) << i;
  EXPECT_EQ(runtime_->stats().kernel_launches, 1u);
  // The device time of the kernel (sim, OpenCL) and of the copies (OpenCL; this sim link is
  // unthrottled, so its modelled copies take no time).
  const auto backend = device_->properties().backend;
  for (const hdsm::DeviceStats& d : runtime_->stats().devices) {
    if (d.name != device_->name()) continue;
    if (backend != hdsm::Backend::cuda) {
      EXPECT_GT(d.kernel_ns, 0u);
    }
    if (backend == hdsm::Backend::opencl) {
      EXPECT_GT(d.transfer_ns, 0u);
    }
  }
  for (auto buf : {a, b, c}) device_->free(buf);
}

// Host mapping: a kernel uses page-aligned host memory in place, at the start of the mapping and
// at an offset, with the hand-overs around it; nothing is copied; bad handles are errors.
TEST_P(DeviceConformance, HostMappedMemoryIsUsedInPlace) {
  auto* mapping = dynamic_cast<hdsm::HostMapping*>(device_);
  ASSERT_NE(mapping, nullptr) << device_->name() << " offers no host mapping";
  auto add_one = hdsm::per_thread("add_one", [](const hdsm::Thread& t, int* x, int count) {
    if (const auto i = t.global_x(); i < static_cast<std::uint64_t>(count)) x[i] += 1;
  });
  add_one.opencl_source = R"(
    __kernel void add_one(__global int* x, int count) {
      const size_t i = get_global_id(0);
      if (i < (size_t)count) x[i] += 1;
    })";
  if (!hdsm::test::give_cuda_body(add_one, *device_)) GTEST_SKIP() << hdsm::test::kNoCudaKernels;
  const int n = 4096;  // two pages of ints; the second half starts at 8 KiB, a valid sub-buffer origin
  hdsm::os::Mapping host(n * sizeof(int), "host memory of the test");
  auto* x = reinterpret_cast<int*>(host.data());
  std::iota(x, x + n, 0);
  const std::uint64_t m = mapping->map_host(x, n * sizeof(int));
  EXPECT_NE(m, 0u);
  runtime_->reset_stats();
  mapping->hand_over(m, true, *queue_);
  const hdsm::KernelArg whole[] = {mapping->host_argument(m, 0), hdsm::KernelArg::value(n)};
  queue_->launch(add_one, hdsm::cover(n, 128), whole);
  const hdsm::KernelArg half[] = {mapping->host_argument(m, n / 2 * sizeof(int)),
                                  hdsm::KernelArg::value(n / 2)};
  queue_->launch(add_one, hdsm::cover(n / 2, 128), half);
  mapping->hand_over(m, false, *queue_);
  queue_->synchronize();
  for (int i = 0; i < n; ++i) ASSERT_EQ(x[i], i + (i < n / 2 ? 1 : 2)) << i;
  const hdsm::Stats stats = runtime_->stats();
  for (int r = 0; r < hdsm::kRouteCount; ++r) EXPECT_EQ(stats.routes[r].bytes, 0u) << "route " << r;
  EXPECT_THROW(mapping->host_argument(m, n * sizeof(int) + 1), hdsm::InvalidArgument);
  EXPECT_THROW(mapping->host_argument(m + 12345, 0), hdsm::InvalidPointer);
  EXPECT_THROW(mapping->map_host(x, 0), hdsm::InvalidArgument);
  mapping->unmap_host(m);
  EXPECT_THROW(mapping->unmap_host(m), hdsm::InvalidPointer);
}

// The sim's copies count their modelled time: latency plus bytes over the link rate.
TEST(DeviceTime, SimCountsTheModelledTransferTime) {
  auto config = hdsm::Config::defaults();
  config.set("HDSM_SIM_LINK_GBPS", "3").set("HDSM_SIM_LATENCY_US", "5").set("HDSM_SIM_HOST_BUS_GBPS", "0");
  hdsm::Runtime rt(config);
  hdsm::Device& d = rt.device(0);
  const std::size_t bytes = std::size_t{3} << 20;
  auto buf = d.alloc(bytes);
  std::vector<unsigned char> host(bytes, 1);
  auto q = d.create_queue();
  q->copy_to_device(buf, 0, host.data(), bytes);
  q->copy_to_host(host.data(), buf, 0, bytes);
  q->synchronize();
  const double expected_ns = 2 * (5e3 + static_cast<double>(bytes) / 3.0);  // two copies at 3 GB/s
  const double got = static_cast<double>(rt.stats().devices.at(0).transfer_ns);
  EXPECT_NEAR(got, expected_ns, expected_ns * 0.01);
  d.free(buf);
}

// A pointer argument inside a buffer (KernelArg::buffer(b, offset)): the kernel sees the data from
// that byte on. OpenCL passes it as a sub-buffer, which needs an offset aligned to the device's
// CL_DEVICE_MEM_BASE_ADDR_ALIGN; a misaligned one is InvalidArgument naming that rule.
TEST_P(DeviceConformance, KernelArgumentsInsideBuffers) {
  const int n = 300;
  const std::size_t at = 4096;  // a multiple of every device's base alignment
  auto a = device_->alloc(at + n * sizeof(float)), c = device_->alloc(at + n * sizeof(float));
  std::vector<float> in(at / sizeof(float) + n), out(n);
  std::iota(in.begin(), in.end(), 0.f);
  auto twice = hdsm::per_thread("twice", [](const hdsm::Thread& t, const float* x, float* y, int count) {
    if (const auto i = t.global_x(); i < static_cast<std::uint64_t>(count)) y[i] = 2 * x[i];
  });
  twice.opencl_source = R"(
    __kernel void twice(__global const float* x, __global float* y, int count) {
      const size_t i = get_global_id(0);
      if (i < (size_t)count) y[i] = 2 * x[i];
    })";
  if (!hdsm::test::give_cuda_body(twice, *device_)) GTEST_SKIP() << hdsm::test::kNoCudaKernels;
  queue_->copy_to_device(a, 0, in.data(), in.size() * sizeof(float));
  const hdsm::KernelArg args[] = {hdsm::KernelArg::buffer(a, at), hdsm::KernelArg::buffer(c, at),
                                  hdsm::KernelArg::value(n)};
  queue_->launch(twice, hdsm::cover(n, 64), args);
  queue_->copy_to_host(out.data(), c, at, n * sizeof(float));
  queue_->synchronize();
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], 2 * in[at / sizeof(float) + i]) << i;
  const hdsm::KernelArg odd[] = {hdsm::KernelArg::buffer(a, 4), hdsm::KernelArg::buffer(c, 4),
                                 hdsm::KernelArg::value(n)};
  if (device_->properties().backend == hdsm::Backend::opencl) {
    try {
      queue_->launch(twice, hdsm::cover(n, 64), odd);
      FAIL() << "a misaligned sub-buffer launched";
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("CL_DEVICE_MEM_BASE_ADDR_ALIGN"), std::string::npos) << e.what();
    }
  } else {
    queue_->launch(twice, hdsm::cover(n, 64), odd);
    queue_->copy_to_host(out.data(), c, 4, n * sizeof(float));
    queue_->synchronize();
    for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], 2 * in[1 + i]) << i;
  }
  if (device_->properties().backend == hdsm::Backend::opencl) {
    // A host pointer where the kernel takes a __global one, and a pointer to a buffer's end (no
    // sub-buffer of 0 bytes): typed errors, where PoCL asserted or crashed.
    const auto refused = [&](std::span<const hdsm::KernelArg> bad, const char* want) {
      try {
        queue_->launch(twice, hdsm::cover(n, 64), bad);
        ADD_FAILURE() << "launched: " << want;
      } catch (const hdsm::InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      }
    };
    const float* host = in.data();
    const hdsm::KernelArg raw[] = {hdsm::KernelArg::value(host), hdsm::KernelArg::buffer(c, 0),
                                   hdsm::KernelArg::value(n)};
    refused(raw, "in no shared object or device buffer");
    const hdsm::KernelArg end[] = {hdsm::KernelArg::buffer(a, at + n * sizeof(float)),
                                   hdsm::KernelArg::buffer(c, 0), hdsm::KernelArg::value(n)};
    refused(end, "a pointer to the end of");
    // The C++ side passing a value of another size than the OpenCL C parameter, and a __kernel of
    // another name: the program's mistakes, InvalidArgument naming the kernel and the device (they
    // were Errc::system, as if a platform call had failed).
    const hdsm::KernelArg wide[] = {hdsm::KernelArg::buffer(a, 0), hdsm::KernelArg::buffer(c, 0),
                                    hdsm::KernelArg::value(std::uint64_t{1})};
    refused(wide, "CL_INVALID_ARG_SIZE");
    refused(wide, ("argument 2 of kernel 'twice' on " + device_->name()).c_str());
    auto renamed = twice;
    renamed.opencl_source =
        R"(__kernel void other(__global const float* x, __global float* y, int count) {})";
    try {
      queue_->launch(renamed, hdsm::cover(n, 64), args);
      ADD_FAILURE() << "a kernel without its __kernel function launched";
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(
          std::string(e.what()).find("kernel 'twice' on " + device_->name() + " (the __kernel function"),
          std::string::npos)
          << e.what();
    }
    queue_->synchronize();
  }
  device_->free(a);
  device_->free(c);
}

// 64 KiB of dynamic shared memory a block: above CUDA's default 48 KiB, which a kernel must opt in
// to exceed (the backend does it); OpenCL passes it as the trailing __local argument.
TEST_P(DeviceConformance, KernelWithMoreThan48KiBOfDynamicSharedMemory) {
  constexpr std::uint32_t kChunk = 16384, kBlocks = 3;  // floats a block: 64 KiB
  auto reverse = hdsm::cooperative("reverse_in_shared",
                                   [](hdsm::ThreadCtx& t, const float* in, float* out, std::uint32_t chunk) {
                                     auto* tile = static_cast<float*>(t.dynamic_shared());
                                     const std::size_t base = std::size_t{t.block.x} * chunk;
                                     for (std::uint32_t i = t.idx.x; i < chunk; i += t.block_dim.x)
                                       tile[i] = in[base + i];
                                     t.sync();
                                     for (std::uint32_t i = t.idx.x; i < chunk; i += t.block_dim.x)
                                       out[base + i] = tile[chunk - 1 - i];
                                   });
  reverse.opencl_source = R"(
    __kernel void reverse_in_shared(__global const float* in, __global float* out, uint chunk,
                                    __local float* tile) {
      const size_t base = get_group_id(0) * chunk;
      for (uint i = get_local_id(0); i < chunk; i += get_local_size(0)) tile[i] = in[base + i];
      barrier(CLK_LOCAL_MEM_FENCE);
      for (uint i = get_local_id(0); i < chunk; i += get_local_size(0)) out[base + i] = tile[chunk - 1 - i];
    })";
  if (!hdsm::test::give_cuda_body(reverse, *device_)) GTEST_SKIP() << hdsm::test::kNoCudaKernels;
  const std::size_t bytes = std::size_t{kChunk} * kBlocks * sizeof(float);
  auto a = device_->alloc(bytes), b = device_->alloc(bytes);
  std::vector<float> in(std::size_t{kChunk} * kBlocks), out(in.size(), -1.f);
  std::iota(in.begin(), in.end(), 0.f);
  queue_->copy_to_device(a, 0, in.data(), bytes);
  const hdsm::KernelArg args[] = {hdsm::KernelArg::buffer(a), hdsm::KernelArg::buffer(b),
                                  hdsm::KernelArg::value(kChunk)};
  for (int launch = 0; launch < 2; ++launch)  // the second launch reuses the opt-in
    queue_->launch(reverse, hdsm::Launch{hdsm::Dim3(kBlocks), hdsm::Dim3(128), kChunk * sizeof(float)}, args);
  queue_->copy_to_host(out.data(), b, 0, bytes);
  queue_->synchronize();
  for (std::uint32_t blk = 0; blk < kBlocks; ++blk)
    for (std::uint32_t i = 0; i < kChunk; ++i)
      ASSERT_EQ(out[blk * kChunk + i], in[blk * kChunk + kChunk - 1 - i])
          << "block " << blk << ", element " << i;
  device_->free(a);
  device_->free(b);
}

TEST_P(DeviceConformance, KernelFollowsAddressesStoredInABuffer) {
  const int n = 64;
  auto data = device_->alloc(n * sizeof(int));
  auto table = device_->alloc(3 * sizeof(const int*));
  auto out = device_->alloc(3 * sizeof(int));
  std::vector<int> values(n);
  std::iota(values.begin(), values.end(), 100);
  const int* addresses[3] = {};
  try {
    for (int i = 0; i < 3; ++i)
      addresses[i] = reinterpret_cast<const int*>(
          device_->address(data, static_cast<std::size_t>(i) * 20 * sizeof(int)));
  } catch (const hdsm::Unsupported& e) {
    for (auto buf : {data, table, out}) device_->free(buf);
    GTEST_SKIP() << "backend " << GetParam() << " has no stable device addresses: " << e.what();
  }
  auto gather = hdsm::per_thread("gather_through_table",
                                 [](const hdsm::Thread& t, const int* const* pointers, int* result) {
                                   if (const auto i = t.global_x(); i < 3) result[i] = *pointers[i];
                                 });
  if (!hdsm::test::give_cuda_body(gather, *device_)) {
    for (auto buf : {data, table, out}) device_->free(buf);
    GTEST_SKIP() << hdsm::test::kNoCudaKernels;
  }
  queue_->copy_to_device(data, 0, values.data(), n * sizeof(int));
  queue_->copy_to_device(table, 0, addresses, sizeof addresses);
  const hdsm::KernelArg args[] = {hdsm::KernelArg::buffer(table), hdsm::KernelArg::buffer(out)};
  queue_->launch(gather, hdsm::cover(3), args);
  int result[3] = {};
  queue_->copy_to_host(result, out, 0, sizeof result);
  queue_->synchronize();
  EXPECT_EQ(result[0], 100);
  EXPECT_EQ(result[1], 120);
  EXPECT_EQ(result[2], 140);
  // One past the end is an address; beyond it, freed and foreign buffers are errors.
  EXPECT_EQ(device_->address(data, n * sizeof(int)), device_->address(data, 0) + n * sizeof(int));
  EXPECT_THROW((void)device_->address(data, n * sizeof(int) + 1), hdsm::InvalidArgument);
  EXPECT_THROW((void)device_->address(hdsm::DeviceBuffer{0x1234, 16}, 0), hdsm::InvalidPointer);
  if (hdsm::Device* other = other_device()) {
    auto b = other->alloc(256);
    EXPECT_THROW((void)device_->address(b, 0), hdsm::InvalidPointer);
    other->free(b);
  }
  for (auto buf : {data, table, out}) device_->free(buf);
  EXPECT_THROW((void)device_->address(data, 0), hdsm::InvalidPointer);
}

TEST_P(DeviceConformance, KernelErrorsAreTyped) {
  const bool opencl = device_->properties().backend == hdsm::Backend::opencl;
  const bool cuda = device_->properties().backend == hdsm::Backend::cuda;
  // A kernel with a body for every backend, for the checks that need one.
  auto one_arg = hdsm::per_thread("one_arg", [](const hdsm::Thread&, int) {});
  one_arg.opencl_source = "__kernel void one_arg(int x) {}";
  auto wrong_count = hdsm::per_thread("two_args", [](const hdsm::Thread&, int, int) {});
  wrong_count.opencl_source = "__kernel void two_args(int a, int b) {}";
  if (!hdsm::test::give_cuda_body(one_arg, *device_) || !hdsm::test::give_cuda_body(wrong_count, *device_))
    GTEST_SKIP() << hdsm::test::kNoCudaKernels;
  auto a = device_->alloc(64);
  const hdsm::KernelArg none[] = {hdsm::KernelArg::value(0)};
  // A missing body for this backend is Unsupported, naming the kernel and the backend.
  hdsm::Kernel opencl_only{"opencl_only", {}, "__kernel void opencl_only(int x) {}", nullptr};
  auto host_only = hdsm::per_thread("host_only", [](const hdsm::Thread&, int) {});
  try {
    queue_->launch(opencl ? host_only : opencl_only, hdsm::cover(1), none);
    FAIL() << "a kernel without a body for " << GetParam() << " launched";
  } catch (const hdsm::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find(opencl ? "host_only" : "opencl_only"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(GetParam()), std::string::npos) << e.what();
  }
  // The wrong number of arguments: at the launch or at the next synchronize, as the backend can tell.
  EXPECT_THROW(
      {
        queue_->launch(wrong_count, hdsm::cover(1), none);
        queue_->synchronize();
      },
      hdsm::InvalidArgument);
  if (opencl) {
    // A build error carries the compiler's log.
    hdsm::Kernel broken{"broken", {}, "__kernel void broken(int x) { this is not C; }", nullptr};
    try {
      queue_->launch(broken, hdsm::cover(1), none);
      FAIL() << "a kernel that does not build launched";
    } catch (const hdsm::KernelFailure& e) {
      EXPECT_NE(std::string(e.what()).find("broken"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("error"), std::string::npos) << "the build log: " << e.what();
    }
  } else if (cuda) {
    // A launch CUDA would refuse (more threads a block than any GPU has) is refused before it
    // reaches CUDA, as on every backend (CUDA's limits), naming the kernel; it leaves the device
    // usable.
    try {
      queue_->launch(one_arg, hdsm::Launch{hdsm::Dim3{1}, hdsm::Dim3{4096}, 0}, none);
      FAIL() << "a block of 4096 threads launched";
    } catch (const hdsm::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("one_arg"), std::string::npos) << e.what();
    }
    queue_->launch(one_arg, hdsm::cover(1), none);
    EXPECT_NO_THROW(queue_->synchronize());
  } else {
    auto throws = hdsm::per_thread("throws", [](const hdsm::Thread& t, int) {
      if (t.global_x() == 3) throw std::runtime_error("boom");
    });
    queue_->launch(throws, hdsm::cover(8, 4), none);
    EXPECT_THROW(queue_->synchronize(), hdsm::KernelFailure);
  }
  const hdsm::KernelArg past_end[] = {hdsm::KernelArg::buffer(a, 65)};
  EXPECT_THROW(queue_->launch(one_arg, hdsm::cover(1), past_end), hdsm::InvalidArgument);
  device_->free(a);
  EXPECT_NO_THROW(queue_->synchronize());
}

TEST_P(DeviceConformance, CountersSeeEveryRoute) {
  runtime_->reset_stats();
  auto a = device_->alloc(5000), b = device_->alloc(5000);
  std::vector<unsigned char> h(5000, 1);
  queue_->copy_to_device(a, 0, h.data(), 5000);
  queue_->copy_on_device(b, 0, a, 0, 3000);
  queue_->copy_to_host(h.data(), b, 0, 2000);
  queue_->synchronize();
  const auto s = runtime_->stats();
  EXPECT_EQ(s.route(hdsm::Route::h2d).bytes, 5000u);
  EXPECT_EQ(s.route(hdsm::Route::d2d).bytes, 3000u);
  EXPECT_EQ(s.route(hdsm::Route::d2h).bytes, 2000u);
  EXPECT_EQ(s.route(hdsm::Route::d2d).transfers, 1u);
  device_->free(a);
  device_->free(b);
}

TEST_P(DeviceConformance, PinnedMemoryRegistry) {
  void* p = device_->alloc_pinned(10000);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(device_->is_pinned(static_cast<char*>(p) + 100, 9900));
  EXPECT_FALSE(device_->is_pinned(static_cast<char*>(p) + 100, 1u << 20));
  std::vector<char> pageable(16);
  EXPECT_FALSE(device_->is_pinned(pageable.data(), 16));
  EXPECT_THROW(device_->alloc_pinned(0), hdsm::InvalidArgument);
  device_->free_pinned(p);
  EXPECT_THROW(device_->free_pinned(p), hdsm::InvalidPointer);
  EXPECT_THROW(device_->free_pinned(pageable.data()), hdsm::InvalidPointer);
}

INSTANTIATE_TEST_SUITE_P(Backends, DeviceConformance, ::testing::Values("sim", "opencl", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
