// Coherence protocols: every transition against a literal table, the rolling window against a deque
// model, and plans of whole objects.
#include "coherence/protocol.hpp"
#include "coherence/plan.hpp"
#include "coherence/rolling_window.hpp"

#include <hdsm/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <iterator>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hdsm::coherence {

// Readable gtest output for the values under test.
void PrintTo(ProtocolKind v, std::ostream* out) { *out << to_string(v); }
void PrintTo(BlockState v, std::ostream* out) { *out << to_string(v); }
void PrintTo(KernelUse v, std::ostream* out) { *out << to_string(v); }
void PrintTo(Transfer v, std::ostream* out) { *out << to_string(v); }
void PrintTo(const Transition& t, std::ostream* out) {
  *out << "{" << to_string(t.next) << ", " << os::to_string(t.protection) << ", " << to_string(t.transfer)
       << "}";
}
void PrintTo(const CopyStep& s, std::ostream* out) {
  *out << "{" << to_string(s.direction) << ", " << s.first_block << ", " << s.blocks << "}";
}
void PrintTo(const ProtectionRun& r, std::ostream* out) {
  *out << "{" << r.first_block << ", " << r.blocks << ", " << os::to_string(r.protection) << "}";
}

}  // namespace hdsm::coherence

namespace {

using namespace hdsm::coherence;
using S = BlockState;
using U = KernelUse;
using T = Transfer;
using A = Access;
using K = ProtocolKind;
using P = Protection;

constexpr K kKinds[] = {K::batch, K::lazy, K::rolling};
constexpr S kStates[] = {S::invalid, S::read_only, S::dirty};
constexpr U kUses[] = {U::unknown, U::none, U::in, U::out, U::inout};
constexpr A kAccesses[] = {A::read, A::write};

// The specification's protection of each state, written out rather than computed.
P expected_protection(K kind, S state) {
  if (kind == K::batch) return P::read_write;
  return state == S::invalid ? P::none : state == S::read_only ? P::read : P::read_write;
}

struct UseRow {
  S from;
  U use;
  S next;
  T transfer;
};

// Release: the same states and transfers under every protocol.
const std::vector<UseRow> kRelease = {
    {S::invalid, U::unknown, S::invalid, T::none},    {S::invalid, U::inout, S::invalid, T::none},
    {S::invalid, U::in, S::invalid, T::none},         {S::invalid, U::out, S::invalid, T::none},
    {S::invalid, U::none, S::invalid, T::none},       {S::read_only, U::unknown, S::invalid, T::none},
    {S::read_only, U::inout, S::invalid, T::none},    {S::read_only, U::in, S::read_only, T::none},
    {S::read_only, U::out, S::invalid, T::none},      {S::read_only, U::none, S::read_only, T::none},
    {S::dirty, U::unknown, S::invalid, T::to_device}, {S::dirty, U::inout, S::invalid, T::to_device},
    {S::dirty, U::in, S::read_only, T::to_device},    {S::dirty, U::out, S::invalid, T::none},
    {S::dirty, U::none, S::dirty, T::none},
};

const std::vector<UseRow> kBatchAcquire = {
    {S::invalid, U::unknown, S::dirty, T::to_host}, {S::invalid, U::inout, S::dirty, T::to_host},
    {S::invalid, U::out, S::dirty, T::to_host},     {S::invalid, U::in, S::dirty, T::to_host},
    {S::invalid, U::none, S::invalid, T::none},     {S::read_only, U::unknown, S::dirty, T::to_host},
    {S::read_only, U::inout, S::dirty, T::to_host}, {S::read_only, U::out, S::dirty, T::to_host},
    {S::read_only, U::in, S::dirty, T::none},       {S::read_only, U::none, S::read_only, T::none},
    {S::dirty, U::unknown, S::dirty, T::to_host},   {S::dirty, U::inout, S::dirty, T::to_host},
    {S::dirty, U::out, S::dirty, T::to_host},       {S::dirty, U::in, S::dirty, T::none},
    {S::dirty, U::none, S::dirty, T::none},
};

// Lazy and rolling: nothing moves at the sync.
const std::vector<UseRow> kDetectingAcquire = {
    {S::invalid, U::unknown, S::invalid, T::none}, {S::invalid, U::inout, S::invalid, T::none},
    {S::invalid, U::out, S::invalid, T::none},     {S::invalid, U::in, S::invalid, T::none},
    {S::invalid, U::none, S::invalid, T::none},    {S::read_only, U::unknown, S::invalid, T::none},
    {S::read_only, U::inout, S::invalid, T::none}, {S::read_only, U::out, S::invalid, T::none},
    {S::read_only, U::in, S::read_only, T::none},  {S::read_only, U::none, S::read_only, T::none},
    {S::dirty, U::unknown, S::invalid, T::none},   {S::dirty, U::inout, S::invalid, T::none},
    {S::dirty, U::out, S::invalid, T::none},       {S::dirty, U::in, S::dirty, T::none},
    {S::dirty, U::none, S::dirty, T::none},
};

struct FaultRow {
  S from;
  A access;
  S next;
  T transfer;
};

// Lazy and rolling; every other (kind, state, access) throws.
const std::vector<FaultRow> kFaults = {
    {S::invalid, A::read, S::read_only, T::to_host},
    {S::invalid, A::write, S::dirty, T::to_host},
    {S::read_only, A::write, S::dirty, T::none},
};

// Every (state, use) pair appears exactly once in a use table.
void expect_complete(const std::vector<UseRow>& rows) {
  std::set<std::pair<S, U>> seen;
  for (const auto& r : rows) EXPECT_TRUE(seen.emplace(r.from, r.use).second) << "duplicate row";
  EXPECT_EQ(seen.size(), std::size(kStates) * std::size(kUses));
}

TEST(ProtocolKindTest, ParsesAndNamesEachProtocol) {
  for (const K kind : kKinds) EXPECT_EQ(parse_protocol(to_string(kind)), kind);
  EXPECT_STREQ(to_string(K::batch), "batch");
  EXPECT_STREQ(to_string(K::lazy), "lazy");
  EXPECT_STREQ(to_string(K::rolling), "rolling");
}

TEST(ProtocolKindTest, UnknownNameIsAConfigErrorNamingValueAndChoices) {
  for (const char* bad : {"eager", "", "Lazy", "batch "}) {
    try {
      parse_protocol(bad);
      ADD_FAILURE() << "'" << bad << "' parsed";
    } catch (const hdsm::ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
      for (const char* choice : {"batch", "lazy", "rolling"})
        EXPECT_NE(what.find(choice), std::string::npos) << what;
    }
  }
}

TEST(ProtocolTransitionTest, InitialStateAndProtection) {
  EXPECT_EQ(initial(K::batch), (Transition{S::dirty, P::read_write, T::none}));
  EXPECT_EQ(initial(K::lazy), (Transition{S::read_only, P::read, T::none}));
  EXPECT_EQ(initial(K::rolling), (Transition{S::read_only, P::read, T::none}));
}

TEST(ProtocolTransitionTest, ProtectionOfEveryState) {
  for (const K kind : kKinds) {
    for (const S state : kStates) EXPECT_EQ(protection_of(kind, state), expected_protection(kind, state));
  }
  EXPECT_EQ(protection_of(K::lazy, S::invalid), P::none);
  EXPECT_EQ(protection_of(K::rolling, S::read_only), P::read);
  EXPECT_EQ(protection_of(K::batch, S::invalid), P::read_write);
}

TEST(ProtocolTransitionTest, TablesAreComplete) {
  expect_complete(kRelease);
  expect_complete(kBatchAcquire);
  expect_complete(kDetectingAcquire);
}

TEST(ProtocolTransitionTest, EveryRelease) {
  for (const K kind : kKinds) {
    for (const auto& r : kRelease) {
      EXPECT_EQ(on_release(kind, r.from, r.use),
                (Transition{r.next, expected_protection(kind, r.next), r.transfer}))
          << to_string(kind) << " release of a " << to_string(r.from) << " block, use " << to_string(r.use);
    }
  }
}

TEST(ProtocolTransitionTest, EveryAcquire) {
  for (const K kind : kKinds) {
    for (const auto& r : kind == K::batch ? kBatchAcquire : kDetectingAcquire) {
      EXPECT_EQ(on_acquire(kind, r.from, r.use),
                (Transition{r.next, expected_protection(kind, r.next), r.transfer}))
          << to_string(kind) << " acquire of a " << to_string(r.from) << " block, use " << to_string(r.use);
    }
  }
}

TEST(ProtocolTransitionTest, EveryLegalFault) {
  for (const K kind : {K::lazy, K::rolling}) {
    for (const auto& r : kFaults) {
      EXPECT_EQ(on_fault(kind, r.from, r.access),
                (Transition{r.next, expected_protection(kind, r.next), r.transfer}))
          << to_string(kind) << " " << to_string(r.access) << " fault on a " << to_string(r.from) << " block";
    }
  }
}

TEST(ProtocolTransitionTest, EveryImpossibleFaultThrowsNamingProtocolStateAndAccess) {
  int illegal = 0;
  for (const K kind : kKinds) {
    for (const S state : kStates) {
      for (const A access : kAccesses) {
        const bool legal =
            kind != K::batch && std::any_of(kFaults.begin(), kFaults.end(), [&](const FaultRow& r) {
              return r.from == state && r.access == access;
            });
        if (legal) continue;
        ++illegal;
        try {
          on_fault(kind, state, access);
          ADD_FAILURE() << to_string(kind) << " " << to_string(access) << " fault on " << to_string(state);
        } catch (const std::logic_error& e) {
          const std::string what = e.what();
          for (const char* word : {to_string(kind), to_string(state), to_string(access)}) {
            EXPECT_NE(what.find(word), std::string::npos) << what;
          }
        }
      }
    }
  }
  // Batch: all 6; lazy and rolling: read on read_only, read and write on dirty.
  EXPECT_EQ(illegal, 6 + 3 + 3);
}

TEST(ProtocolTransitionTest, OnlyRollingEvictsAndOnlyDirtyBlocks) {
  EXPECT_EQ(on_evict(K::rolling, S::dirty), (Transition{S::read_only, P::read, T::to_device}));
  for (const K kind : kKinds) {
    for (const S state : kStates) {
      if (kind == K::rolling && state == S::dirty) continue;
      EXPECT_THROW(on_evict(kind, state), std::logic_error) << to_string(kind) << " " << to_string(state);
    }
  }
}

// Bulk operations (seed 000 §4.4): the whole table of protocol.hpp, written out.
TEST(ProtocolTransitionTest, EveryBulkWrite) {
  using Sd = Side;
  for (const K kind : kKinds) {
    const bool batch = kind == K::batch;
    for (const bool whole : {false, true}) {
      const std::string what = std::string(to_string(kind)) + (whole ? " whole" : " part");
      EXPECT_EQ(on_bulk_write(kind, S::invalid, whole), (BulkStep{Sd::device, S::invalid})) << what;
      EXPECT_EQ(on_bulk_write(kind, S::dirty, whole), (BulkStep{Sd::host, S::dirty})) << what;
      const BulkStep read_only =
          whole && !batch ? BulkStep{Sd::device, S::invalid} : BulkStep{Sd::both, S::read_only};
      EXPECT_EQ(on_bulk_write(kind, S::read_only, whole), read_only) << what;
    }
  }
}

TEST(ProtocolTransitionTest, BulkReadsUseTheDeviceOnlyForInvalidBlocks) {
  EXPECT_EQ(on_bulk_read(S::invalid), Side::device);
  EXPECT_EQ(on_bulk_read(S::read_only), Side::host);
  EXPECT_EQ(on_bulk_read(S::dirty), Side::host);
  EXPECT_STREQ(to_string(Side::both), "both");
}

// A whole lifetime under lazy-update, as the seed describes it.
TEST(ProtocolTransitionTest, LazyLifetime) {
  Transition t = initial(K::lazy);
  t = on_fault(K::lazy, t.next, A::write);  // CPU initialises the input
  EXPECT_EQ(t, (Transition{S::dirty, P::read_write, T::none}));
  t = on_release(K::lazy, t.next, U::unknown);
  EXPECT_EQ(t, (Transition{S::invalid, P::none, T::to_device}));
  t = on_acquire(K::lazy, t.next, U::unknown);
  EXPECT_EQ(t, (Transition{S::invalid, P::none, T::none}));
  t = on_fault(K::lazy, t.next, A::read);  // CPU reads the output
  EXPECT_EQ(t, (Transition{S::read_only, P::read, T::to_host}));
  t = on_release(K::lazy, t.next, U::unknown);
  EXPECT_EQ(t, (Transition{S::invalid, P::none, T::none}));
}

// ---- RollingWindow ----

// The test's record of each block's place in the window (node-based: places must not move).
struct Blocks {
  std::unordered_map<std::uint64_t, RollingWindow::Place> places;
  RollingWindow::Place& operator[](std::uint64_t block) { return places[block]; }
};

TEST(RollingWindowTest, EvictsOldestFirst) {
  RollingWindow w(3);
  Blocks p;
  EXPECT_EQ(w.on_dirty(10, p[10]), std::nullopt);
  EXPECT_EQ(w.on_dirty(20, p[20]), std::nullopt);
  EXPECT_EQ(w.on_dirty(30, p[30]), std::nullopt);
  EXPECT_EQ(w.size(), 3u);
  EXPECT_EQ(w.on_dirty(40, p[40]), std::optional<std::uint64_t>(10));
  EXPECT_FALSE(RollingWindow::contains(p[10]));  // the evicted block's place is cleared
  EXPECT_EQ(w.on_dirty(50, p[50]), std::optional<std::uint64_t>(20));
  EXPECT_EQ(w.on_dirty(60, p[60]), std::optional<std::uint64_t>(30));
  EXPECT_EQ(w.size(), 3u);
  EXPECT_FALSE(RollingWindow::contains(p[30]));
  EXPECT_TRUE(RollingWindow::contains(p[60]));
}

TEST(RollingWindowTest, RemoveInTheMiddleKeepsTheOrderOfTheRest) {
  RollingWindow w(3);
  Blocks p;
  w.on_dirty(1, p[1]);
  w.on_dirty(2, p[2]);
  w.on_dirty(3, p[3]);
  EXPECT_TRUE(w.remove(p[2]));
  EXPECT_FALSE(w.remove(p[2]));
  EXPECT_FALSE(w.remove(p[99]));
  EXPECT_EQ(w.size(), 2u);
  EXPECT_EQ(w.on_dirty(4, p[4]), std::nullopt);
  EXPECT_EQ(w.on_dirty(5, p[5]), std::optional<std::uint64_t>(1));
  EXPECT_EQ(w.on_dirty(6, p[6]), std::optional<std::uint64_t>(3));
  EXPECT_EQ(w.on_dirty(2, p[2]), std::optional<std::uint64_t>(4));  // a removed block may become dirty again
}

TEST(RollingWindowTest, GrowRaisesTheRollingSize) {
  RollingWindow w;
  Blocks p;
  EXPECT_EQ(w.capacity(), 0u);
  EXPECT_THROW(w.on_dirty(1, p[1]), std::logic_error);
  w.grow();
  EXPECT_EQ(w.capacity(), default_rolling_step);
  EXPECT_EQ(default_rolling_step, 2u);
  w.grow(3);
  EXPECT_EQ(w.capacity(), 5u);
  for (std::uint64_t b = 0; b < 5; ++b) EXPECT_EQ(w.on_dirty(b, p[b]), std::nullopt);
  EXPECT_EQ(w.on_dirty(5, p[5]), std::optional<std::uint64_t>(0));
  w.grow(1);  // a full window takes one more block without evicting
  EXPECT_EQ(w.on_dirty(6, p[6]), std::nullopt);
  EXPECT_EQ(w.size(), 6u);
  EXPECT_EQ(w.on_dirty(7, p[7]), std::optional<std::uint64_t>(1));
}

// A free lowers the rolling size: blocks beyond it stay dirty, and each new one evicts the oldest, so
// the window never holds more than it did; adding without eviction waits until it is below again.
TEST(RollingWindowTest, ShrinkLowersTheRollingSize) {
  RollingWindow w;
  Blocks p;
  w.grow(2);
  w.grow(2);
  for (std::uint64_t b = 0; b < 4; ++b) EXPECT_EQ(w.on_dirty(b, p[b]), std::nullopt);
  w.shrink(2);
  EXPECT_EQ(w.capacity(), 2u);
  EXPECT_EQ(w.size(), 4u);
  EXPECT_FALSE(w.can_add());
  EXPECT_EQ(w.on_dirty(4, p[4]), std::optional<std::uint64_t>(0));
  EXPECT_EQ(w.size(), 4u);
  EXPECT_TRUE(w.remove(p[1]));
  EXPECT_TRUE(w.remove(p[2]));
  EXPECT_TRUE(w.remove(p[3]));
  EXPECT_TRUE(w.can_add());
  EXPECT_TRUE(w.try_add(5, p[5]));
  EXPECT_EQ(w.on_dirty(6, p[6]), std::optional<std::uint64_t>(4));
  w.shrink(100);
  EXPECT_EQ(w.capacity(), 0u);
}

TEST(RollingWindowTest, ClearEmptiesTheWindow) {
  RollingWindow w(2);
  Blocks p;
  w.on_dirty(1, p[1]);
  w.on_dirty(2, p[2]);
  w.clear();
  EXPECT_EQ(w.size(), 0u);
  EXPECT_EQ(w.capacity(), 2u);
  EXPECT_FALSE(RollingWindow::contains(p[1]));
  EXPECT_EQ(w.on_dirty(1, p[1]), std::nullopt);
  EXPECT_EQ(w.on_dirty(2, p[2]), std::nullopt);
  EXPECT_EQ(w.on_dirty(3, p[3]), std::optional<std::uint64_t>(1));
}

TEST(RollingWindowTest, CapacityOneEvictsThePreviousBlock) {
  RollingWindow w(1);
  Blocks p;
  EXPECT_EQ(w.on_dirty(7, p[7]), std::nullopt);
  EXPECT_EQ(w.on_dirty(8, p[8]), std::optional<std::uint64_t>(7));
  EXPECT_EQ(w.on_dirty(9, p[9]), std::optional<std::uint64_t>(8));
  EXPECT_EQ(w.size(), 1u);
  EXPECT_TRUE(w.remove(p[9]));
  EXPECT_EQ(w.on_dirty(7, p[7]), std::nullopt);
}

TEST(RollingWindowTest, ADirtyBlockCannotBecomeDirtyAgain) {
  RollingWindow w(4);
  Blocks p;
  w.on_dirty(~std::uint64_t{0}, p[0]);
  EXPECT_THROW(w.on_dirty(~std::uint64_t{0}, p[0]), std::logic_error);
  EXPECT_FALSE(w.try_add(~std::uint64_t{0}, p[0]));
  EXPECT_EQ(w.size(), 1u);
}

TEST(RollingWindowTest, TryAddOnlyFillsFreeRoomAndNeverEvicts) {
  RollingWindow w;
  Blocks p;
  EXPECT_FALSE(w.can_add());
  EXPECT_FALSE(w.try_add(1, p[1]));  // capacity 0
  w.grow(3);
  EXPECT_TRUE(w.try_add(1, p[1]));
  EXPECT_TRUE(w.try_add(2, p[2]));
  EXPECT_FALSE(w.try_add(2, p[2]));
  EXPECT_TRUE(w.try_add(3, p[3]));
  EXPECT_FALSE(w.can_add());
  EXPECT_FALSE(w.try_add(4, p[4]));  // would evict: the caller takes on_dirty()
  EXPECT_FALSE(RollingWindow::contains(p[4]));
  EXPECT_EQ(w.size(), 3u);
  EXPECT_EQ(w.on_dirty(4, p[4]), std::optional<std::uint64_t>(1));
  EXPECT_TRUE(w.remove(p[3]));
  EXPECT_TRUE(w.can_add());
  EXPECT_TRUE(w.try_add(5, p[5]));
  EXPECT_EQ(w.on_dirty(6, p[6]), std::optional<std::uint64_t>(2));  // added blocks keep their arrival order
  EXPECT_EQ(w.on_dirty(7, p[7]), std::optional<std::uint64_t>(4));
  EXPECT_EQ(w.on_dirty(8, p[8]), std::optional<std::uint64_t>(5));
}

TEST(RollingWindowTest, ThousandsOfBlocksWithHolesKeepTheirOrder) {
  // Enough blocks and removals in the middle to make the ring rebuild several times.
  RollingWindow w(5000);
  Blocks p;
  for (std::uint64_t b = 0; b < 5000; ++b) ASSERT_TRUE(w.try_add(b, p[b])) << b;
  for (std::uint64_t b = 2; b < 5000; b += 2) ASSERT_TRUE(w.remove(p[b]));
  for (std::uint64_t b = 5000; b < 7499; ++b) ASSERT_EQ(w.on_dirty(b, p[b]), std::nullopt) << b;
  ASSERT_EQ(w.on_dirty(7499, p[7499]), std::optional<std::uint64_t>(0));
  for (std::uint64_t b = 1; b < 5000; b += 2) {
    const std::uint64_t next = 7499 + b;
    ASSERT_EQ(w.on_dirty(next, p[next]), std::optional<std::uint64_t>(b));
    ASSERT_FALSE(RollingWindow::contains(p[b]));
  }
  EXPECT_EQ(w.size(), 5000u);
}

TEST(RollingWindowTest, MatchesADequeModelOverALongRandomSequence) {
  std::mt19937_64 rng(20240607);
  RollingWindow w(1);
  Blocks p;
  std::deque<std::uint64_t> model;
  std::size_t capacity = 1, evictions = 0, handler_adds = 0;
  for (int step = 0; step < 200000; ++step) {
    const auto op = rng() % 100;
    const std::uint64_t block = (rng() % 48) * 0x9e3779b97f4a7c15ull;  // sparse, high-bit ids
    if (op < 60) {
      if (std::find(model.begin(), model.end(), block) != model.end()) continue;
      // A handler's add: it succeeds exactly when the window has room and evicts nothing.
      if (op % 2 == 0 && w.can_add()) {
        ASSERT_LT(model.size(), capacity) << "step " << step;
        ASSERT_TRUE(w.try_add(block, p[block])) << "step " << step;
        model.push_back(block);
        ++handler_adds;
        ASSERT_EQ(w.size(), model.size()) << "step " << step;
        continue;
      }
      ASSERT_FALSE(op % 2 == 0 && model.size() < capacity && w.try_add(block, p[block])) << "step " << step;
      model.push_back(block);
      std::optional<std::uint64_t> expected;
      if (model.size() > capacity) {
        expected = model.front();
        model.pop_front();
        ++evictions;
      }
      ASSERT_EQ(w.on_dirty(block, p[block]), expected) << "step " << step;
      // After the service's path, the next handler finds room whenever the window is not full.
      ASSERT_EQ(w.can_add(), model.size() < capacity) << "step " << step;
    } else if (op < 97) {
      const auto it = std::find(model.begin(), model.end(), block);
      const bool present = it != model.end();
      if (present) model.erase(it);
      ASSERT_EQ(w.remove(p[block]), present) << "step " << step;
    } else if (op < 99 && capacity < 24) {
      w.grow();
      capacity += 2;
    } else if (op == 99 && rng() % 50 == 0) {
      w.clear();
      model.clear();
    }
    ASSERT_EQ(w.size(), model.size()) << "step " << step;
    ASSERT_EQ(w.capacity(), capacity);
    for (const auto& [b, place] : p.places)
      ASSERT_EQ(RollingWindow::contains(place), std::find(model.begin(), model.end(), b) != model.end())
          << "step " << step << " block " << b;
  }
  EXPECT_GT(evictions, 1000u);  // the sequence really exercised eviction
  EXPECT_GT(handler_adds, 1000u);
}

// ---- Plans ----

std::vector<S> states_of(const std::string& code) {
  std::vector<S> states;
  for (const char c : code) states.push_back(c == 'i' ? S::invalid : c == 'r' ? S::read_only : S::dirty);
  return states;
}

TEST(PlanTest, CoalescesRunsOfEqualTransfersAndProtections) {
  auto states = states_of("ddrdidd");
  const CoherencePlan plan = plan_release(K::lazy, states, U::unknown);
  const CoherencePlan expected{{{T::to_device, 0, 2}, {T::to_device, 3, 1}, {T::to_device, 5, 2}},
                               {{0, 4, P::none}, {5, 2, P::none}}};  // block 4 was invalid already
  EXPECT_EQ(plan, expected);
  EXPECT_EQ(states, states_of("iiiiiii"));
}

TEST(PlanTest, AlternatingStatesGiveOneStepPerDirtyBlock) {
  auto states = states_of("drdrdr");
  const CoherencePlan plan = plan_release(K::rolling, states, U::inout);
  const CoherencePlan expected{{{T::to_device, 0, 1}, {T::to_device, 2, 1}, {T::to_device, 4, 1}},
                               {{0, 6, P::none}}};
  EXPECT_EQ(plan, expected);
  EXPECT_EQ(states, states_of("iiiiii"));
}

TEST(PlanTest, ProtectionRunsSplitWhereTheProtectionDiffers) {
  auto states = states_of("irdri");
  const CoherencePlan plan = plan_acquire(K::lazy, states, U::out);
  EXPECT_EQ(plan, (CoherencePlan{{}, {{1, 3, P::none}}}));
  states = states_of("dddrr");
  const CoherencePlan in = plan_release(K::lazy, states, U::in);
  EXPECT_EQ(in, (CoherencePlan{{{T::to_device, 0, 3}}, {{0, 3, P::read}}}));
  EXPECT_EQ(states, states_of("rrrrr"));
}

TEST(PlanTest, ReleaseOfMixedStatesWithEachUse) {
  const std::string mixed = "irddr";
  struct Case {
    U use;
    CoherencePlan plan;
    std::string after;
  };
  const Case cases[] = {
      {U::unknown, {{{T::to_device, 2, 2}}, {{1, 4, P::none}}}, "iiiii"},
      {U::inout, {{{T::to_device, 2, 2}}, {{1, 4, P::none}}}, "iiiii"},
      {U::in, {{{T::to_device, 2, 2}}, {{2, 2, P::read}}}, "irrrr"},
      {U::out, {{}, {{1, 4, P::none}}}, "iiiii"},
      {U::none, {}, "irddr"},
  };
  for (const K kind : {K::lazy, K::rolling}) {
    for (const auto& c : cases) {
      auto states = states_of(mixed);
      EXPECT_EQ(plan_release(kind, states, c.use), c.plan) << to_string(kind) << " " << to_string(c.use);
      EXPECT_EQ(states, states_of(c.after)) << to_string(kind) << " " << to_string(c.use);
    }
  }
}

TEST(PlanTest, AcquireOfMixedStatesWithEachUse) {
  const std::string mixed = "irdri";
  struct Case {
    K kind;
    U use;
    CoherencePlan plan;
    std::string after;
  };
  const Case cases[] = {
      {K::lazy, U::unknown, {{}, {{1, 3, P::none}}}, "iiiii"},
      {K::lazy, U::inout, {{}, {{1, 3, P::none}}}, "iiiii"},
      {K::lazy, U::out, {{}, {{1, 3, P::none}}}, "iiiii"},
      {K::lazy, U::in, {}, "irdri"},
      {K::lazy, U::none, {}, "irdri"},
      {K::rolling, U::unknown, {{}, {{1, 3, P::none}}}, "iiiii"},
      {K::rolling, U::in, {}, "irdri"},
      {K::batch, U::unknown, {{{T::to_host, 0, 5}}, {}}, "ddddd"},
      {K::batch, U::inout, {{{T::to_host, 0, 5}}, {}}, "ddddd"},
      {K::batch, U::out, {{{T::to_host, 0, 5}}, {}}, "ddddd"},
      {K::batch, U::in, {{{T::to_host, 0, 1}, {T::to_host, 4, 1}}, {}}, "ddddd"},
      {K::batch, U::none, {}, "irdri"},
  };
  for (const auto& c : cases) {
    auto states = states_of(mixed);
    EXPECT_EQ(plan_acquire(c.kind, states, c.use), c.plan) << to_string(c.kind) << " " << to_string(c.use);
    EXPECT_EQ(states, states_of(c.after)) << to_string(c.kind) << " " << to_string(c.use);
  }
}

TEST(PlanTest, BatchMovesWholeObjectsAndNeverProtects) {
  std::vector<S> states(8, initial(K::batch).next);
  EXPECT_EQ(plan_release(K::batch, states, U::unknown), (CoherencePlan{{{T::to_device, 0, 8}}, {}}));
  EXPECT_EQ(states, states_of("iiiiiiii"));
  EXPECT_EQ(plan_acquire(K::batch, states, U::unknown), (CoherencePlan{{{T::to_host, 0, 8}}, {}}));
  EXPECT_EQ(states, states_of("dddddddd"));
  // A read-only kernel: uploaded at the call, nothing comes back at the sync.
  EXPECT_EQ(plan_release(K::batch, states, U::in), (CoherencePlan{{{T::to_device, 0, 8}}, {}}));
  EXPECT_EQ(plan_acquire(K::batch, states, U::in), CoherencePlan{});
  EXPECT_EQ(states, states_of("dddddddd"));
}

TEST(PlanTest, OutUploadsNothing) {
  for (const K kind : kKinds) {
    auto states = states_of("dddd");
    const CoherencePlan plan = plan_release(kind, states, U::out);
    EXPECT_TRUE(plan.copies.empty()) << to_string(kind);
    EXPECT_EQ(states, states_of("iiii")) << to_string(kind);
    const std::vector<ProtectionRun> runs =
        kind == K::batch ? std::vector<ProtectionRun>{} : std::vector<ProtectionRun>{{0, 4, P::none}};
    EXPECT_EQ(plan.protections, runs) << to_string(kind);
  }
}

TEST(PlanTest, EmptyObjectGivesAnEmptyPlan) {
  std::vector<S> none;
  EXPECT_TRUE(plan_release(K::lazy, none, U::unknown).empty());
  EXPECT_TRUE(plan_acquire(K::batch, none, U::unknown).empty());
}

}  // namespace
