// Map and MapIndex with several outputs: a user function that returns void writes one element of
// each output through its leading pointer parameters; on the host, on 1, 2 and 3 sim devices and on
// PoCL, against loops; outputs of different element types; an output that is also an input; bad
// input named before any work.
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "skeletons/opencl_runtime.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

HDSM_USER_FUNCTION(mm_divmod, void, (long* q, long* r, long a, long b), {
  *q = a / b;
  *r = a % b;
})

// Three outputs of three types from the index and one input.
HDSM_USER_FUNCTION(mm_split, void,
                   (float* halved, int* parity, double* scaled, unsigned long i, int x, double k), {
                     *halved = (float)x * 0.5f;
                     *parity = (int)(i % 2) + x % 3;
                     *scaled = k * (double)x + (double)i;
                   })

static_assert(hdsm::detail::output_count<mm_divmod>() == 2);
static_assert(hdsm::detail::output_count<mm_split>() == 3);

struct Expected {
  std::vector<long> q, r;
  std::vector<float> halved;
  std::vector<int> parity;
  std::vector<double> scaled;
};

constexpr std::size_t kN = 10'007;

long a_of(std::size_t i) { return static_cast<long>(i * 7919 % 100'003) - 50'000; }
long b_of(std::size_t i) { return static_cast<long>(i % 13) + 1; }

Expected expected() {
  Expected e{std::vector<long>(kN), std::vector<long>(kN), std::vector<float>(kN), std::vector<int>(kN),
             std::vector<double>(kN)};
  for (std::size_t i = 0; i < kN; ++i) {
    mm_divmod::call(&e.q[i], &e.r[i], a_of(i), b_of(i));
    mm_split::call(&e.halved[i], &e.parity[i], &e.scaled[i], i, static_cast<int>(a_of(i)), 0.25);
  }
  return e;
}

template <class T>
std::vector<T> values(hdsm::Vector<T>& v) {
  return std::vector<T>(v.data(), v.data() + v.size());
}

void check(hdsm::Runtime& rt, hdsm::SkeletonBackend backend, const std::vector<unsigned>& devices,
           const std::string& where) {
  SCOPED_TRACE(where);
  const hdsm::ContainerOptions o{&rt};
  hdsm::Vector<long> a(kN, o), b(kN, o), q(kN, o), r(kN, o);
  hdsm::Vector<int> x(kN, o), parity(kN, o);
  hdsm::Vector<float> halved(kN, o);
  hdsm::Vector<double> scaled(kN, o);
  for (std::size_t i = 0; i < kN; ++i) {
    a(i) = a_of(i);
    b(i) = b_of(i);
    x(i) = static_cast<int>(a_of(i));
  }
  hdsm::Map<mm_divmod> divmod;
  hdsm::MapIndex<mm_split> split;
  divmod.backend(backend);
  split.backend(backend);
  if (!devices.empty()) {
    divmod.devices(devices);
    split.devices(devices);
  }
  divmod(q, r, a, b);
  split(halved, parity, scaled, x, 0.25);
  const Expected e = expected();
  EXPECT_EQ(values(q), e.q);
  EXPECT_EQ(values(r), e.r);
  EXPECT_EQ(values(halved), e.halved);
  EXPECT_EQ(values(parity), e.parity);
  EXPECT_EQ(values(scaled), e.scaled);
  // In place: the quotient replaces a, the remainder b.
  divmod(a, b, a, b);
  EXPECT_EQ(values(a), e.q);
  EXPECT_EQ(values(b), e.r);
}

TEST(MapOutputs, SeveralOutputsOnTheHostAndSimDevices) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config().set("HDSM_SIM_DEVICES", "3"));
  check(rt, hdsm::SkeletonBackend::host, {}, "host");
  check(rt, hdsm::SkeletonBackend::devices, {0}, "1 device");
  check(rt, hdsm::SkeletonBackend::devices, {0, 1}, "2 devices");
  check(rt, hdsm::SkeletonBackend::devices, {1, 2, 0}, "3 devices");
}

TEST(MapOutputs, opencl) {
  std::string why;
  const std::unique_ptr<hdsm::Runtime> rt = hdsm::test::opencl_runtime(why);
  if (!rt) GTEST_SKIP() << why;
  check(*rt, hdsm::SkeletonBackend::devices, {}, "OpenCL");
}

TEST(MapOutputs, TheGeneratedKernelStoresEachOutput) {
  const std::string text =
      hdsm::detail::MapKernel<mm_divmod, false, std::tuple<long, long>, long, long>::opencl();
  for (const char* part : {"__global long* out0, __global long* out1", "long r0;", "long r1;",
                           "mm_divmod(&r0, &r1, in0[i], in1[i]);", "out0[i] = r0;", "out1[i] = r1;"})
    EXPECT_NE(text.find(part), std::string::npos) << part << " in\n" << text;
}

TEST(MapOutputs, BadOutputsAreNamedBeforeAnyWork) {
  hdsm::Runtime rt(hdsm::test::fast_sim_config());
  const hdsm::ContainerOptions o{&rt};
  hdsm::Vector<long> a(10, 9, o), b(10, 2, o), q(10, 7, o), r(11, 7, o);
  hdsm::Map<mm_divmod> divmod;
  try {
    divmod(q, r, a, b);
    FAIL() << "outputs of 10 and 11 elements were accepted";
  } catch (const hdsm::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("hdsm::Map<mm_divmod>"), std::string::npos) << what;
    EXPECT_NE(what.find("11"), std::string::npos) << what;
  }
  try {
    divmod(q, q, a, b);
    FAIL() << "one vector as two outputs was accepted";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("same vector"), std::string::npos) << e.what();
  }
  EXPECT_EQ(q[0], 7) << "nothing ran";
}

}  // namespace
