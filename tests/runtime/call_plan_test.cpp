// Kernel calls planned as values (AdsmModel::plan, src/runtime/adsm_model.hpp): the device a call
// runs on, its translated arguments, the objects of other devices it reaches (peers, or copies with
// HDSM_REMOTE=copy), the order of its call locks and what it releases where. Planning enqueues and
// launches nothing, which each test checks.
#include "support/test_support.hpp"

#include "runtime/adsm_model.hpp"
#include "runtime/runtime_impl.hpp"

#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

namespace {

using hdsm::detail::CallArg;
using hdsm::detail::CallPlan;
using Use = hdsm::coherence::KernelUse;

const hdsm::Kernel& two_pointers() {
  static const hdsm::Kernel k = hdsm::per_thread("two", [](const hdsm::Thread&, const float*, float*) {});
  return k;
}

class CallPlans : public ::testing::Test {
 protected:
  void make(const std::string& peers, const std::string& remote = "peer") {
    rt_ = std::make_unique<hdsm::Runtime>(hdsm::test::fast_sim_config("rolling")
                                              .set("HDSM_SIM_DEVICES", "3")
                                              .set("HDSM_SIM_PEER", peers)
                                              .set("HDSM_REMOTE", remote));
    model_ = &dynamic_cast<hdsm::detail::AdsmModel&>(*hdsm::detail::impl_of(*rt_).model);
  }
  template <class... A>
  CallPlan plan(A... args) {
    const std::array<CallArg, sizeof...(A)> packed{hdsm::detail::call_arg(args)...};
    return model_->plan(two_pointers(), packed);
  }
  /// What a kernel of `device` receives for p.
  hdsm::KernelArg argument(const void* p) { return hdsm::detail::impl_of(*rt_).shared_space().argument(p); }
  void expect_nothing_ran() {
    EXPECT_EQ(rt_->stats().kernel_launches, 0u) << "planning launched a kernel";
    for (const auto& r : rt_->stats().routes) EXPECT_EQ(r.transfers, 0u) << "planning moved data";
  }
  static bool same(const hdsm::KernelArg& a, const hdsm::KernelArg& b) {
    return a.is_buffer() == b.is_buffer() && a.buffer() == b.buffer() && a.offset() == b.offset() &&
           a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
  }

