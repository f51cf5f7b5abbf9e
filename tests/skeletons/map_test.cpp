// Map on every backend: user functions defined once (host, OpenCL C, and CUDA under nvcc), run on
// the host's workers, on sim devices (one and split over two or three) and on PoCL, against plain
// loops; bad input.
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "skeletons/opencl_runtime.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

namespace {

HDSM_USER_FUNCTION(saxpy, float, (float x, float y, float a), { return a * x + y; })
HDSM_USER_FUNCTION(square_plus, int, (int x, int k), {
  int r = x * x;
  if (r > 1000) r = 1000;
  return r + k;
})
HDSM_USER_FUNCTION(negate, double, (double x), { return -x; })

hdsm::Config sim(unsigned devices) {
  return hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", std::to_string(devices));
}

TEST(UserFunction, OneDefinitionGivesAHostFunctionAndOpenClText) {
  EXPECT_EQ(saxpy::call(2.0f, 1.0f, 3.0f), 7.0f);
  EXPECT_EQ(square_plus::call(50, 1), 1001);
  const std::string text = saxpy::opencl_source;
  EXPECT_NE(text.find("float saxpy(float x, float y, float a)"), std::string::npos) << text;
  EXPECT_NE(text.find("return a * x + y;"), std::string::npos) << text;
}

TEST(Map, OnTheHostWorkers) {
  hdsm::Runtime rt(sim(1));
  const hdsm::ContainerOptions o{&rt};
  constexpr std::size_t n = 100'000;
  hdsm::Vector<float> x(n, o), y(n, o), out(n, o);
  for (std::size_t i = 0; i < n; ++i) {
    x(i) = static_cast<float>(i);
    y(i) = 1.0f;
  }
  hdsm::Map<saxpy> map;
  map.backend(hdsm::SkeletonBackend::host)(out, x, y, 2.0f);
  for (std::size_t i = 0; i < n; i += 97) ASSERT_EQ(out[i], 2.0f * static_cast<float>(i) + 1.0f) << i;
  EXPECT_EQ(out.stats().host_to_device_bytes + x.stats().host_to_device_bytes, 0u) << "no device involved";
}

class MapOnDevices : public ::testing::TestWithParam<unsigned> {};

TEST_P(MapOnDevices, SplitsOverTheDevicesAndMatchesALoop) {
  const unsigned devices = GetParam();
  hdsm::Runtime rt(sim(devices));
  const hdsm::ContainerOptions o{&rt};
  constexpr std::size_t n = 10'001;  // not a multiple of the device count
  hdsm::Vector<int> x(n, o), out(n, o);
  for (std::size_t i = 0; i < n; ++i) x(i) = static_cast<int>(i % 77) - 30;
  hdsm::Map<square_plus> map;
  if (devices == 2) map.devices({0, 1});
  if (devices == 3) map.devices({0, 1, 2});
  map(out, x, 5);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], square_plus::call(x[i], 5)) << i;
  if (devices > 1) {
    EXPECT_EQ(out.stats().device_allocations, devices) << "one part per device";
  }
  // A second call reuses the parts' copies: the input moves no more.
  const auto before = x.stats().host_to_device_bytes;
  map(out, x, 6);
  EXPECT_EQ(out[n - 1], square_plus::call(x[n - 1], 6));
  EXPECT_EQ(x.stats().host_to_device_bytes, before);
}

INSTANTIATE_TEST_SUITE_P(Devices, MapOnDevices, ::testing::Values(1u, 2u, 3u));

TEST(MapOnBackend, opencl) {
  std::string why;
  const std::unique_ptr<hdsm::Runtime> rt = hdsm::test::opencl_runtime(why);
  if (!rt) GTEST_SKIP() << why;
  const hdsm::ContainerOptions o{rt.get()};
  constexpr std::size_t n = 4096;
  hdsm::Vector<float> x(n, o), y(n, o), out(n, o);
  for (std::size_t i = 0; i < n; ++i) {
    x(i) = static_cast<float>(i) * 0.5f;
    y(i) = 3.0f;
  }
  hdsm::Map<saxpy>{}(out, x, y, 4.0f);  // the OpenCL kernel is generated around saxpy's text
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 4.0f * x[i] + 3.0f) << i;
  hdsm::Vector<int> xi(n, o), outi(n, o);
  for (std::size_t i = 0; i < n; ++i) xi(i) = static_cast<int>(i) - 2000;
  hdsm::Map<square_plus>{}(outi, xi, -1);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(outi[i], square_plus::call(xi[i], -1)) << i;
}

