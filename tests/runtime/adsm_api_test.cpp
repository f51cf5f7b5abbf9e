// The public ADSM API: alloc/free/call/sync with annotations, pointer translation, smart pointers,
// bad input and the C API, on explicit Runtime instances over poisoning sim devices.
#include "support/death_style.hpp"
#include "support/test_support.hpp"

#include <hdsm/hdsm.h>
#include <hdsm/hdsm.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/mman.h>

namespace {

hdsm::Config adsm_config(const std::string& protocol = "rolling") {
  return hdsm::test::fast_sim_config(protocol);
}

const hdsm::Kernel& vecadd() {
  static const hdsm::Kernel k =
      hdsm::per_thread("vecadd", [](const hdsm::Thread& t, const float* a, float* b, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) b[i] += a[i];
      });
  return k;
}

// x[i] = value for i < n (writes only).
const hdsm::Kernel& fill() {
  static const hdsm::Kernel k =
      hdsm::per_thread("fill", [](const hdsm::Thread& t, int* x, std::uint64_t n, int v) {
        if (const auto i = t.global_x(); i < n) x[i] = v;
      });
  return k;
}

std::uint64_t faults(const hdsm::Runtime& rt) { return rt.stats().read_faults + rt.stats().write_faults; }

// Under batch, lazy and rolling (the ADSM model: objects in hdsm's arena, copied to the device) and
// host-mapped (objects in host memory the sim kernels use in place: nothing moves, nothing faults).
class AdsmApi : public ::testing::TestWithParam<std::string> {
 protected:
  bool mapped() const { return GetParam() == "host-mapped"; }
  hdsm::Runtime rt{adsm_config(GetParam())};
};

// A typed kernel's `const float*` parameter means in: in a call with annotations, a raw pointer
// passed there keeps its host copy valid across the sync (reading it takes no fault), as hdsm::in(a)
// would; the untyped form of the same kernel counts the raw pointer as inout, and the host copy goes.
TEST_P(AdsmApi, ATypedConstParameterCountsAsIn) {
  if (GetParam() == "batch") GTEST_SKIP() << "batch moves every object at every call and sync";
  const std::size_t n = 4096;
  const auto typed =
      hdsm::per_thread("vecadd", [](const hdsm::Thread& t, const float* a, float* b, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) b[i] += a[i];
      });
  const hdsm::Kernel& untyped = typed;
  for (const bool is_typed : {true, false}) {
    SCOPED_TRACE(is_typed ? "typed" : "untyped");
    float* a = rt.alloc<float>(n);
    float* b = rt.alloc<float>(n);
    for (std::size_t i = 0; i < n; ++i) a[i] = static_cast<float>(i);
    if (is_typed)
      rt.call(typed, hdsm::cover(n), a, hdsm::inout(b), n);
    else
      rt.call(untyped, hdsm::cover(n), a, hdsm::inout(b), std::uint64_t{n});
    rt.sync();
    rt.reset_stats();
    float sum = 0;
    for (std::size_t i = 0; i < n; ++i) sum += a[i];
    EXPECT_EQ(sum, static_cast<float>(n * (n - 1) / 2));
    if (is_typed || mapped())
      EXPECT_EQ(faults(rt), 0u) << "the host copy of a const argument was invalidated";
    else
      EXPECT_GT(faults(rt), 0u) << "a raw pointer of an untyped call should count as inout";
    EXPECT_EQ(b[n - 1], static_cast<float>(n - 1));
    rt.free(a);
    rt.free(b);
  }
}

TEST_P(AdsmApi, DesignExampleVecadd) {
  const std::size_t n = 3 * 1024 + 100;
  float* a = rt.alloc<float>(n);
  float* b = rt.alloc<float>(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 1.0f;
  }
  rt.call(vecadd(), hdsm::grid((n + 255) / 256, 256), hdsm::in(a), hdsm::inout(b), std::uint64_t{n});
  rt.sync();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(b[i], static_cast<float>(i) + 1.0f) << "element " << i;
  // A second round sees the first one's results.
  rt.call(vecadd(), hdsm::cover(n), hdsm::in(a), hdsm::inout(b), std::uint64_t{n});
  rt.sync();
  EXPECT_EQ(b[42], 85.0f);
  rt.free(a);
  rt.free(b);
}