  std::unique_ptr<hdsm::Runtime> rt_;
  hdsm::detail::AdsmModel* model_ = nullptr;
};

TEST_F(CallPlans, AnUnannotatedCallRunsOnItsFirstObjectsDeviceAndReleasesEverythingThere) {
  make("all");
  float* a = rt_->alloc<float>(64, 1);
  float* b = rt_->alloc<float>(64, 1);
  const CallPlan p = plan(a, b + 4);
  EXPECT_EQ(p.device, 1u);
  EXPECT_TRUE(p.every_object);
  EXPECT_TRUE(p.uses.empty());
  EXPECT_TRUE(p.remote.empty());
  EXPECT_EQ(p.lock_order, (std::vector<unsigned>{1}));
  ASSERT_EQ(p.releases.size(), 1u);
  EXPECT_EQ(p.releases[0].device, 1u);
  EXPECT_TRUE(p.releases[0].uses.empty()) << "every object of the device";
  ASSERT_EQ(p.arguments.size(), 2u);
  EXPECT_TRUE(same(p.arguments[0], argument(a)));
  EXPECT_TRUE(same(p.arguments[1], argument(b + 4))) << "an interior pointer keeps its offset";
  expect_nothing_ran();
}

TEST_F(CallPlans, AValueFirstDoesNotChooseTheDeviceAndHostPointersPassAsTheyAre) {
  make("all");
  float host[4] = {};
  float* b = rt_->alloc<float>(64, 2);
  const std::array<CallArg, 3> args{hdsm::detail::call_arg(7),
                                    hdsm::detail::call_arg(static_cast<float*>(host)),
                                    hdsm::detail::call_arg(b)};
  const CallPlan p = model_->plan(two_pointers(), args);
  EXPECT_EQ(p.device, 2u);
  EXPECT_TRUE(same(p.arguments[1], hdsm::KernelArg::value(static_cast<float*>(host))));
  expect_nothing_ran();
}

TEST_F(CallPlans, APeerObjectIsReleasedOnItsHomeFirstAndTheLocksGoInIndexOrder) {
  make("all");
  float* mine = rt_->alloc<float>(64, 2);
  float* theirs = rt_->alloc<float>(64, 0);
  const CallPlan p = plan(hdsm::inout(mine), hdsm::in(theirs));
  EXPECT_EQ(p.device, 2u);
  EXPECT_FALSE(p.every_object);
  ASSERT_EQ(p.uses.size(), 1u);
  EXPECT_EQ(p.uses[0].pointer, mine);
  EXPECT_EQ(p.uses[0].use, Use::inout);
  ASSERT_EQ(p.remote.size(), 1u);
  EXPECT_EQ(p.remote[0].home, 0u);
  EXPECT_EQ(p.remote[0].use, Use::in);
  EXPECT_FALSE(p.remote[0].temporary.has_value()) << "a peer is reached, not copied";
  EXPECT_TRUE(p.copied.empty());
  EXPECT_EQ(p.lock_order, (std::vector<unsigned>{0, 2}));
  ASSERT_EQ(p.releases.size(), 2u);
  EXPECT_EQ(p.releases[0].device, 0u) << "the remote object's home first";
  ASSERT_EQ(p.releases[0].uses.size(), 1u);
  EXPECT_EQ(p.releases[0].uses[0].pointer, theirs);
  EXPECT_EQ(p.releases[1].device, 2u);
  expect_nothing_ran();
}

TEST_F(CallPlans, ANonPeerIsCopiedWithHdsmRemoteCopyAndRefusedWithout) {
  make("none", "copy");
  float* mine = rt_->alloc<float>(64, 0);
  float* theirs = rt_->alloc<float>(64, 1);
  const CallPlan p = plan(hdsm::in(theirs + 8), hdsm::inout(mine));
  EXPECT_EQ(p.device, 1u) << "the first shared pointer's device";
  ASSERT_EQ(p.remote.size(), 1u);
  EXPECT_EQ(p.remote[0].home, 0u);
  EXPECT_TRUE(p.remote[0].temporary.has_value()) << "a copy is planned";
  ASSERT_EQ(p.copied.size(), 1u);
  EXPECT_EQ(p.copied[0], (CallPlan::Copied{1, 0, mine}));
  expect_nothing_ran();

  make("none", "peer");
  float* x = rt_->alloc<float>(64, 0);
  float* y = rt_->alloc<float>(64, 1);
  EXPECT_THROW(plan(x, y), hdsm::Unsupported);
  expect_nothing_ran();
}

TEST_F(CallPlans, ABadRangeFailsAtThePlanWithNothingEnqueued) {
  make("all");
  float* a = rt_->alloc<float>(64, 0);
  EXPECT_THROW(plan(hdsm::in(a, 60, 8), a), hdsm::InvalidArgument);
  expect_nothing_ran();
}

// A range's end (one past an object's last byte) is passed as the end of its object's buffer, and
// stands for that object in the plan, also when the object's size is a whole number of blocks (4 KiB
// here) and the next object was allocated after it. Before, the end was the next object's start:
// the kernel got that object's buffer, and the call used that object.
TEST_F(CallPlans, ARangesEndIsTheEndOfItsObjectsBuffer) {
  make("all");
  float* a = rt_->alloc<float>(1024, 0);
  float* b = rt_->alloc<float>(1024, 0);
  const CallPlan p = plan(hdsm::in(a), a + 1024);
  ASSERT_EQ(p.arguments.size(), 2u);
  ASSERT_TRUE(p.arguments[1].is_buffer());
  EXPECT_EQ(p.arguments[1].buffer(), p.arguments[0].buffer()) << "not b's buffer";
  EXPECT_EQ(p.arguments[1].offset(), 1024 * sizeof(float));
  ASSERT_EQ(p.uses.size(), 1u) << "the end stands for a, not for b";
  EXPECT_EQ(p.uses[0].pointer, a);
  EXPECT_TRUE(same(argument(b), plan(b, a).arguments[0])) << "b is still b";
  // On another device, a peer: the remote object is a, named by its start.
  float* c = rt_->alloc<float>(16, 1);
  const CallPlan q = plan(hdsm::inout(c), a + 1024);
  ASSERT_EQ(q.remote.size(), 1u);
  EXPECT_EQ(q.remote[0].pointer, a);
  // A range annotated from an end holds no byte of the object.
  EXPECT_THROW(plan(hdsm::in(a + 1024, 0, 4), c), hdsm::InvalidArgument);
  expect_nothing_ran();
}

TEST_F(CallPlans, ATypedConstParameterPlansAsIn) {
  make("all");
  float* a = rt_->alloc<float>(64, 0);
  float* b = rt_->alloc<float>(64, 0);
  const std::array<CallArg, 2> args{hdsm::detail::typed_call_arg<const float*>(a),
                                    hdsm::detail::typed_call_arg<float*>(hdsm::out(b))};
  const CallPlan p = model_->plan(two_pointers(), args);
  ASSERT_EQ(p.uses.size(), 2u);
  EXPECT_EQ(p.uses[0].use, Use::in);
  EXPECT_EQ(p.uses[1].use, Use::out);
  expect_nothing_ran();
}

TEST_F(CallPlans, APlanEnqueuedRunsTheCall) {
  make("all");
  auto add = hdsm::per_thread("add_one", [](const hdsm::Thread& t, float* x, std::uint64_t n) {
    if (t.global_x() < n) x[t.global_x()] += 1;
  });
  float* x = rt_->alloc<float>(64, 0);
  const std::array<CallArg, 2> args{hdsm::detail::call_arg(hdsm::inout(x)),
                                    hdsm::detail::call_arg(std::uint64_t{64})};
  model_->enqueue(add, hdsm::cover(64), model_->plan(add, args));
  rt_->sync();
  EXPECT_EQ(x[63], 1.0f);
  EXPECT_EQ(rt_->stats().kernel_launches, 1u);
}

}  // namespace