TEST(Map, BadInputIsATypedErrorBeforeAnyWork) {
  hdsm::Runtime rt(sim(2));
  const hdsm::ContainerOptions o{&rt};
  hdsm::Vector<double> x(10, o), out(11, o);
  hdsm::Map<negate> map;
  try {
    map(out, x);
    FAIL();
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("Map<negate>"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("10"), std::string::npos) << e.what();
  }
  hdsm::Vector<double> ok(10, o);
  try {
    map.devices({0, 7})(ok, x);
    ADD_FAILURE() << "device 7 of 2";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("device 7: the runtime has 2 devices (0 to 1)"), std::string::npos)
        << e.what();
  }
  try {
    map.devices({0}).weights({1, 2})(ok, x);
    ADD_FAILURE() << "two weights for one device";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("2 split weights for 1 device (one weight per device"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(ok.stats().device_allocations, 0u);
}

// HDSM_SKELETON_BACKEND and HDSM_SKELETON_DEVICES choose where skeletons run unless a skeleton
// chooses itself; a bad device list is a ConfigError naming the knob.
TEST(SkeletonKnobs, ChooseTheBackendAndTheDevicesUnlessTheSkeletonDoes) {
  const auto launches = [](hdsm::Runtime& rt) {
    std::vector<std::uint64_t> out;
    for (const hdsm::DeviceStats& d : rt.stats().devices) out.push_back(d.kernel_launches);
    return out;
  };
  const auto run = [&](hdsm::Config config, hdsm::Map<negate> map) {
    hdsm::Runtime rt(config.set("HDSM_SIM_DEVICES", "3"));
    hdsm::Vector<double> in(9000, 1.5, hdsm::ContainerOptions{&rt}), out(9000, hdsm::ContainerOptions{&rt});
    map(out, in);
    EXPECT_EQ(out[8999], -1.5);
    return launches(rt);
  };
  const auto config = [] { return hdsm::test::fast_sim_config(); };
  EXPECT_EQ(run(config(), {}), (std::vector<std::uint64_t>{1, 0, 0})) << "default: the default device";
  EXPECT_EQ(run(config().set("HDSM_SKELETON_BACKEND", "host"), {}), (std::vector<std::uint64_t>{0, 0, 0}));
  EXPECT_EQ(run(config().set("HDSM_SKELETON_DEVICES", "all"), {}), (std::vector<std::uint64_t>{1, 1, 1}));
  EXPECT_EQ(run(config().set("HDSM_SKELETON_DEVICES", "0,2"), {}), (std::vector<std::uint64_t>{1, 0, 1}));
  hdsm::Map<negate> chosen;
  chosen.backend(hdsm::SkeletonBackend::devices).devices({1});
  EXPECT_EQ(run(config().set("HDSM_SKELETON_BACKEND", "host").set("HDSM_SKELETON_DEVICES", "all"), chosen),
            (std::vector<std::uint64_t>{0, 1, 0}))
      << "the skeleton's own choice wins";
  try {
    run(config().set("HDSM_SKELETON_DEVICES", "0,7"), {});
    FAIL() << "device 7 of 3 accepted";
  } catch (const hdsm::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("HDSM_SKELETON_DEVICES"), std::string::npos) << e.what();
  }
}

// The output may be one of the inputs (Listing 1's calls update a vector in place), on one device
// and split over two.
TEST(Map, InPlace) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "2"));
  hdsm::Vector<double> v(9000, 1.5, hdsm::ContainerOptions{&rt});
  hdsm::Map<negate> map;
  map.devices({0, 1})(v, v);
  for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], -1.5) << i;
  map.devices({0, 1})(v, v);
  for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], 1.5) << i;
  map.devices({0})(v, v);
  for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], -1.5) << i;
}

// MapIndex: the user function gets the element's global index, with no input (positions alone) and
// with inputs and a uniform, on the host, 1 and 3 sim devices (each part's indices start at its
// first element) and PoCL.
HDSM_USER_FUNCTION(index_square, unsigned long, (unsigned long i), { return i * i; })
HDSM_USER_FUNCTION(index_mix, long, (unsigned long i, long x, long k), { return (long)(i % 7) * x + k; })

