// The models whose objects the host touches directly. HDSM_PROTOCOL=um: shared objects are the
// device's unified memory (on sim, host memory the kernels use directly, as an integrated GPU's;
// on CUDA, cudaMallocManaged memory; OpenCL has none and gets host-mapped). HDSM_PROTOCOL=
// host-mapped: objects are host memory the kernels use in place (sim: its pointers, OpenCL:
// CL_MEM_USE_HOST_PTR buffers, CUDA: mapped memory). These tests check the runtime's side on every
// backend present: the data reaches the kernels and comes back, calls run on the objects' device,
// sync waits, free waits for calls, nothing is copied and nothing faults, errors name what is wrong.
#include <hdsm/hdsm.hpp>

#include "support/cuda_kernels.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

namespace {

const hdsm::Kernel& scale_add() {
  static const hdsm::Kernel k = [] {
    auto kernel = hdsm::per_thread("um_scale_add",
                                   [](const hdsm::Thread& t, const float* x, float* y, std::uint64_t n) {
                                     if (const auto i = t.global_x(); i < n) y[i] = 2 * x[i] + y[i];
                                   });
    kernel.opencl_source = R"(
      __kernel void um_scale_add(__global const float* x, __global float* y, ulong n) {
        const size_t i = get_global_id(0);
        if (i < n) y[i] = 2 * x[i] + y[i];
      })";
    return kernel;
  }();
  return k;
}

// (protocol, backend, prefetch)
class Direct : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {
 protected:
  void SetUp() override {
    const std::string& backend = std::get<1>(GetParam());
    if (backend == "opencl" && hdsm::test::opencl_only_without_lsan())
      GTEST_SKIP() << "OpenCL under ASan runs in runtime.opencl_without_lsan";
    auto config = hdsm::test::fast_sim_config();
    config.set("HDSM_PROTOCOL", std::get<0>(GetParam()))
        .set("HDSM_DEVICE", backend)
        .set("HDSM_OPENCL_MEMORY", "64MiB")
        .set("HDSM_UM_PREFETCH", std::get<2>(GetParam()))
        .set("HDSM_UM_ADVICE", "device");
    try {
      rt_ = std::make_unique<hdsm::Runtime>(config);
    } catch (const hdsm::NoDevice& e) {
      GTEST_SKIP() << "no " << backend << " device here: " << e.what();
    }
    kernel_ = scale_add();
    if (!hdsm::test::give_cuda_body(kernel_, rt_->default_device()))
      GTEST_SKIP() << hdsm::test::kNoCudaKernels;
  }
  bool opencl() const { return std::get<1>(GetParam()) == "opencl"; }
  std::unique_ptr<hdsm::Runtime> rt_;
  hdsm::Kernel kernel_;
};

// The tests whose kernels have host bodies only (a kernel that throws, or waits at a gate the test
// opens): on sim devices alone, so that no backend reports them skipped (a GPU machine's check
// counts a skipped CUDA case as a failure).
class DirectSim : public Direct {};

TEST_P(Direct, KernelsAndTheCpuShareOnePointerAcrossCalls) {
  const std::uint64_t n = 10000;
  auto* x = rt_->alloc<float>(n);
  auto* y = rt_->alloc<float>(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    EXPECT_EQ(y[i], 0.0f) << "new objects are zero-filled";
    x[i] = static_cast<float>(i % 7);
    y[i] = 1;
  }
  rt_->call(kernel_, hdsm::cover(n), hdsm::in(x), hdsm::inout(y), n);
  rt_->call(kernel_, hdsm::cover(n), x, y, n);  // unannotated: the same pointers
  rt_->sync();
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], 4.0f * static_cast<float>(i % 7) + 1) << i;
  y[5] = -1;  // the CPU writes between calls
  rt_->call(kernel_, hdsm::cover(n), hdsm::in(x + 0), hdsm::inout(y), n);
  rt_->sync();
  EXPECT_EQ(y[5], 2.0f * 5 - 1);
  if (opencl())
    EXPECT_THROW(rt_->safe(y + 3), hdsm::Unsupported) << "OpenCL kernels take buffers, not addresses";
  else
    EXPECT_EQ(rt_->safe(y + 3), y + 3) << "the kernels use the host's addresses";
  const hdsm::Stats stats = rt_->stats();
  EXPECT_EQ(stats.kernel_launches, 3u);
  EXPECT_EQ(stats.read_faults + stats.write_faults, 0u) << "hdsm handles no faults here";
  for (int r = 0; r < hdsm::kRouteCount; ++r) EXPECT_EQ(stats.routes[r].bytes, 0u) << "route " << r;
  for (int r = 0; r < hdsm::kCopyRouteCount; ++r) EXPECT_EQ(stats.copies[r].bytes, 0u) << "copy route " << r;
  rt_->free(x);
  rt_->free(y);
}