TEST_P(AdsmApi, UnannotatedCallActsOnEveryObjectOfTheDevice) {
  const std::size_t n = 2048;
  int* x = rt.alloc<int>(n);
  int* other = rt.alloc<int>(n);
  other[7] = 7;
  rt.call(fill(), hdsm::cover(n), x, std::uint64_t{n}, 3);
  rt.sync();
  EXPECT_EQ(x[n - 1], 3);
  const std::uint64_t before = faults(rt);
  EXPECT_EQ(other[7], 7);  // released and acquired although the kernel never saw it
  if (mapped()) {
    EXPECT_EQ(faults(rt), 0u);
  } else if (GetParam() != "batch") {
    EXPECT_GT(faults(rt), before);
  }
  rt.free(x);
  rt.free(other);
}

TEST_P(AdsmApi, InObjectStaysValidOnTheHost) {
  const std::size_t n = 2048;
  float* a = rt.alloc<float>(n);
  float* b = rt.alloc<float>(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = 2.0f;
  rt.call(vecadd(), hdsm::cover(n), hdsm::in(a), hdsm::inout(b), std::uint64_t{n});
  rt.sync();
  const std::uint64_t before = faults(rt);
  float sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += a[i];
  EXPECT_EQ(sum, 2.0f * n);
  if (GetParam() != "batch") {
    EXPECT_EQ(faults(rt), before);
  }
  EXPECT_EQ(b[5], 2.0f);
  rt.free(a);
  rt.free(b);
}

TEST_P(AdsmApi, OutObjectIsNotUploaded) {
  const std::size_t n = 2048;  // two blocks: within the rolling window, so nothing is evicted either
  int* x = rt.alloc<int>(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = -1;
  rt.reset_stats();
  rt.call(fill(), hdsm::cover(n), hdsm::out(x), std::uint64_t{n}, 9);
  rt.sync();
  EXPECT_EQ(rt.stats().route(hdsm::Route::h2d).bytes, 0u);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], 9) << "element " << i;
  // The same call as inout uploads the CPU's data (host-mapped: the kernel uses it in place).
  x[0] = 1;
  rt.call(fill(), hdsm::cover(n), hdsm::inout(x), std::uint64_t{n}, 4);
  rt.sync();
  if (mapped())
    EXPECT_EQ(rt.stats().route(hdsm::Route::h2d).bytes, 0u);
  else
    EXPECT_GT(rt.stats().route(hdsm::Route::h2d).bytes, 0u);
  EXPECT_EQ(x[n - 1], 4);
  rt.free(x);
}

TEST_P(AdsmApi, InteriorPointerArgumentsAreTranslated) {
  const std::size_t n = 4096;
  int* x = rt.alloc<int>(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = 1;
  rt.call(fill(), hdsm::cover(100), hdsm::inout(x + 1500), std::uint64_t{100}, 6);
  rt.sync();
  EXPECT_EQ(x[1499], 1);
  EXPECT_EQ(x[1500], 6);
  EXPECT_EQ(x[1599], 6);
  EXPECT_EQ(x[1600], 1);
  // A raw interior pointer in an unannotated call too.
  rt.call(fill(), hdsm::cover(10), x + 3000, std::uint64_t{10}, 8);
  rt.sync();
  EXPECT_EQ(x[2999], 1);
  EXPECT_EQ(x[3000], 8);
  EXPECT_EQ(x[3010], 1);
  rt.free(x);
}

TEST_P(AdsmApi, TypedAllocAndSmartPointers) {
  {
    hdsm::unique_ptr<int> u = hdsm::make_unique<int>(rt, 1000);
    auto s = hdsm::make_shared<double>(rt, 10, 1);
    EXPECT_EQ(u[999], 0);
    u[3] = 4;
    s[9] = 2.5;
    rt.call(fill(), hdsm::cover(10), hdsm::inout(u.get()), std::uint64_t{10}, 5);
    rt.sync();
    EXPECT_EQ(u[3], 5);
    EXPECT_EQ(s[9], 2.5);
  }
  // Both were freed: their memory is back (the 64 MiB device memory would not hold this otherwise).
  for (int i = 0; i < 8; ++i) rt.free(rt.alloc(32 << 20));
  // A count whose bytes overflow is refused, not taken modulo 2^64 (2^61 + 1 doubles were 8 bytes).
  EXPECT_THROW(rt.alloc<double>((std::size_t{1} << 61) + 1), hdsm::Error);
  // -1 is the default device; another negative index is no device (it was taken for the default).
  EXPECT_THROW(rt.alloc(100, -2), hdsm::InvalidArgument);
  EXPECT_THROW(rt.alloc(100, 99), hdsm::InvalidArgument);
}

// A freed object's memory is kept for the next object (HDSM_ARENA_KEEP): the new object still
// reads as zero on the host and on the device, whatever state the old one's blocks were in.
TEST_P(AdsmApi, AnObjectOnAFreedObjectsMemoryReadsZero) {
  const std::size_t n = 300 * 1024 + 17;  // several blocks and a partial one
  for (int round = 0; round < 3; ++round) {
    int* x = rt.alloc<int>(n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], 0) << "round " << round << ", element " << i;
    for (std::size_t i = 0; i < n; i += 3) x[i] = -1;
    rt.call(fill(), hdsm::cover(n / 2), hdsm::inout(x), std::uint64_t{n / 2}, 7);
    rt.sync();
    ASSERT_EQ(x[0], 7);
    ASSERT_EQ(x[n - 1], (n - 1) % 3 == 0 ? -1 : 0);
    x[n - 2] = 5;  // a dirty host block at the end
    rt.free(x);
  }
  // The device copy is zero as well: a kernel that adds to it sees zeros.
  float* a = rt.alloc<float>(n);
  float* b = rt.alloc<float>(n);
  rt.call(vecadd(), hdsm::cover(n), hdsm::in(a), hdsm::inout(b), std::uint64_t{n});
  rt.sync();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(b[i], 0.0f) << i;
  rt.free(a);
  rt.free(b);
}