void check_map_index(hdsm::Runtime& rt, hdsm::SkeletonBackend backend,
                     std::initializer_list<unsigned> devices) {
  constexpr std::size_t n = 10'001;
  hdsm::Vector<unsigned long> squares(n, hdsm::ContainerOptions{&rt});
  hdsm::MapIndex<index_square> square;
  square.backend(backend).devices(devices)(squares);
  hdsm::Vector<long> x(n, hdsm::ContainerOptions{&rt}), out(n, hdsm::ContainerOptions{&rt});
  for (std::size_t i = 0; i < n; ++i) x(i) = static_cast<long>(i % 13) - 6;
  hdsm::MapIndex<index_mix> mix;
  mix.backend(backend).devices(devices)(out, x, 5L);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(squares[i], i * i) << i;
    ASSERT_EQ(out[i], static_cast<long>(i % 7) * x(i) + 5) << i;
  }
}

TEST(MapIndex, GetsTheGlobalIndexOnEveryBackend) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "3"));
  check_map_index(rt, hdsm::SkeletonBackend::host, {});
  check_map_index(rt, hdsm::SkeletonBackend::devices, {0});
  check_map_index(rt, hdsm::SkeletonBackend::devices, {2, 0, 1});
}

TEST(MapIndexOnDevices, opencl) {
  std::string why;
  const std::unique_ptr<hdsm::Runtime> rt = hdsm::test::opencl_runtime(why);
  if (!rt) GTEST_SKIP() << why;
  check_map_index(*rt, hdsm::SkeletonBackend::devices, {});
}

}  // namespace

namespace {

// A host-only user function (the sim runs its C++ body) that throws on one element.
struct ThrowsOn13 {
  static constexpr const char* name = "throws_on_13";
  static constexpr const char* opencl_source = "long throws_on_13(long a) { return a; }";
  static long call(long a) {
    if (a == 13) throw std::runtime_error("user function saw 13");
    return a + 1;
  }
};
HDSM_USER_FUNCTION(plus_one, long, (long a), { return a + 1; })

// The same with a throw of what is not a std::exception.
struct ThrowsIntOn13 {
  static constexpr const char* name = "throws_int_on_13";
  static constexpr const char* opencl_source = "long throws_int_on_13(long a) { return a; }";
  static long call(long a) {
    if (a == 13) throw 13;
    return a + 1;
  }
};

// On the host backend as on a device: a KernelFailure, not the bare int.
TEST(MapErrors, AUserFunctionThatThrowsANonStandardExceptionIsAKernelFailure) {
  hdsm::Runtime rt(sim(1));
  const hdsm::ContainerOptions o{&rt};
  hdsm::Vector<long> x(100, o), y(100, o);
  for (std::size_t i = 0; i < 100; ++i) x[i] = static_cast<long>(i);
  EXPECT_THROW(hdsm::Map<ThrowsIntOn13>{}.backend(hdsm::SkeletonBackend::host)(y, x), hdsm::KernelFailure);
  hdsm::Map<ThrowsIntOn13>{}.devices({0})(y, x);
  EXPECT_THROW((void)static_cast<long>(y[0]), hdsm::KernelFailure);
}

// A user function that throws fails the access that waits for its call, once; the device and the
// containers go on (before, the device queue reported the failure in every later call's event, so
// every Map and Reduce on that device failed with it until the runtime ended).
TEST(MapErrors, AUserFunctionThatThrowsFailsItsCallOnceAndTheDeviceGoesOn) {
  hdsm::Runtime rt(sim(1));
  const hdsm::ContainerOptions o{&rt};
  hdsm::Vector<long> x(100, o), y(100, o);
  for (std::size_t i = 0; i < 100; ++i) x[i] = static_cast<long>(i);
  hdsm::Map<ThrowsOn13>{}.devices({0})(y, x);
  EXPECT_THROW((void)static_cast<long>(y[0]), hdsm::KernelFailure);
  hdsm::Vector<long> a(10, 1L, o), b(10, o);
  hdsm::Map<plus_one>{}.devices({0})(b, a);
  EXPECT_EQ(static_cast<long>(b[9]), 2);
  hdsm::Map<plus_one>{}.devices({0})(y, x);
  EXPECT_EQ(static_cast<long>(y[13]), 14);
}

}  // namespace