// As under the ADSM protocols, a thread that ends with calls it never synced syncs them as it ends:
// whoever joins it reads their results (before, the join returned before the kernel had run).
TEST_P(Direct, AThreadThatEndsWithoutSyncingHasItsCallsDone) {
  const std::uint64_t n = std::uint64_t{1} << 20;
  auto* x = rt_->alloc<float>(n);
  auto* y = rt_->alloc<float>(n);
  for (std::uint64_t i = 0; i < n; ++i) x[i] = 1;
  for (int round = 0; round < 3; ++round) {
    std::thread([&] { rt_->call(kernel_, hdsm::cover(n), hdsm::in(x), hdsm::inout(y), n); }).join();
    std::uint64_t stale = 0;
    for (std::uint64_t i = 0; i < n; ++i) stale += y[i] != static_cast<float>(2 * (round + 1));
    ASSERT_EQ(stale, 0u) << "round " << round << ": elements the ended thread's kernel had not written yet";
  }
  rt_->free(x);
  rt_->free(y);
}

TEST_P(Direct, FreeWaitsForTheCallsUsingTheObject) {
  const std::uint64_t n = 1 << 20;
  auto* x = rt_->alloc<float>(n);
  auto* y = rt_->alloc<float>(n);
  rt_->call(kernel_, hdsm::cover(n), hdsm::in(x), hdsm::inout(y), n);
  rt_->free(x);  // must not pull the memory from under the kernel
  rt_->sync();
  rt_->free(y);
}

TEST_P(Direct, BadPointersAreErrors) {
  auto* x = rt_->alloc<float>(100);
  EXPECT_THROW(rt_->free(x + 1), hdsm::InvalidPointer);
  float host[4] = {};
  EXPECT_THROW(rt_->free(host), hdsm::InvalidPointer);
  EXPECT_THROW(rt_->safe(host), hdsm::InvalidArgument);
  EXPECT_THROW(rt_->call(kernel_, hdsm::cover(4), hdsm::in(host), hdsm::inout(x), std::uint64_t{4}),
               hdsm::InvalidArgument);
  rt_->free(x);
  EXPECT_THROW(rt_->free(x), hdsm::InvalidPointer);
  EXPECT_THROW(rt_->alloc(0), hdsm::InvalidArgument);
  // As under the copying protocols: an element count whose bytes overflow is out of memory, and an
  // fread whose size * count overflows is EOVERFLOW (it reached libc, EFAULT, and InvalidArgument).
  EXPECT_THROW(rt_->alloc(SIZE_MAX), hdsm::OutOfDeviceMemory);
  EXPECT_THROW(rt_->alloc<double>(SIZE_MAX / 4), hdsm::OutOfDeviceMemory);
  auto* y = static_cast<unsigned char*>(rt_->alloc(64));
  std::FILE* in = ::fdopen(::memfd_create("hdsm direct fread", MFD_CLOEXEC), "r+b");
  ASSERT_NE(in, nullptr);
  for (void* buffer : {static_cast<void*>(y), static_cast<void*>(host)}) {
    errno = 0;
    EXPECT_EQ(rt_->fread(buffer, SIZE_MAX / 2, 4, in), 0u);
    EXPECT_EQ(errno, EOVERFLOW);
    errno = 0;
    EXPECT_EQ(rt_->fwrite(buffer, 4, SIZE_MAX / 2, in), 0u);
    EXPECT_EQ(errno, EOVERFLOW);
  }
  std::fclose(in);
  rt_->free(y);
}

