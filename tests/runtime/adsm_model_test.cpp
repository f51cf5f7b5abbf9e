// Randomized model test of ADSM: random CPU reads and writes at random offsets and sizes, kernel calls
// (annotated or not) that write a pattern into a range or checksum one range into another object
// (of another device too: a peer, or copied with HDSM_REMOTE=copy, remote as source or destination),
// allocations and frees, bulk memory (Runtime::memset, memcpy between host memory and objects and
// between objects, overlapping ones included), asynchronous copies between objects with range-annotated
// calls and CPU accesses beside them, over every protocol x block size x 1-3 devices,
// compared with plain memory after every step (read by the CPU or by a bulk copy, which must not
// fetch what it reads). HDSM_MODEL_SEED and HDSM_MODEL_ITERATIONS set the seed and the number of steps.
// The same model runs on the OpenCL device (PoCL in CI), with the kernels' OpenCL C bodies; there,
// kernel ranges start on 512-byte boundaries, the sub-buffer alignment OpenCL devices ask for. On a
// CUDA device (where there is one) it runs with the kernels' CUDA bodies (support/cuda_kernels.cu).
#include <hdsm/hdsm.hpp>

#include "os/fault.hpp"
#include "support/cuda_kernels.hpp"
#include "support/model_run.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr std::uint64_t kDefaultSeed = 0x5eed2008;
constexpr int kDefaultIterations = 300;
constexpr std::size_t kMaxObjects = 6;

unsigned char pattern_byte(std::uint64_t i, std::uint32_t salt) {
  return static_cast<unsigned char>((i * 131u + salt) ^ (i >> 9));
}

std::uint64_t checksum(const unsigned char* p, std::uint64_t n) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::uint64_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

const hdsm::Kernel& pattern_kernel() {
  static const hdsm::Kernel k = [] {
    auto kernel = hdsm::per_thread(
        "model_pattern", [](const hdsm::Thread& t, unsigned char* dst, std::uint64_t n, std::uint32_t salt) {
          if (const auto i = t.global_x(); i < n) dst[i] = pattern_byte(i, salt);
        });
    kernel.opencl_source = R"(
      __kernel void model_pattern(__global uchar* dst, ulong n, uint salt) {
        const ulong i = get_global_id(0);
        if (i < n) dst[i] = (uchar)(((uint)i * 131u + salt) ^ (uint)(i >> 9));
      })";
    kernel.cuda_lookup = hdsm::test::cuda_test_lookup("model_pattern");
    return kernel;
  }();
  return k;
}

const hdsm::Kernel& checksum_kernel() {
  static const hdsm::Kernel k = [] {
    auto kernel = hdsm::per_thread("model_checksum", [](const hdsm::Thread& t, const unsigned char* src,
                                                        std::uint64_t n, unsigned char* dst) {
      if (t.global_x() != 0) return;
      const std::uint64_t h = checksum(src, n);
      std::memcpy(dst, &h, sizeof h);
    });
    // dst is any byte of an object: the checksum is stored byte by byte (little-endian, as the host).
    kernel.opencl_source = R"(
      __kernel void model_checksum(__global const uchar* src, ulong n, __global uchar* dst) {
        if (get_global_id(0) != 0) return;
        ulong h = 1469598103934665603ul;
        for (ulong i = 0; i < n; ++i) h = (h ^ src[i]) * 1099511628211ul;
        for (int b = 0; b < 8; ++b) dst[b] = (uchar)(h >> (8 * b));
      })";
    kernel.cuda_lookup = hdsm::test::cuda_test_lookup("model_checksum");
    return kernel;
  }();
  return k;
}

// model_checksum with the destination first (host body only: the sim devices run it).
const hdsm::Kernel& checksum_into_kernel() {
  static const hdsm::Kernel k = hdsm::per_thread(
      "model_checksum_into",
      [](const hdsm::Thread& t, unsigned char* dst, const unsigned char* src, std::uint64_t n) {
        if (t.global_x() != 0) return;
        const std::uint64_t h = checksum(src, n);
        std::memcpy(dst, &h, sizeof h);
      });
  return k;
}