TEST_P(AdsmApi, BadFreesAreInvalidPointer) {
  int* x = rt.alloc<int>(1024);
  int local = 0;
  EXPECT_THROW(rt.free(x + 1), hdsm::InvalidPointer);
  EXPECT_THROW(rt.free(&local), hdsm::InvalidPointer);
  rt.free(x);
  EXPECT_THROW(rt.free(x), hdsm::InvalidPointer);
  rt.free(nullptr);
}

// A refused free (a pointer into an object, not its start) leaves the calls in flight alone: their
// sync still acquires the object. Before, under batch, the calls forgot the object before the free
// was refused, and the host kept the values from before the kernel.
TEST_P(AdsmApi, ARefusedFreeLeavesTheCallsInFlightAlone) {
  const std::uint64_t n = 1024;
  int* x = rt.alloc<int>(n);
  for (std::uint64_t i = 0; i < n; ++i) x[i] = 1;
  rt.call(fill(), hdsm::cover(n), hdsm::out(x), n, 7);  // annotated: its sync acquires x alone
  EXPECT_THROW(rt.free(x + 1), hdsm::InvalidPointer);
  rt.sync();
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], 7) << i;
  rt.free(x);
}

TEST_P(AdsmApi, SyncWithNothingInFlightIsANoOp) {
  rt.sync();
  int* x = rt.alloc<int>(1024);
  x[0] = 1;
  const std::uint64_t before = faults(rt);
  const auto launches = rt.stats().kernel_launches;
  rt.sync();
  EXPECT_EQ(x[0], 1);
  EXPECT_EQ(faults(rt), before);
  EXPECT_EQ(rt.stats().kernel_launches, launches);
  rt.free(x);
}

TEST_P(AdsmApi, CallRunsOnTheDeviceOfItsFirstSharedPointer) {
  int* a = rt.alloc<int>(1024, 0);
  int* b = rt.alloc<int>(1024, 1);
  const auto on = [&](std::size_t device) { return rt.stats().devices[device].kernel_launches; };
  const auto before0 = on(0), before1 = on(1);
  rt.call(fill(), hdsm::cover(1024), hdsm::out(b), std::uint64_t{1024}, 2);
  rt.sync();
  EXPECT_EQ(b[1023], 2);
  EXPECT_EQ(on(1), before1 + 1);
  EXPECT_EQ(on(0), before0);
  // a first: device 0, with b (device 1, a peer: the sim devices form one peer group) passed remotely.
  rt.call(vecadd(), hdsm::cover(1024), hdsm::in(reinterpret_cast<float*>(a)),
          hdsm::inout(reinterpret_cast<float*>(b)), std::uint64_t{0});
  rt.sync();
  EXPECT_EQ(on(0), before0 + 1);
  rt.free(a);
  rt.free(b);
}

TEST_P(AdsmApi, PointerOfAnotherRuntimeIsInvalidArgument) {
  hdsm::Runtime other(adsm_config(GetParam()));
  int* mine = rt.alloc<int>(1024);
  int* theirs = other.alloc<int>(1024);
  try {
    rt.call(fill(), hdsm::cover(1024), hdsm::inout(mine), theirs, 1);
    FAIL() << "a pointer of another runtime was accepted";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("another hdsm::Runtime"), std::string::npos) << e.what();
  }
  EXPECT_THROW(rt.free(theirs), hdsm::InvalidPointer);
  other.free(theirs);
  rt.free(mine);
}