// No object starts where another ends, so a range's end passed to a kernel names one object: the
// one it ends (safe() says so). Before, page-multiple objects could be adjacent mappings.
TEST_P(Direct, NoObjectStartsWhereAnotherEnds) {
  std::vector<float*> objects;
  for (int i = 0; i < 16; ++i) objects.push_back(rt_->alloc<float>(1024));  // 4 KiB: a page each
  for (float* x : objects) {
    for (float* y : objects) EXPECT_NE(x + 1024, y) << "an object starts at another's end";
  }
  if (!opencl()) {  // OpenCL kernels take buffers: safe() is refused there
    for (float* x : objects) EXPECT_EQ(rt_->safe(x + 1024), rt_->safe(x) + 1024);
  }
  for (float* x : objects) rt_->free(x);
}

TEST_P(Direct, BulkMemoryAndIoArePlainMemoryOperations) {
  auto* p = static_cast<unsigned char*>(rt_->alloc(8192));
  rt_->memset(p, 7, 8192);
  unsigned char back[8192];
  rt_->memcpy(back, p, sizeof back);
  for (unsigned char b : back) ASSERT_EQ(b, 7);
  rt_->free(p);
}

// A bulk range that runs out of an object (into the next one, which may start a byte after its end)
// is refused naming the byte, and nothing is written, as under the copying protocols. Before, the
// memset went on into the neighbour.
TEST_P(Direct, BulkRangesLeavingAnObjectAreRefused) {
  auto* a = static_cast<unsigned char*>(rt_->alloc(4095));
  auto* b = static_cast<unsigned char*>(rt_->alloc(4095));
  rt_->memset(a, 1, 4095);
  rt_->memset(b, 2, 4095);
  try {
    rt_->memset(a + 4090, 9, 16);
    ADD_FAILURE() << "a memset past the end of an object was done";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("byte 5 of the 16-byte range"), std::string::npos) << e.what();
  }
  unsigned char host[16] = {};
  EXPECT_THROW(rt_->memcpy(host, b + 4090, sizeof host), hdsm::InvalidArgument);
  EXPECT_THROW(rt_->memcpy(a + 4000, host, sizeof host * 8), hdsm::InvalidArgument);
  for (int i = 0; i < 4095; ++i) ASSERT_EQ(a[i] * 10 + b[i], 12) << "byte " << i;
  rt_->memcpy(host, a + 4079, 16);  // to its last byte: fine
  rt_->free(a);
  rt_->free(b);
  // A call's range annotations too: inside the object, and not empty.
  auto* x = rt_->alloc<float>(1000);
  auto* y = rt_->alloc<float>(1000);
  EXPECT_THROW(rt_->call(kernel_, hdsm::cover(4), hdsm::in(x, 990, 20), hdsm::inout(y), std::uint64_t{4}),
               hdsm::InvalidArgument);
  EXPECT_THROW(rt_->call(kernel_, hdsm::cover(4), hdsm::in(x, 0, 0), hdsm::inout(y), std::uint64_t{4}),
               hdsm::InvalidArgument);
  rt_->call(kernel_, hdsm::cover(4), hdsm::in(x, 996, 4), hdsm::inout(y), std::uint64_t{4});
  rt_->sync();
  rt_->free(x);
  rt_->free(y);
}