struct Param {
  const char* protocol;
  std::size_t block_bytes;
  unsigned devices;
  const char* backend = "sim";
  bool remote_copy = false;     // sim devices without peer access, HDSM_REMOTE=copy (else one peer group)
  bool unknown_access = false;  // faults reported as of unknown kind, as on CPUs other than x86-64
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << p.backend << ", " << p.protocol << ", " << hdsm::format_bytes(p.block_bytes) << " blocks, "
      << p.devices << " devices" << (p.remote_copy ? ", remote objects copied" : "")
      << (p.unknown_access ? ", faults of unknown kind" : "");
}

struct Object {
  unsigned char* p;
  unsigned device;
  std::vector<unsigned char> ref;
};

class AdsmModel : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const bool opencl = std::string(GetParam().backend) == "opencl";
    const bool cuda = std::string(GetParam().backend) == "cuda";
    if (opencl && hdsm::test::opencl_only_without_lsan())
      GTEST_SKIP() << "OpenCL under ASan runs in runtime.opencl_without_lsan";
    if (cuda && hdsm::test::cuda_test_lookup("model_pattern") == nullptr)
      GTEST_SKIP() << hdsm::test::kNoCudaKernels;
    hdsm::os::report_unknown_access(GetParam().unknown_access);
    hdsm::os::reset_fault_stats();
    auto c = hdsm::Config::defaults();
    if (opencl) {
      c.set("HDSM_DEVICE", "opencl").set("HDSM_OPENCL_MEMORY", "64MiB").set("HDSM_OPENCL_POISON", "1");
      kernel_align_ = 512;
    }
    if (cuda) c.set("HDSM_DEVICE", "cuda").set("HDSM_CUDA_MEMORY", "64MiB").set("HDSM_CUDA_POISON", "1");
    c.set("HDSM_SIM_DEVICES", std::to_string(GetParam().devices))
        .set("HDSM_SIM_MEMORY", "64MiB")
        .set("HDSM_SIM_LINK_GBPS", "0")
        .set("HDSM_SIM_LATENCY_US", "0")
        .set("HDSM_SIM_POISON", "1")
        .set("HDSM_ARENA_SEGMENT", "1GiB")
        .set("HDSM_BLOCK_SIZE", std::to_string(GetParam().block_bytes))
        .set("HDSM_PROTOCOL", GetParam().protocol);
    if (GetParam().remote_copy) c.set("HDSM_SIM_PEER", "none").set("HDSM_REMOTE", "copy");
    // Kernels may take objects of other devices: peers (the sim default) or copied.
    remote_ = !opencl && !cuda && GetParam().devices > 1;
    try {
      rt_ = std::make_unique<hdsm::Runtime>(c);
    } catch (const hdsm::NoDevice& e) {
      GTEST_SKIP() << "no " << GetParam().backend << " device here: " << e.what();
    }
    first_device_ = opencl || cuda ? rt_->default_device().properties().index : 0;
    rng_.seed(run_.seed() ^ (std::hash<std::string>{}(GetParam().protocol) + GetParam().block_bytes * 7 +
                             GetParam().devices));
    block_ = GetParam().block_bytes;
    max_bytes_ = std::min<std::size_t>(3 * block_ + block_ / 3, std::size_t{2} << 20);
  }
  void TearDown() override {
    if (rt_)
      for (auto& o : objects_) rt_->free(o.p);
    rt_.reset();
    hdsm::os::report_unknown_access(false);
  }

  std::size_t below(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }
  bool coin(double p = 0.5) { return std::bernoulli_distribution(p)(rng_); }

  // A random size: often under a block, sometimes several blocks, sometimes exactly block-sized.
  std::size_t random_size() {
    switch (below(4)) {
      case 0:
        return 1 + below(std::min<std::size_t>(block_ / 2, 4096));
      case 1:
        return block_ * (1 + below(2));
      default:
        return 1 + below(max_bytes_);
    }
  }
  // A random range [offset, offset + len) of an object of `bytes`, len > 0.
  std::pair<std::size_t, std::size_t> random_range(std::size_t bytes) {
    if (coin(0.15)) return {0, bytes};
    const std::size_t offset = below(bytes);
    const std::size_t len = 1 + below(std::min(bytes - offset, 2 * block_ + 77));
    return {offset, len};
  }

  void log(std::string line) { run_.log(std::move(line)); }
  std::string where() const { return run_.where(); }

  void check_range(const Object& o, std::size_t offset, std::size_t len, const char* what) {
    std::vector<unsigned char> got(len);
    std::memcpy(got.data(), o.p + offset, len);
    if (std::memcmp(got.data(), o.ref.data() + offset, len) == 0) return;
    std::size_t i = 0;
    while (got[i] == o.ref[offset + i]) ++i;
    FAIL() << what << ": object at " << static_cast<void*>(o.p) << " (" << o.ref.size() << " bytes, device "
           << o.device << ") byte " << offset + i << " is " << int(got[i]) << ", expected "
           << int(o.ref[offset + i]) << "; " << where();
  }

  void cpu_write() {
    Object& o = objects_[below(objects_.size())];
    const auto [offset, len] = random_range(o.ref.size());
    std::vector<unsigned char> data(len);
    for (auto& b : data) b = static_cast<unsigned char>(rng_());
    log("write " + std::to_string(len) + " at " + std::to_string(offset) + " of " +
        std::to_string(o.ref.size()));
    std::memcpy(o.p + offset, data.data(), len);
    std::memcpy(o.ref.data() + offset, data.data(), len);
  }

  void cpu_read() {
    const Object& o = objects_[below(objects_.size())];
    const auto [offset, len] = random_range(o.ref.size());
    log("read " + std::to_string(len) + " at " + std::to_string(offset) + " of " +
        std::to_string(o.ref.size()));
    check_range(o, offset, len, "CPU read");
  }

  // Bulk memory: a memset or a memcpy from host memory into a random range, a memcpy out of one
  // (checked against the reference), or a copy between two objects' ranges, which may overlap.
  void bulk_op() {
    Object& o = objects_[below(objects_.size())];
    const auto [offset, len] = random_range(o.ref.size());
    const std::string range =
        std::to_string(len) + " at " + std::to_string(offset) + " of " + std::to_string(o.ref.size());
    switch (below(4)) {
      case 0: {
        const int value = static_cast<int>(below(256));
        log("memset " + range + " to " + std::to_string(value));
        rt_->memset(o.p + offset, value, len);
        std::memset(o.ref.data() + offset, value, len);
        return;
      }
      case 1: {
        std::vector<unsigned char> data(len);
        for (auto& b : data) b = static_cast<unsigned char>(rng_());
        log("memcpy from the host into " + range);
        rt_->memcpy(o.p + offset, data.data(), len);
        std::memcpy(o.ref.data() + offset, data.data(), len);
        return;
      }
      case 2: {
        log("memcpy to the host from " + range);
        std::vector<unsigned char> got(len);
        rt_->memcpy(got.data(), o.p + offset, len);
        if (std::memcmp(got.data(), o.ref.data() + offset, len) != 0) {
          std::size_t i = 0;
          while (got[i] == o.ref[offset + i]) ++i;
          FAIL() << "bulk read: byte " << offset + i << " is " << int(got[i]) << ", expected "
                 << int(o.ref[offset + i]) << "; " << where();
        }
        return;
      }
      default: {
        Object& to = objects_[below(objects_.size())];
        const std::size_t n = std::min(len, to.ref.size());
        const std::size_t at = below(to.ref.size() - n + 1);
        log("memmove " + std::to_string(n) + " from " + std::to_string(offset) + " of " +
            std::to_string(o.ref.size()) + " (device " + std::to_string(o.device) + ") to " +
            std::to_string(at) + " of " + std::to_string(to.ref.size()) + " (device " +
            std::to_string(to.device) + ")");
        rt_->memmove(to.p + at, o.p + offset, n);
        std::memmove(to.ref.data() + at, o.ref.data() + offset, n);
        return;
      }
    }
  }

  void alloc() {
    const unsigned device = static_cast<unsigned>(below(GetParam().devices));
    const std::size_t bytes = random_size();
    log("alloc " + std::to_string(bytes) + " on device " + std::to_string(device));
    auto* p = static_cast<unsigned char*>(rt_->alloc(bytes, static_cast<int>(first_device_ + device)));
    objects_.push_back({p, device, std::vector<unsigned char>(bytes, 0)});
  }

  void free_one() {
    const std::size_t i = below(objects_.size());
    log("free object of " + std::to_string(objects_[i].ref.size()));
    rt_->free(objects_[i].p);
    objects_.erase(objects_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  // Pattern into a range of a random object, or a checksum of a range of one object into another of the
  // same device; annotated (in/out/inout where they are correct) or raw pointers (the seed's behaviour).
  void kernel_call() {
    const bool annotate = coin();
    Object& a = objects_[below(objects_.size())];
    auto [offset, len] = random_range(a.ref.size());
    const std::size_t aligned = offset / kernel_align_ * kernel_align_;
    len += offset - aligned;
    offset = aligned;
    const auto salt = static_cast<std::uint32_t>(rng_());
    std::vector<Object*> peers;
    for (auto& o : objects_)
      if ((o.device == a.device || remote_) && o.ref.size() >= 8) peers.push_back(&o);
    if (peers.empty() || coin()) {
      log(std::string("pattern ") + (annotate ? "annotated " : "") + std::to_string(len) + " at " +
          std::to_string(offset) + " of " + std::to_string(a.ref.size()) + " on device " +
          std::to_string(a.device));
      unsigned char* dst = a.p + offset;
      const bool whole = offset == 0 && len == a.ref.size();
      if (!annotate)
        rt_->call(pattern_kernel(), hdsm::cover(len), dst, std::uint64_t{len}, salt);
      else if (whole && coin())
        rt_->call(pattern_kernel(), hdsm::cover(len), hdsm::out(dst), std::uint64_t{len}, salt);
      else
        rt_->call(pattern_kernel(), hdsm::cover(len), hdsm::inout(dst), std::uint64_t{len}, salt);
      for (std::size_t i = 0; i < len; ++i) a.ref[offset + i] = pattern_byte(i, salt);
      return;
    }
    Object& b = *peers[below(peers.size())];
    const std::size_t at = below((b.ref.size() - 8) / kernel_align_ + 1) * kernel_align_;
    log(std::string("checksum ") + (annotate ? "annotated " : "") + std::to_string(len) + " at " +
        std::to_string(offset) + " of " + std::to_string(a.ref.size()) + " into " + std::to_string(at) +
        " of " + std::to_string(b.ref.size()) + " (device " + std::to_string(b.device) + ") on device " +
        std::to_string(a.device));
    const unsigned char* src = a.p + offset;
    // The call runs on the device of its first shared pointer: with the destination first, a source of
    // another device is the remote one (read only), otherwise the destination is.
    const bool into = remote_ && coin();
    if (into) log("  with the destination first (the call runs on device " + std::to_string(b.device) + ")");
    if (into && annotate)
      rt_->call(checksum_into_kernel(), hdsm::cover(1), hdsm::inout(b.p + at), hdsm::in(src),
                std::uint64_t{len});
    else if (into)
      rt_->call(checksum_into_kernel(), hdsm::cover(1), b.p + at, src, std::uint64_t{len});
    else if (annotate)
      rt_->call(checksum_kernel(), hdsm::cover(1), hdsm::in(src), std::uint64_t{len}, hdsm::inout(b.p + at));
    else
      rt_->call(checksum_kernel(), hdsm::cover(1), src, std::uint64_t{len}, b.p + at);
    const std::uint64_t h = checksum(a.ref.data() + offset, len);
    std::memcpy(b.ref.data() + at, &h, sizeof h);
  }

  // One or two calls, the sync, then possibly a CPU access to blocks the sync may have invalidated.
  void kernel_step() {
    const int calls = 1 + static_cast<int>(below(2));
    for (int c = 0; c < calls; ++c) kernel_call();
    log("sync");
    rt_->sync();
    if (coin()) bulk_op();  // on blocks the sync may have made invalid
    if (HasFatalFailure()) return;
    if (coin()) cpu_write();
    if (coin()) cpu_read();
  }

  // A range of an object that an asynchronous copy moves (`writes`: its destination).
  struct Busy {
    const Object* object;
    std::size_t offset, len;
    bool writes;
  };
  // A random range of `o` (starting at a kernel-aligned offset when `aligned`) that work running beside
  // the copies in `busy` may touch: it writes, so it must keep off every busy range of `o`.
  std::optional<std::pair<std::size_t, std::size_t>> free_range(const Object& o,
                                                                const std::vector<Busy>& busy, bool aligned) {
    for (int attempt = 0; attempt < 8; ++attempt) {
      auto [offset, len] = random_range(o.ref.size());
      if (aligned) {
        const std::size_t start = offset / kernel_align_ * kernel_align_;
        len += offset - start;
        offset = start;
      }
      const bool clear = std::none_of(busy.begin(), busy.end(), [&](const Busy& b) {
        return b.object == &o && b.offset < offset + len && offset < b.offset + b.len;
      });
      if (clear) return std::make_pair(offset, len);
    }
    return std::nullopt;
  }

  // memcpy_async between two objects, then, while it may still run, a call that writes a range of an
  // object by a range annotation, its sync and CPU accesses: none of them touches the copy's bytes
  // (the contract), but they may share its objects and blocks. Then the copy is waited for.
  void async_step() {
    Object& from = objects_[below(objects_.size())];
    Object& to = objects_[below(objects_.size())];
    const auto [offset, len] = random_range(from.ref.size());
    const std::size_t n = std::min(len, to.ref.size());
    const std::size_t at = below(to.ref.size() - n + 1);
    log("memcpy_async " + std::to_string(n) + " from " + std::to_string(offset) + " of " +
        std::to_string(from.ref.size()) + " (device " + std::to_string(from.device) + ") to " +
        std::to_string(at) + " of " + std::to_string(to.ref.size()) + " (device " +
        std::to_string(to.device) + ")");
    const hdsm::Event copied = rt_->memcpy_async(to.p + at, from.p + offset, n);
    std::memmove(to.ref.data() + at, from.ref.data() + offset, n);
    const std::vector<Busy> busy{{&from, offset, n, false}, {&to, at, n, true}};
    Object& a = objects_[below(objects_.size())];
    if (const auto range = free_range(a, busy, true); range && coin(0.8)) {
      const auto [o, l] = *range;
      const auto salt = static_cast<std::uint32_t>(rng_());
      log("  pattern, range annotated, " + std::to_string(l) + " at " + std::to_string(o) + " of " +
          std::to_string(a.ref.size()) + " on device " + std::to_string(a.device) + "; sync");
      rt_->call(pattern_kernel(), hdsm::cover(l), hdsm::inout(a.p + o, 0, l), std::uint64_t{l}, salt);
      rt_->sync();
      for (std::size_t i = 0; i < l; ++i) a.ref[o + i] = pattern_byte(i, salt);
    }
    Object& c = objects_[below(objects_.size())];
    if (const auto range = free_range(c, busy, false); range && coin()) {
      const auto [o, l] = *range;
      log("  CPU write " + std::to_string(l) + " at " + std::to_string(o) + " of " +
          std::to_string(c.ref.size()));
      for (std::size_t i = 0; i < l; ++i) c.p[o + i] = c.ref[o + i] = static_cast<unsigned char>(rng_());
    }
    Object& r = objects_[below(objects_.size())];
    const std::vector<Busy> written{busy[1]};  // the source may be read
    if (const auto range = free_range(r, written, false); range && coin()) {
      log("  CPU read " + std::to_string(range->second) + " at " + std::to_string(range->first) + " of " +
          std::to_string(r.ref.size()));
      check_range(r, range->first, range->second, "CPU read beside a copy");
      if (HasFatalFailure()) return;
    }
    log("  wait for the copy");
    copied.wait();
  }

  // Half of the objects are read with a bulk copy, which leaves invalid blocks invalid for later steps.
  void check_all() {
    for (const auto& o : objects_) {
      if (coin()) {
        std::vector<unsigned char> got(o.ref.size());
        rt_->memcpy(got.data(), o.p, got.size());
        if (got != o.ref) {
          std::size_t i = 0;
          while (got[i] == o.ref[i]) ++i;
          FAIL() << "bulk check after the step: byte " << i << " of the object at " << static_cast<void*>(o.p)
                 << " is " << int(got[i]) << ", expected " << int(o.ref[i]) << "; " << where();
        }
        continue;
      }
      check_range(o, 0, o.ref.size(), "check after the step");
      if (HasFatalFailure()) return;
    }
  }

  std::unique_ptr<hdsm::Runtime> rt_;
  std::mt19937_64 rng_;
  hdsm::test::ModelRun run_{kDefaultSeed, kDefaultIterations};
  std::size_t block_ = 0, max_bytes_ = 0;
  std::size_t kernel_align_ = 1;  // where kernel ranges may start
  bool remote_ = false;           // kernels may take objects of other devices
  unsigned first_device_ = 0;     // the runtime's index of the model's device 0
  std::vector<Object> objects_;
};

TEST_P(AdsmModel, MatchesPlainMemory) {
  for (int step = 0; step < run_.iterations(); ++step) {
    const std::size_t r = below(100);
    if (objects_.empty() || (r < 10 && objects_.size() < kMaxObjects)) {
      alloc();
    } else if (r < 16) {
      free_one();
    } else if (r < 40) {
      cpu_write();
    } else if (r < 52) {
      cpu_read();
    } else if (r < 60) {
      bulk_op();
    } else if (r < 68) {
      async_step();
    } else {
      kernel_step();
    }
    if (HasFatalFailure()) return;
    check_all();
    if (HasFatalFailure()) return;
  }
  if (GetParam().unknown_access) {
    const hdsm::os::FaultStats faults = hdsm::os::fault_stats();
    EXPECT_GT(faults.unknown, 0u);  // the mode was exercised
    EXPECT_EQ(faults.reads + faults.writes, 0u);
  }
}

#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif

std::vector<Param> all_params() {
  std::vector<Param> out;
  for (const char* protocol : {"batch", "lazy", "rolling"})
    for (std::size_t block : {std::size_t{4} << 10, std::size_t{64} << 10, std::size_t{1} << 20})
      for (unsigned devices = 1; devices <= 3; ++devices) {
        // Under TSan 1 MiB blocks only on two devices: their steps race nothing that smaller blocks
        // do not, and each of those cases took 8-18 s there (CI's budget).
        if (kThreadSanitizer && block == (std::size_t{1} << 20) && devices != 2) continue;
        out.push_back({protocol, block, devices});
      }
  for (const char* protocol : {"batch", "lazy", "rolling"})
    for (std::size_t block : {std::size_t{4} << 10, std::size_t{64} << 10})
      out.push_back({protocol, block, 1, "opencl"});
  for (const char* protocol : {"batch", "lazy", "rolling"})
    for (std::size_t block : {std::size_t{4} << 10, std::size_t{64} << 10})
      out.push_back({protocol, block, 1, "cuda"});
  for (const char* protocol : {"batch", "lazy", "rolling"})
    for (std::size_t block : {std::size_t{4} << 10, std::size_t{64} << 10})
      for (unsigned devices = 2; devices <= 3; ++devices)
        out.push_back({protocol, block, devices, "sim", true});
  // The resolvers' paths for CPUs that do not tell reads from writes: a read first, then a write
  // (batch takes no faults).
  for (const char* protocol : {"lazy", "rolling"})
    for (unsigned devices = 1; devices <= 2; ++devices)
      out.push_back({protocol, std::size_t{4} << 10, devices, "sim", false, true});
  // Host-mapped objects (host memory the kernels use in place) and unified memory (sim: the same,
  // allocated by the device): the block size means nothing there.
  for (const char* protocol : {"host-mapped", "um"})
    for (unsigned devices = 1; devices <= 3; ++devices)
      out.push_back({protocol, std::size_t{4} << 10, devices});
  for (const char* backend : {"opencl", "cuda"})
    out.push_back({"host-mapped", std::size_t{4} << 10, 1, backend});
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, AdsmModel, ::testing::ValuesIn(all_params()), [](const auto& info) {
  const std::string backend = info.param.backend;
  const std::string protocol =
      info.param.protocol == std::string("host-mapped") ? "host_mapped" : info.param.protocol;
  return (backend == "sim" ? "" : backend + "_") + protocol + "_" +
         std::to_string(info.param.block_bytes >> 10) + "KiB_" + std::to_string(info.param.devices) + "dev" +
         (info.param.remote_copy ? "_copy" : "") + (info.param.unknown_access ? "_unknown" : "");
});

}  // namespace