// Reads through device pointers that the host stored in shared memory (GMAC's adsmSafe).
const hdsm::Kernel& gather_through_table() {
  static const hdsm::Kernel k = hdsm::per_thread(
      "gather_through_table", [](const hdsm::Thread& t, const int* const* table, int* out, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) out[i] = *table[i];
      });
  return k;
}

struct Node {
  int value;
  const Node* next;  // a device address (Runtime::safe), null at the end
};

// out[0] = the sum of the list's values, walked on the device.
const hdsm::Kernel& sum_list() {
  static const hdsm::Kernel k =
      hdsm::per_thread("sum_list", [](const hdsm::Thread& t, const Node* head, int* out) {
        if (t.global_x() != 0) return;
        int sum = 0;
        for (const Node* n = head; n != nullptr; n = n->next) sum += n->value;
        out[0] = sum;
      });
  return k;
}

TEST_P(AdsmApi, KernelsFollowSafePointersStoredInSharedMemory) {
  const std::size_t rows = 8, row_length = 256;
  std::vector<int*> row(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    row[r] = rt.safe_alloc<int>(row_length);
    for (std::size_t i = 0; i < row_length; ++i) row[r][i] = static_cast<int>(r * 1000 + i);
  }
  auto* table = rt.safe_alloc<const int*>(rows);
  int* out = rt.alloc<int>(rows);
  for (std::size_t r = 0; r < rows; ++r) table[r] = rt.safe(row[r] + r);  // interior pointers
  // Unannotated: every object of the device is released, the rows the table reaches included.
  rt.call(gather_through_table(), hdsm::cover(rows), table, out, std::uint64_t{rows});
  rt.sync();
  for (std::size_t r = 0; r < rows; ++r) EXPECT_EQ(out[r], static_cast<int>(r * 1001)) << "row " << r;
  // The CPU changes a row and the table; the next call sees both.
  row[3][7] = -5;
  table[3] = rt.safe(&row[3][7]);
  rt.call(gather_through_table(), hdsm::cover(rows), table, out, std::uint64_t{rows});
  rt.sync();
  EXPECT_EQ(out[3], -5);
  for (int* r : row) rt.free(r);
  rt.free(table);
  rt.free(out);
}

TEST_P(AdsmApi, KernelsWalkALinkedStructure) {
  const int n = 5;
  Node* nodes[n] = {};
  for (int i = 0; i < n; ++i) nodes[i] = rt.safe_alloc<Node>(1);  // separate objects
  for (int i = 0; i < n; ++i) *nodes[i] = Node{i + 1, nullptr};
  for (int i = 0; i + 1 < n; ++i) nodes[i]->next = rt.safe(static_cast<const Node*>(nodes[i + 1]));
  int* out = rt.alloc<int>(1);
  rt.call(sum_list(), hdsm::cover(1), nodes[0], out);
  rt.sync();
  EXPECT_EQ(out[0], 15);
  for (Node* node : nodes) rt.free(node);
  rt.free(out);
}

TEST_P(AdsmApi, SafeTranslatesInteriorPointers) {
  int* x = rt.alloc<int>(1024);
  auto* device = static_cast<char*>(rt.safe(static_cast<void*>(x)));
  if (mapped())
    EXPECT_EQ(device, reinterpret_cast<char*>(x));  // sim kernels use the host memory in place
  else
    EXPECT_NE(device, reinterpret_cast<char*>(x));  // a device address, not the shared pointer
  EXPECT_EQ(reinterpret_cast<char*>(rt.safe(x + 10)), device + 10 * sizeof(int));
  EXPECT_EQ(reinterpret_cast<char*>(rt.safe(x + 1023)), device + 1023 * sizeof(int));
  const int* cx = x;
  const int* const_result = rt.safe(cx);
  EXPECT_EQ(reinterpret_cast<const char*>(const_result), device);
  rt.free(x);
}