// The failure of a kernel is reported by a sync, not by a free or a copy that waited for the call
// (a free may run in a destructor: before, hdsm::unique_ptr's ended the program in std::terminate,
// and the sync then said nothing).
TEST_P(DirectSim, AKernelsFailureIsReportedBySyncNotByFreeOrCopy) {
  const auto boom = hdsm::per_thread("direct_boom", [](const hdsm::Thread& t, float*) {
    if (t.global_x() == 0) throw std::runtime_error("direct_boom failed");
  });
  float* x = rt_->alloc<float>(64);
  float* y = rt_->alloc<float>(64);
  rt_->call(boom, hdsm::cover(64), x);
  float back[64];
  EXPECT_NO_THROW(rt_->memcpy(back, x, sizeof back));
  EXPECT_NO_THROW(rt_->free(x));
  try {
    rt_->sync();
    ADD_FAILURE() << "the failure was not reported";
  } catch (const hdsm::KernelFailure& e) {
    EXPECT_NE(std::string(e.what()).find("direct_boom failed"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(rt_->sync()) << "once";
  rt_->free(y);
}

// An unannotated call may reach any object through safe() pointers stored in shared data: freeing
// such an object waits for it, as under the copying protocols. Before, only the objects passed
// were waited for, and the kernel read a freed object.
TEST_P(DirectSim, FreeWaitsForAnUnannotatedCallThatReachesTheObjectThroughSafe) {
  const auto follow =
      hdsm::per_thread("direct_follow", [](const hdsm::Thread& t, float* const* table, float* out) {
        if (t.global_x() != 0) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        out[0] = table[0][5];
      });
  float* row = rt_->alloc<float>(1024);
  auto** table = rt_->alloc<float*>(1);
  float* out = rt_->alloc<float>(1);
  row[5] = 64.0f;
  table[0] = rt_->safe(row);
  rt_->call(follow, hdsm::cover(1), table, out);
  rt_->free(row);  // must wait for the call, which reads it
  rt_->sync();
  EXPECT_EQ(out[0], 64.0f);
  rt_->free(table);
  rt_->free(out);
}

// hdsm's I/O on an object waits for the calls in flight that use it, as its bulk memory does: a write
// to a file takes the kernel's results, a read into the object is not overwritten by the kernel
// after it. Before, both went straight to libc, the file got the values from before the kernel.
TEST_P(DirectSim, IoWaitsForTheCallsInFlightOnTheObject) {
  const auto slow_fill = hdsm::per_thread("direct_slow_fill", [](const hdsm::Thread& t, int* x, int v) {
    if (t.global_x() != 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (int i = 0; i < 1024; ++i) x[i] = v;
  });
  int* x = rt_->alloc<int>(1024);
  const int fd = ::memfd_create("hdsm direct io", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  rt_->call(slow_fill, hdsm::cover(1), hdsm::out(x), 7);
  ASSERT_EQ(rt_->write(fd, x, 1024 * sizeof(int)), static_cast<ssize_t>(1024 * sizeof(int)));
  std::vector<int> file(1024);
  ASSERT_EQ(::pread(fd, file.data(), 1024 * sizeof(int), 0), static_cast<ssize_t>(1024 * sizeof(int)));
  EXPECT_EQ(file, std::vector<int>(1024, 7)) << "the file has what the kernel wrote";
  rt_->call(slow_fill, hdsm::cover(1), hdsm::out(x), 9);
  ASSERT_EQ(rt_->pread(fd, x, 1024 * sizeof(int), 0), static_cast<ssize_t>(1024 * sizeof(int)));
  rt_->sync();
  EXPECT_EQ(std::vector<int>(x, x + 1024), std::vector<int>(1024, 7)) << "the read came after the kernel";
  errno = 0;
  EXPECT_EQ(rt_->read(fd, x + 1000, 100 * sizeof(int)), -1) << "a range leaving the object";
  EXPECT_EQ(errno, EFAULT);
  ::close(fd);
  rt_->free(x);
}

// Another runtime's object is that runtime's: refused by calls, bulk memory, safe and free (they
// took it for host memory, unordered with its owner's kernels), by a copying runtime's too; I/O
// into it is ordered by its owner, after the owner's calls.
TEST_P(DirectSim, AnotherRuntimesObjectsAreRefusedAndTheirIoIsTheirOwners) {
  const auto slow_fill = hdsm::per_thread("direct_slow_fill_other", [](const hdsm::Thread& t, int* x, int v) {
    if (t.global_x() != 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (int i = 0; i < 1024; ++i) x[i] = v;
  });
  hdsm::Runtime other(rt_->config());
  hdsm::Runtime copying(hdsm::test::fast_sim_config().set("HDSM_PROTOCOL", "rolling"));
  int* theirs = other.alloc<int>(1024);
  int* mine = rt_->alloc<int>(1024);
  int* copied = copying.alloc<int>(1024);
  std::vector<int> host(1024, 3);
  const auto refused = [](const char* what, auto&& f) {
    try {
      f();
      ADD_FAILURE() << what << ": another runtime's object was accepted";
    } catch (const hdsm::Error& e) {
      EXPECT_NE(std::string(e.what()).find("another hdsm::Runtime"), std::string::npos)
          << what << ": " << e.what();
    }
  };
  refused("call, raw", [&] { rt_->call(kernel_, hdsm::cover(1024), mine, theirs, std::uint64_t{1024}); });
  refused("call, annotated", [&] {
    rt_->call(kernel_, hdsm::cover(1024), hdsm::in(theirs), hdsm::inout(mine), std::uint64_t{1024});
  });
  refused("memcpy into", [&] { rt_->memcpy(theirs, host.data(), 4096); });
  refused("memcpy out of", [&] { rt_->memcpy(host.data(), theirs + 10, 8); });
  refused("memset", [&] { rt_->memset(theirs, 0, 4096); });
  refused("safe", [&] { (void)rt_->safe(theirs + 1); });
  refused("free", [&] { rt_->free(theirs); });
  refused("a copying runtime's memcpy", [&] { copying.memcpy(theirs, host.data(), 4096); });
  refused("a copying runtime's call",
          [&] { copying.call(kernel_, hdsm::cover(1024), hdsm::in(copied), theirs, std::uint64_t{1024}); });
  refused("a direct runtime's memcpy of a copying runtime's object",
          [&] { rt_->memcpy(copied, host.data(), 8); });
  // I/O goes to the owner, after its kernel (7), not before it (0).
  const int fd = ::memfd_create("hdsm direct io other", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  other.call(slow_fill, hdsm::cover(1), hdsm::out(theirs), 7);
  ASSERT_EQ(rt_->write(fd, theirs, 4096), 4096);
  std::vector<int> file(1024);
  ASSERT_EQ(::pread(fd, file.data(), 4096, 0), 4096);
  EXPECT_EQ(file, std::vector<int>(1024, 7)) << "the write came before the owner's kernel";
  errno = 0;
  EXPECT_EQ(rt_->read(fd, theirs + 1000, 100 * sizeof(int)), -1) << "a range leaving the owner's object";
  EXPECT_EQ(errno, EFAULT);
  ::close(fd);
  // Each runtime's own objects are untouched by all this.
  rt_->memcpy(mine, host.data(), 4096);
  EXPECT_EQ(mine[1023], 3);
  other.sync();
  other.free(theirs);
  rt_->free(mine);
  copying.free(copied);
}

// hdsm's I/O on host memory is libc's at once: it waits for no call, nor for another thread's sync.
// The kernel below waits until the write returned (a marker after 10 s otherwise); before, the write
// of a host buffer waited for the sync another thread had begun, so for the kernel: a deadlock.
std::atomic<bool> g_written{false};
TEST_P(DirectSim, IoOnHostMemoryWaitsForNoSync) {
  g_written = false;
  const auto wait_for_write = hdsm::per_thread("direct_wait_for_write", [](const hdsm::Thread& t, int* x) {
    if (t.global_x() != 0) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!g_written.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    x[0] = g_written.load() ? 1 : -1;
  });
  int* x = rt_->alloc<int>(16);
  rt_->call(wait_for_write, hdsm::cover(1), x);  // unannotated: it may use every object
  std::thread syncer([&] { rt_->sync(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the other thread is in its sync
  const int fd = ::memfd_create("hdsm direct host io", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  const char host[4] = {'h', 'd', 's', 'm'};
  EXPECT_EQ(rt_->write(fd, host, sizeof host), 4);
  g_written = true;
  syncer.join();
  EXPECT_EQ(x[0], 1) << "the write waited for the kernel";
  ::close(fd);
  rt_->free(x);
}

// A call on one device that uses an object a call on another device used since the last sync waits
// for that device's calls, also while another thread's sync of them is under way. Before, the sync
// marked the device idle as it began, and the second call read the object before the first wrote it.
std::atomic<bool> g_syncing{false};
TEST_P(DirectSim, ACallWaitsForAnotherDevicesCallsWhileTheirSyncIsUnderWay) {
  const auto slow_set = hdsm::per_thread("direct_slow_set", [](const hdsm::Thread& t, float* x) {
    if (t.global_x() != 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    x[0] = 1.0f;
  });
  const auto read_add = hdsm::per_thread("direct_read_add", [](const hdsm::Thread& t, float* y, float* x) {
    if (t.global_x() != 0) return;
    y[0] = x[0];
    x[0] += 10.0f;
  });
  auto config = hdsm::test::fast_sim_config(std::get<0>(GetParam()));
  config.set("HDSM_DEVICE", "sim").set("HDSM_UM_PREFETCH", std::get<2>(GetParam()));
  config.set("HDSM_SIM_DEVICES", "2").set("HDSM_SIM_THREADS", "1");  // an executor each: they run at once
  hdsm::Runtime rt(config);
  float* x = rt.alloc<float>(16, 0);
  float* y = rt.alloc<float>(16, 1);
  g_syncing = false;
  std::thread first([&] {
    rt.call(slow_set, hdsm::cover(1), hdsm::inout(x));
    g_syncing = true;
    rt.sync();
  });
  while (!g_syncing) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));         // the first thread is in its sync
  rt.call(read_add, hdsm::cover(1), hdsm::inout(y), hdsm::inout(x));  // on device 1
  rt.sync();
  first.join();
  EXPECT_EQ(y[0], 1.0f) << "the call on device 1 ran after the one on device 0";
  EXPECT_EQ(x[0], 11.0f);
  rt.free(x);
  rt.free(y);
}

// Sizes no memory can hold are OutOfDeviceMemory, as under every other model. Before, sim's unified
// memory passed them to mmap, whose failure was a SystemError.
TEST_P(Direct, ImpossibleSizesAreOutOfDeviceMemory) {
  for (const std::size_t bytes : {SIZE_MAX - 1, SIZE_MAX / 2, std::size_t{1} << 62})
    EXPECT_THROW((void)rt_->alloc(bytes), hdsm::OutOfDeviceMemory) << bytes;
  void* p = rt_->alloc(64);  // and the runtime goes on
  rt_->free(p);
}

// A range of bulk memory or I/O that starts at an object's end (one past its last byte, the gap no
// other object starts at) is past the object, as under the copying protocols: before, it was taken
// for host memory, and a memset there wrote into the gap.
TEST_P(Direct, BulkRangesFromAnObjectsEndAreRefused) {
  auto* a = static_cast<unsigned char*>(rt_->alloc(4096));
  unsigned char host[64] = {};
  try {
    rt_->memset(a + 4096, 1, 64);
    ADD_FAILURE() << "a memset from the object's end was done";
  } catch (const hdsm::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("starts at the end of the object"), std::string::npos) << e.what();
  }
  EXPECT_THROW(rt_->memcpy(a + 4096, host, sizeof host), hdsm::InvalidArgument);
  EXPECT_THROW(rt_->memcpy(host, a + 4096, sizeof host), hdsm::InvalidArgument);
  const int fd = ::memfd_create("hdsm direct end", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, host, sizeof host), static_cast<ssize_t>(sizeof host));
  errno = 0;
  EXPECT_EQ(rt_->pread(fd, a + 4096, sizeof host, 0), -1);
  EXPECT_EQ(errno, EFAULT);
  ::close(fd);
  rt_->memset(a + 4096, 1, 0);  // nothing at all: fine
  rt_->free(a);
}

std::string direct_name(const ::testing::TestParamInfo<Direct::ParamType>& info) {
  std::string protocol = std::get<0>(info.param);
  if (protocol == "host-mapped") protocol = "host_mapped";
  return protocol + "_" + std::get<1>(info.param) + (std::get<2>(info.param) == "1" ? "_prefetch" : "");
}

INSTANTIATE_TEST_SUITE_P(Um, Direct,
                         ::testing::Combine(::testing::Values("um"), ::testing::Values("sim", "cuda"),
                                            ::testing::Values("0", "1")),
                         direct_name);
// um on OpenCL, which has no unified memory, is host-mapped.
INSTANTIATE_TEST_SUITE_P(HostMapped, Direct,
                         ::testing::Values(std::tuple("host-mapped", "sim", "0"),
                                           std::tuple("host-mapped", "opencl", "0"),
                                           std::tuple("host-mapped", "cuda", "0"),
                                           std::tuple("um", "opencl", "0")),
                         direct_name);

INSTANTIATE_TEST_SUITE_P(Sim, DirectSim,
                         ::testing::Values(std::tuple("um", "sim", "0"), std::tuple("um", "sim", "1"),
                                           std::tuple("host-mapped", "sim", "0")),
                         direct_name);

TEST(DirectErrors, UnknownProtocolListsTheModels) {
  auto config = hdsm::Config::defaults();
  EXPECT_EQ(config.get("HDSM_PROTOCOL"), "auto") << "the documented default";
  EXPECT_THROW(config.set("HDSM_PROTOCOL", "unified"), hdsm::ConfigError);
  for (const char* p : {"auto", "batch", "lazy", "rolling", "um", "host-mapped"})
    EXPECT_NO_THROW(config.set("HDSM_PROTOCOL", p)) << p;
}

}  // namespace