TEST_P(AdsmApi, SafeOfAPointerOutsideSharedObjectsIsInvalidArgument) {
  auto message = [&](const void* p) -> std::string {
    try {
      (void)rt.safe(p);
    } catch (const hdsm::InvalidArgument& e) {
      return e.what();
    }
    return "no error";
  };
  int local = 0;
  EXPECT_NE(message(&local).find("safe("), std::string::npos) << message(&local);  // before any object exists
  int* x = rt.alloc<int>(1024);
  // The ADSM model knows its arena, its freed objects and other runtimes' arenas; host-mapped objects
  // are host memory, which it knows only while they live.
  const std::string outside = message(&local);
  EXPECT_NE(outside.find(mapped() ? "not in a shared object" : "not in the shared-object arena"),
            std::string::npos)
      << outside;
  int* y = rt.alloc<int>(1024);
  rt.free(y);
  const std::string freed = message(y + 3);
  EXPECT_NE(freed.find(mapped() ? "not in a shared object" : "freed object"), std::string::npos) << freed;
  hdsm::Runtime other(adsm_config(GetParam()));
  int* theirs = other.alloc<int>(16);
  const std::string foreign = message(theirs);
  EXPECT_NE(foreign.find("another hdsm::Runtime"), std::string::npos) << foreign;
  other.free(theirs);
  rt.free(x);
}

// A kernel that throws fails its sync once; the objects come back (the ones it wrote with whatever
// it left) and the runtime goes on. Before, the device queue kept the failure for every event
// recorded after it: every later sync threw it again, and a host read of an object faulted into a
// fetch that failed with it, which ended the process.
TEST_P(AdsmApi, AFailedKernelFailsItsSyncOnceAndTheRuntimeGoesOn) {
  static const hdsm::Kernel boom = hdsm::per_thread("boom", [](const hdsm::Thread& t, int* x) {
    if (t.global_x() == 3) throw std::runtime_error("bad thread");
    x[t.global_x()] = 1;
  });
  const std::size_t n = 1024;
  int* a = rt.alloc<int>(n);
  rt.call(boom, hdsm::cover(n), hdsm::inout(a));
  EXPECT_THROW(rt.sync(), hdsm::KernelFailure);
  EXPECT_NO_THROW(rt.sync());
  (void)*static_cast<volatile int*>(a);  // readable, whatever it holds
  int* b = rt.alloc<int>(n);
  rt.call(fill(), hdsm::cover(n), hdsm::out(b), std::uint64_t{n}, 7);
  EXPECT_NO_THROW(rt.sync());
  EXPECT_EQ(b[n - 1], 7);
  rt.call(fill(), hdsm::cover(n), hdsm::out(a), std::uint64_t{n}, 9);
  EXPECT_NO_THROW(rt.sync());
  EXPECT_EQ(a[0], 9);
  EXPECT_EQ(a[n - 1], 9);
  rt.free(a);
  rt.free(b);
}

// A launch shape no device runs is refused by the call, before any object moves, not by the sync.
TEST_P(AdsmApi, ABlockTooLargeIsRefusedByTheCall) {
  int* a = rt.alloc<int>(64);
  a[0] = 3;
  try {
    rt.call(fill(), hdsm::Launch{hdsm::Dim3{1}, hdsm::Dim3{2048}, 0}, hdsm::out(a), std::uint64_t{64}, 1);
    ADD_FAILURE() << "a block of 2048 threads was accepted";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("kernel 'fill' in a call"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(rt.sync());
  EXPECT_EQ(a[0], 3);
  rt.free(a);
}

// out = {end - begin, the sum of [begin, end)}: a kernel that takes a range as two pointers.
const hdsm::Kernel& span_sum() {
  static const hdsm::Kernel k = hdsm::per_thread(
      "span_sum", [](const hdsm::Thread& t, const int* begin, const int* end, std::int64_t* out) {
        if (t.global_x() != 0) return;
        out[0] = end - begin;
        out[1] = 0;
        for (const int* p = begin; p != end; ++p) out[1] += *p;
      });
  return k;
}

// A pointer one past an object's last byte is that object's end, as a C++ range's end is, also when
// the object's size is a whole number of blocks and another object follows it: a kernel gets the
// end of the first object's buffer, never the start of the next one's (which on a device is
// another buffer, nowhere near). Before, the end of a block-multiple object was translated to the
// next object's buffer, and otherwise refused as "not in a live shared object".
TEST_P(AdsmApi, APointerPastAnObjectsEndIsItsEnd) {
  for (const std::size_t n : {std::size_t{1024}, std::size_t{1000}}) {  // 4 KiB blocks: one whole, one not
    SCOPED_TRACE(n);
    int* x = rt.alloc<int>(n);
    int* y = rt.alloc<int>(n);  // allocated next, where x's end may be
    auto* out = rt.alloc<std::int64_t>(2);
    for (std::size_t i = 0; i < n; ++i) x[i] = 1, y[i] = 1000;
    rt.call(span_sum(), hdsm::cover(1), x, x + n, out);
    rt.sync();
    EXPECT_EQ(out[0], static_cast<std::int64_t>(n));
    EXPECT_EQ(out[1], static_cast<std::int64_t>(n));
    // Annotated: the end is read as the object it ends, and it does not make y part of the call.
    rt.call(span_sum(), hdsm::cover(1), hdsm::in(x), x + n, hdsm::out(out));
    rt.sync();
    EXPECT_EQ(out[0], static_cast<std::int64_t>(n));
    EXPECT_EQ(out[1], static_cast<std::int64_t>(n));
    rt.call(span_sum(), hdsm::cover(1), y + n / 2, y + n, out);  // an interior begin, then y's end
    rt.sync();
    EXPECT_EQ(out[1], static_cast<std::int64_t>(n - n / 2) * 1000);
    auto* device = static_cast<char*>(rt.safe(static_cast<void*>(x)));
    EXPECT_EQ(static_cast<char*>(rt.safe(static_cast<void*>(x + n))), device + n * sizeof(int));
    rt.free(out);
    rt.free(y);
    rt.free(x);
  }
}

INSTANTIATE_TEST_SUITE_P(Protocols, AdsmApi, ::testing::Values("batch", "lazy", "rolling", "host-mapped"),
                         [](const auto& info) {
                           return info.param == "host-mapped" ? std::string("host_mapped") : info.param;
                         });

TEST(AdsmConfig, BadKnobsAreConfigErrors) {
  auto c = hdsm::Config::defaults();
  try {
    c.set("HDSM_PROTOCOL", "bogus");
    FAIL() << "HDSM_PROTOCOL=bogus accepted";
  } catch (const hdsm::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("HDSM_PROTOCOL=bogus"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c.set("HDSM_BLOCK_SIZE", "3000"), hdsm::ConfigError);
  EXPECT_THROW(c.set("HDSM_ROLLING_STEP", "0"), hdsm::ConfigError);
  // In range but not a power of two: refused by the setting itself (before, only where the shared
  // space was created, so `hdsm info` took it).
  try {
    c.set("HDSM_BLOCK_SIZE", "12KiB");
    FAIL() << "a 12 KiB block size was accepted";
  } catch (const hdsm::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("HDSM_BLOCK_SIZE=12KiB is invalid: not a power of two"),
              std::string::npos)
        << e.what();
  }
}

// A store across a block boundary with a rolling window grown by one block a step: the window holds
// both blocks (before, each block's fault evicted the other, forever).
TEST(AdsmConfig, AStoreAcrossTwoBlocksCompletesUnderARollingStepOfOne) {
  hdsm::Runtime rt(adsm_config("rolling").set("HDSM_ROLLING_STEP", "1").set("HDSM_BLOCK_SIZE", "4KiB"));
  constexpr std::size_t kBlock = 4096;
  auto* p = static_cast<unsigned char*>(rt.alloc(2 * kBlock));
  rt.call(vecadd(), hdsm::cover(1), hdsm::in(reinterpret_cast<float*>(p)),
          hdsm::inout(reinterpret_cast<float*>(p)), std::uint64_t{1});
  rt.sync();
  const std::uint64_t v = 0x1122334455667788;
  __builtin_memcpy(p + kBlock - 4, &v, sizeof v);  // one 8-byte store, 4 bytes in each block
  std::uint64_t back = 0;
  std::memcpy(&back, p + kBlock - 4, sizeof back);
  EXPECT_EQ(back, v);
  rt.free(p);
}

// A program that changes shared memory's protection itself: the access that the kernel then refuses,
// though hdsm allows it, ends the process with a message (before, it faulted for good, a hang).
TEST(AdsmDeathTest, AProgramsOwnMprotectOfSharedMemoryEndsWithAWord) {
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_DEATH(
      {
        hdsm::Runtime rt(adsm_config("rolling"));
        auto* p = static_cast<unsigned char*>(rt.alloc(4096));
        p[0] = 1;  // written: the block is the host's, read-write
        ::mprotect(p, 4096, PROT_NONE);
        p[1] = 2;
      },
      "refused 100 times in a row though its protection allows it: the program changed this memory's "
      "protection or mapping");
}

TEST(AdsmConfig, ExplicitProtocolPerInstance) {
  hdsm::Runtime lazy(adsm_config("lazy"));
  hdsm::Runtime batch(adsm_config("batch"));
  int* x = lazy.alloc<int>(1024);
  int* y = batch.alloc<int>(1024);
  x[0] = 1;
  y[0] = 1;
  EXPECT_GT(faults(lazy), 0u);   // lazy detects the write
  EXPECT_EQ(faults(batch), 0u);  // batch detects nothing
  lazy.free(x);
  batch.free(y);
}

TEST(AdsmCApi, AllocFreeSync) {
  // A fresh process, whose default runtime is not made yet (a fork of this one may have it).
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_EXIT(
      {
        bool ok = hdsm_config_set("HDSM_SIM_MEMORY", "32MiB") == HDSM_SUCCESS;
        ok &= hdsm_config_set("HDSM_ARENA_SEGMENT", "1GiB") == HDSM_SUCCESS;
        ok &= hdsm_sync() == HDSM_SUCCESS;
        void* p = nullptr;
        ok &= hdsm_alloc(4096, -1, &p) == HDSM_SUCCESS && p != nullptr;
        static_cast<int*>(p)[10] = 5;
        ok &= hdsm_alloc(4096, 0, nullptr) == HDSM_ERROR_INVALID_ARGUMENT;
        ok &= hdsm_alloc(4096, 99, &p) == HDSM_ERROR_INVALID_ARGUMENT;
        ok &= static_cast<int*>(p)[10] == 5;
        ok &= hdsm_free(static_cast<char*>(p) + 4) == HDSM_ERROR_INVALID_POINTER;
        ok &= hdsm_sync() == HDSM_SUCCESS;
        ok &= hdsm_free(p) == HDSM_SUCCESS;
        ok &= hdsm_free(p) == HDSM_ERROR_INVALID_POINTER;
        ok &= std::string(hdsm_last_error()).find("free") != std::string::npos;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// A kernel from C: a host body that reads its arguments from args[], called with in/inout/value
// arguments on shared objects; errors for a bad value, a NULL kernel, an unknown kind.
void c_add(const hdsm_thread* t, void* const* args) {
  const float* a = *static_cast<const float* const*>(args[0]);
  float* b = *static_cast<float* const*>(args[1]);
  const std::uint64_t n = *static_cast<const std::uint64_t*>(args[2]);
  const std::uint64_t i = std::uint64_t{t->block.x} * t->block_dim.x + t->idx.x;
  if (i < n) b[i] += a[i];
}

bool c_kernel_call() {
  bool ok = hdsm_config_set("HDSM_SIM_MEMORY", "32MiB") == HDSM_SUCCESS;
  ok &= hdsm_config_set("HDSM_ARENA_SEGMENT", "1GiB") == HDSM_SUCCESS;
  hdsm_kernel k = nullptr;
  ok &= hdsm_kernel_create("c_add", c_add, nullptr, &k) == HDSM_SUCCESS && k != nullptr;
  const std::uint64_t n = 1000;
  void *a = nullptr, *b = nullptr;
  ok &= hdsm_alloc(n * sizeof(float), -1, &a) == HDSM_SUCCESS;
  ok &= hdsm_alloc(n * sizeof(float), -1, &b) == HDSM_SUCCESS;
  for (std::uint64_t i = 0; i < n; ++i) {
    static_cast<float*>(a)[i] = static_cast<float>(i);
    static_cast<float*>(b)[i] = 1.0f;
  }
  const hdsm_arg args[] = {{HDSM_ARG_IN, a, 0}, {HDSM_ARG_INOUT, b, 0}, {HDSM_ARG_VALUE, &n, sizeof n}};
  ok &= hdsm_call(k, hdsm_dim3{4, 1, 1}, hdsm_dim3{256, 1, 1}, 0, args, 3) == HDSM_SUCCESS;
  ok &= hdsm_sync() == HDSM_SUCCESS;
  for (std::uint64_t i = 0; i < n; ++i) ok &= static_cast<float*>(b)[i] == static_cast<float>(i) + 1.0f;
  // Plain pointers count as inout: the same again.
  const hdsm_arg plain[] = {
      {HDSM_ARG_POINTER, a, 0}, {HDSM_ARG_POINTER, b, 0}, {HDSM_ARG_VALUE, &n, sizeof n}};
  ok &= hdsm_call(k, hdsm_dim3{4, 1, 1}, hdsm_dim3{256, 1, 1}, 0, plain, 3) == HDSM_SUCCESS;
  ok &= hdsm_sync() == HDSM_SUCCESS;
  ok &= static_cast<float*>(b)[999] == 2 * 999.0f + 1.0f;
  // Errors: a value of 0 or 65 bytes, an unknown kind, a NULL kernel, a launch above the limits.
  const char big[65] = {};
  const hdsm_arg too_big[] = {{HDSM_ARG_IN, a, 0}, {HDSM_ARG_INOUT, b, 0}, {HDSM_ARG_VALUE, big, sizeof big}};
  ok &= hdsm_call(k, hdsm_dim3{1, 1, 1}, hdsm_dim3{1, 1, 1}, 0, too_big, 3) == HDSM_ERROR_INVALID_ARGUMENT;
  ok &= std::string(hdsm_last_error()).find("argument 2 is a value of 65 bytes") != std::string::npos;
  hdsm_arg odd = {HDSM_ARG_IN, a, 0};
  const int nine = 9;  // a kind a C program may store, which no enumerator names
  std::memcpy(&odd.kind, &nine, sizeof nine);
  ok &= hdsm_call(k, hdsm_dim3{1, 1, 1}, hdsm_dim3{1, 1, 1}, 0, &odd, 1) == HDSM_ERROR_INVALID_ARGUMENT;
  ok &= hdsm_call(nullptr, hdsm_dim3{1, 1, 1}, hdsm_dim3{1, 1, 1}, 0, args, 3) == HDSM_ERROR_INVALID_ARGUMENT;
  ok &= hdsm_call(k, hdsm_dim3{1, 70000, 1}, hdsm_dim3{1, 1, 1}, 0, args, 3) == HDSM_ERROR_INVALID_ARGUMENT;
  // A count no kernel has: refused before anything is allocated for it (it was 'unknown', a length_error).
  ok &=
      hdsm_call(k, hdsm_dim3{1, 1, 1}, hdsm_dim3{1, 1, 1}, 0, args, SIZE_MAX) == HDSM_ERROR_INVALID_ARGUMENT;
  ok &= std::string(hdsm_last_error()).find("arguments; a kernel takes at most") != std::string::npos;
  ok &= hdsm_kernel_create("no_body", nullptr, nullptr, &k) == HDSM_ERROR_INVALID_ARGUMENT;
  hdsm_kernel unnamed = nullptr;
  ok &= hdsm_kernel_create("", c_add, nullptr, &unnamed) == HDSM_ERROR_INVALID_ARGUMENT;
  ok &= std::string(hdsm_last_error()) == "hdsm_kernel_create: name is empty";
  ok &= hdsm_kernel_destroy(k) == HDSM_SUCCESS && hdsm_kernel_destroy(nullptr) == HDSM_SUCCESS;
  ok &= hdsm_free(a) == HDSM_SUCCESS && hdsm_free(b) == HDSM_SUCCESS;
  return ok;
}

TEST(AdsmCApi, KernelCall) {
  // A fresh process, whose default runtime is not made yet (a fork of this one may have it).
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_EXIT(std::exit(c_kernel_call() ? 0 : 1), ::testing::ExitedWithCode(0), "");
}

TEST(AdsmCApi, SafeAllocAndSafe) {
  // A fresh process, whose default runtime is not made yet (a fork of this one may have it).
  const hdsm::test::DeathTestStyle style("threadsafe");
  EXPECT_EXIT(
      {
        bool ok = hdsm_config_set("HDSM_SIM_MEMORY", "32MiB") == HDSM_SUCCESS;
        ok &= hdsm_config_set("HDSM_ARENA_SEGMENT", "1GiB") == HDSM_SUCCESS;
        void* p = nullptr;
        void* device = nullptr;
        void* interior = nullptr;
        ok &= hdsm_safe_alloc(4096, -1, &p) == HDSM_SUCCESS && p != nullptr;
        ok &= hdsm_safe_alloc(4096, 0, nullptr) == HDSM_ERROR_INVALID_ARGUMENT;
        ok &= hdsm_safe(p, &device) == HDSM_SUCCESS && device != nullptr && device != p;
        ok &= hdsm_safe(static_cast<char*>(p) + 100, &interior) == HDSM_SUCCESS;
        ok &= static_cast<char*>(interior) == static_cast<char*>(device) + 100;
        ok &= hdsm_safe(p, nullptr) == HDSM_ERROR_INVALID_ARGUMENT;
        int local = 0;
        ok &= hdsm_safe(&local, &device) == HDSM_ERROR_INVALID_ARGUMENT;
        ok &= std::string(hdsm_last_error()).find("safe(") != std::string::npos;
        ok &= hdsm_free(p) == HDSM_SUCCESS;
        // The C++ free functions on the same default runtime.
        auto* q = hdsm::safe_alloc<int>(16);
        ok &= hdsm::safe(q + 2) == hdsm::safe(q) + 2;
        hdsm::free(q);
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
