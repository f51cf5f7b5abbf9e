// The randomized model test of the containers: random host reads, writes and read-writes of random
// ranges (through host_range and the element proxies), and kernels that write, read-write and read
// random ranges on random devices, against plain arrays. Device memory is small, so copies are
// evicted, and fresh device buffers are poisoned, so data nobody moved shows. Each device read's
// result and each host read is checked at once, and every vector in full every kCheckEvery steps. A
// matrix takes part too: kernels on random submatrices, host accesses of row segments and elements.
// Random skeleton calls take part as well (Map in place or not, MapArrayIndex, MapOverlap with each
// edge mode, Scan, Reduce), on whole vectors or on random ranges of them, on the host or on a random
// subset of the devices in a random order, split equally or by random weights.
// HDSM_MODEL_SEED and HDSM_MODEL_ITERATIONS set the seed and the number of steps per configuration.
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include "support/model_run.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

using hdsm::Access;
using u32 = std::uint32_t;

constexpr std::uint64_t kDefaultSeed = 20261126;
constexpr int kDefaultIterations = 20000;
constexpr int kCheckEvery = 50;
constexpr std::size_t kElements = 65536;  // 256 KiB per vector: five and a result are 1.5x the 1 MiB devices
constexpr int kVectors = 5;
constexpr std::size_t kRows = 256;  // and a 256 x 256 matrix, whose device copies are submatrices
constexpr std::size_t kCols = 256;

u32 fill_value(u32 seed, std::uint64_t i) { return seed * 2654435761u + static_cast<u32>(i); }

/// p[i] = seed * 2654435761 + i
const hdsm::Kernel& fill_kernel() {
  static const hdsm::Kernel k = hdsm::with_opencl(
      R"(__kernel void model_fill(__global uint* p, ulong n, uint seed) {
           const ulong i = get_global_id(0);
           if (i < n) p[i] = seed * 2654435761u + (uint)i;
         })",
      hdsm::per_thread("model_fill", [](const hdsm::Thread& t, u32* p, std::uint64_t n, u32 seed) {
        if (const auto i = t.global_x(); i < n) p[i] = fill_value(seed, i);
      }));
  return k;
}
/// p[i] = p[i] * 3 + b
const hdsm::Kernel& mad_kernel() {
  static const hdsm::Kernel k = hdsm::with_opencl(
      R"(__kernel void model_mad(__global uint* p, ulong n, uint b) {
           const ulong i = get_global_id(0);
           if (i < n) p[i] = p[i] * 3u + b;
         })",
      hdsm::per_thread("model_mad", [](const hdsm::Thread& t, u32* p, std::uint64_t n, u32 b) {
        if (const auto i = t.global_x(); i < n) p[i] = p[i] * 3u + b;
      }));
  return k;
}
/// out[i] = in[i] ^ 0x5a5a5a5a
const hdsm::Kernel& copy_kernel() {
  static const hdsm::Kernel k = hdsm::with_opencl(
      R"(__kernel void model_copy(__global const uint* in, __global uint* out, ulong n) {
           const ulong i = get_global_id(0);
           if (i < n) out[i] = in[i] ^ 0x5a5a5a5au;
         })",
      hdsm::per_thread("model_copy", [](const hdsm::Thread& t, const u32* in, u32* out, std::uint64_t n) {
        if (const auto i = t.global_x(); i < n) out[i] = in[i] ^ 0x5a5a5a5au;
      }));
  return k;
}

HDSM_USER_FUNCTION(model_affine, unsigned int, (unsigned int x, unsigned int b), { return x * 5u + b; })
HDSM_USER_FUNCTION(model_add, unsigned int, (unsigned int a, unsigned int b), { return a + b; })
HDSM_USER_FUNCTION(model_gather, unsigned int,
                   (unsigned long i, HDSM_GLOBAL const unsigned int* a, unsigned long n,
                    unsigned long stride),
                   { return a[(i * stride + 3) % n] ^ (unsigned int)i; })
HDSM_USER_FUNCTION(model_window, unsigned int, (const unsigned int* w, long r), {
  unsigned int sum = 0u;
  for (long j = -r; j <= r; ++j) sum = sum * 31u + w[j];
  return sum;
})

struct Param {
  const char* backend;
  unsigned devices;
  const char* peers;         // HDSM_SIM_PEER
  unsigned sim_threads = 0;  // HDSM_SIM_THREADS: 1, each device's kernels at once with the others'
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << p.backend << ", " << p.devices << " devices, peers " << p.peers << ", sim threads " << p.sim_threads;
}

class ContainerModel : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const bool opencl = std::string(GetParam().backend) == "opencl";
    if (opencl && hdsm::test::opencl_only_without_lsan())
      GTEST_SKIP() << "OpenCL under ASan runs in container.opencl_without_lsan";
    hdsm::Config c = hdsm::test::fast_sim_config("rolling", "4KiB", "1MiB");
    if (opencl) {
      c.set("HDSM_DEVICE", "opencl").set("HDSM_OPENCL_MEMORY", "1MiB").set("HDSM_OPENCL_POISON", "1");
    } else {
      c.set("HDSM_SIM_DEVICES", std::to_string(GetParam().devices))
          .set("HDSM_SIM_PEER", GetParam().peers)
          .set("HDSM_SIM_THREADS", std::to_string(GetParam().sim_threads));
    }
    try {
      rt_ = std::make_unique<hdsm::Runtime>(c);
    } catch (const hdsm::NoDevice& e) {
      GTEST_SKIP() << "no " << GetParam().backend << " device here: " << e.what();
    }
    if (opencl)
      devices_ = {static_cast<unsigned>(rt_->default_device().properties().index)};
    else
      for (unsigned d = 0; d < GetParam().devices; ++d) devices_.push_back(d);
    rng_.seed(run_.seed() ^ (std::uint64_t{GetParam().devices} * 7919 + std::string(GetParam().peers).size() +
                             (opencl ? 1 : 0)));
    for (int k = 0; k < kVectors; ++k) {
      vectors_.emplace_back(kElements, static_cast<u32>(k), hdsm::ContainerOptions{rt_.get()});
      models_.emplace_back(kElements, static_cast<u32>(k));
    }
    result_ = std::make_unique<hdsm::Vector<u32>>(kElements, hdsm::ContainerOptions{rt_.get()});
    matrix_ = std::make_unique<hdsm::Matrix<u32>>(kRows, kCols, 9u, hdsm::ContainerOptions{rt_.get()});
    matrix_model_.assign(kRows * kCols, 9u);
  }
  void TearDown() override {
    vectors_.clear();
    matrix_.reset();
    result_.reset();
    rt_.reset();
  }

  std::size_t below(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }
  u32 any() { return static_cast<u32>(rng_()); }

  /// A random range [first, first + n), n > 0: whole, tiny or up to a quarter of the vector.
  std::pair<std::size_t, std::size_t> random_range() {
    switch (below(6)) {
      case 0:
        return {0, kElements};
      case 1: {
        const std::size_t first = below(kElements);
        return {first, 1 + below(std::min<std::size_t>(kElements - first, 64))};
      }
      default: {
        const std::size_t first = below(kElements);
        return {first, 1 + below(std::min(kElements - first, kElements / 4))};
      }
    }
  }

  void log(std::string line) { run_.log(std::move(line)); }
  std::string where() const { return run_.where(); }

  /// Compares got[0, n) with want[first, first + n).
  bool same(const u32* got, const std::vector<u32>& want, std::size_t first, std::size_t n, const char* what,
            u32 flip = 0) {
    for (std::size_t i = 0; i < n; ++i)
      if (got[i] != (want[first + i] ^ flip)) {
        ADD_FAILURE() << what << ": element " << first + i << " is " << got[i] << ", expected "
                      << (want[first + i] ^ flip) << "; " << where();
        return false;
      }
    return true;
  }

  /// A step on the matrix: kernels on random submatrices (sometimes whole rows, sometimes all of it),
  /// host accesses of row segments and elements.
  void matrix_step(int it) {
    hdsm::Matrix<u32>& m = *matrix_;
    std::vector<u32>& mm = matrix_model_;
    const unsigned d = devices_[below(devices_.size())];
    std::size_t r0 = below(kRows), c0 = below(kCols);
    std::size_t nr = 1 + below(std::min<std::size_t>(kRows - r0, 64)), nc = 1 + below(kCols - c0);
    switch (below(4)) {
      case 0:
        r0 = 0, c0 = 0, nr = kRows, nc = kCols;
        break;  // all of it
      case 1:
        c0 = 0, nc = kCols;
        break;  // whole rows
      default:
        break;
    }
    const std::size_t n = nr * nc;
    const auto at = [&](std::size_t i) { return (r0 + i / nc) * kCols + c0 + i % nc; };
    const std::string where_ = "m[" + std::to_string(r0) + "+" + std::to_string(nr) + ", " +
                               std::to_string(c0) + "+" + std::to_string(nc) + "] dev " + std::to_string(d);
    const std::size_t op = below(100);
    if (op < 20) {
      log(std::to_string(it) + ": matrix device write " + where_);
      const u32 seed = any();
      hdsm::launch(d, fill_kernel(), hdsm::cover(n), hdsm::out(m.submatrix(r0, c0, nr, nc)), std::uint64_t{n},
                   seed);
      for (std::size_t i = 0; i < n; ++i) mm[at(i)] = fill_value(seed, i);
    } else if (op < 45) {
      log(std::to_string(it) + ": matrix device read-write " + where_);
      const u32 b = any();
      hdsm::launch(d, mad_kernel(), hdsm::cover(n), hdsm::inout(m.submatrix(r0, c0, nr, nc)),
                   std::uint64_t{n}, b);
      for (std::size_t i = 0; i < n; ++i) mm[at(i)] = mm[at(i)] * 3u + b;
    } else if (op < 70) {
      log(std::to_string(it) + ": matrix device read " + where_);
      hdsm::launch(d, copy_kernel(), hdsm::cover(n), hdsm::in(m.submatrix(r0, c0, nr, nc)),
                   hdsm::out(result_->range(0, n)), std::uint64_t{n});
      const u32* got = result_->host_range(0, n, Access::read);
      for (std::size_t i = 0; i < n; ++i)
        if (got[i] != (mm[at(i)] ^ 0x5a5a5a5au)) {
          ADD_FAILURE() << "matrix device read: element " << at(i) << " is " << (got[i] ^ 0x5a5a5a5au)
                        << ", expected " << mm[at(i)] << "; " << where();
          return;
        }
    } else if (op < 80) {
      log(std::to_string(it) + ": matrix host read of row " + where_);
      same(m.host_range(r0 * kCols + c0, nc, Access::read), mm, r0 * kCols + c0, nc, "matrix host read");
    } else if (op < 90) {
      log(std::to_string(it) + ": matrix host write of row " + where_);
      u32* p = m.host_range(r0 * kCols + c0, nc, Access::write);
      const u32 salt = any();
      for (std::size_t j = 0; j < nc; ++j) p[j] = mm[r0 * kCols + c0 + j] = salt ^ static_cast<u32>(j);
    } else {
      log(std::to_string(it) + ": matrix element " + where_);
      const u32 x = any();
      if (below(2) == 0) {
        m.at(r0, c0) += x;
        mm[r0 * kCols + c0] += x;
      } else if (static_cast<u32>(m.at(r0, c0)) != mm[r0 * kCols + c0]) {
        ADD_FAILURE() << "matrix element (" << r0 << ", " << c0 << "); " << where();
      }
    }
  }

  /// Points a skeleton at the host, or at a random subset of the devices in a random order, split
  /// equally or by random weights; returns a description for the log.
  template <class S>
  std::string place(S& skeleton) {
    if (below(5) == 0) {
      skeleton.backend(hdsm::SkeletonBackend::host);
      return "host";
    }
    std::vector<unsigned> chosen = devices_;
    std::shuffle(chosen.begin(), chosen.end(), rng_);
    chosen.resize(1 + below(chosen.size()));
    skeleton.backend(hdsm::SkeletonBackend::devices).devices(chosen);
    std::string text = "devices";
    for (unsigned d : chosen) text += " " + std::to_string(d);
    if (chosen.size() > 1 && below(2) == 0) {
      std::vector<double> weights;
      for (std::size_t p = 0; p < chosen.size(); ++p) weights.push_back(1.0 + static_cast<double>(below(8)));
      skeleton.weights(weights);
      text += " weighted";
    } else {
      skeleton.split(hdsm::Split::equal);
    }
    return text;
  }

  /// A random skeleton call on whole vectors or on ranges of them (n elements from element `oo` of
  /// the output and `io` of the input), the model computed by loops.
  void skeleton_step(int it) {
    const auto k = static_cast<int>(below(kVectors));
    auto j = static_cast<int>(below(kVectors));
    const bool ranged = below(2) == 0;
    const std::size_t n = ranged ? 4 + below(kElements - 3) : kElements;  // cyclic windows need r <= n
    const std::size_t oo = ranged ? below(kElements - n + 1) : 0;
    std::size_t io = ranged ? below(kElements - n + 1) : 0;
    hdsm::Vector<u32>& out_vector = vectors_[k];
    std::vector<u32>& model = models_[k];
    const auto range_text = [&] {
      return " [" + std::to_string(oo) + ", +" + std::to_string(n) + ") from [" + std::to_string(io) + ", +" +
             std::to_string(n) + ")";
    };
    // fn(output, input): the ranges, or the whole vectors themselves.
    const auto with_operands = [&](auto&& fn) {
      if (ranged)
        fn(out_vector.range(oo, n), vectors_[j].range(io, n));
      else
        fn(out_vector, vectors_[j]);
    };
    const std::size_t op = below(5);
    if (op == 0) {  // Map, in place when j == k
      if (j == k) io = oo;
      hdsm::Map<model_affine> map;
      const u32 b = any();
      log(std::to_string(it) + ": Map v" + std::to_string(k) + " = 5 v" + std::to_string(j) + " + b" +
          range_text() + " on " + place(map));
      with_operands([&](auto&& o, auto&& i) { map(o, i, b); });
      std::vector<u32> next(n);
      for (std::size_t i = 0; i < n; ++i) next[i] = models_[j][io + i] * 5u + b;
      std::copy(next.begin(), next.end(), model.begin() + static_cast<std::ptrdiff_t>(oo));
      return;
    }
    if (j == k) j = (k + 1) % kVectors;  // the other skeletons need two vectors
    const u32* in = models_[j].data() + io;
    u32* m = model.data() + oo;
    if (op == 1) {
      hdsm::MapArrayIndex<model_gather> gather;
      const std::uint64_t stride = 1 + below(1000);
      log(std::to_string(it) + ": MapArrayIndex v" + std::to_string(k) + range_text() + " and all of v" +
          std::to_string(j) + " on " + place(gather));
      // The index counts from the range's first element; the array is all of v_j.
      with_operands([&](auto&& o, auto&&) { gather(o, vectors_[j], std::uint64_t{kElements}, stride); });
      for (std::size_t i = 0; i < n; ++i)
        m[i] = models_[j][(i * stride + 3) % kElements] ^ static_cast<u32>(i);
    } else if (op == 2) {
      hdsm::MapOverlap<model_window> mo;
      const long r = static_cast<long>(below(4));
      const auto edge = static_cast<hdsm::Edge>(below(4));
      const u32 pad = any();
      log(std::to_string(it) + ": MapOverlap r " + std::to_string(r) + " edge " +
          std::to_string(static_cast<int>(edge)) + " v" + std::to_string(k) + " from v" + std::to_string(j) +
          range_text() + " on " + place(mo));
      mo.overlap(static_cast<std::size_t>(r)).edge(edge).pad(pad);
      with_operands([&](auto&& o, auto&& i) { mo(o, i, r); });
      const long size = static_cast<long>(n);  // the range's ends are the edges
      for (long i = 0; i < size; ++i) {
        if (edge == hdsm::Edge::none && (i < r || i + r >= size)) continue;
        u32 sum = 0;
        for (long d = -r; d <= r; ++d) {
          const long at = i + d;
          u32 v = pad;
          if (at >= 0 && at < size)
            v = in[static_cast<std::size_t>(at)];
          else if (edge == hdsm::Edge::cyclic)
            v = in[static_cast<std::size_t>((at + size) % size)];
          else if (edge == hdsm::Edge::duplicate)
            v = in[at < 0 ? 0 : n - 1];
          sum = sum * 31u + v;
        }
        m[static_cast<std::size_t>(i)] = sum;
      }
    } else if (op == 3) {
      hdsm::Scan<model_add> scan;
      log(std::to_string(it) + ": Scan v" + std::to_string(k) + " of v" + std::to_string(j) + range_text() +
          " on " + place(scan));
      with_operands([&](auto&& o, auto&& i) { scan(o, i); });
      u32 acc = 0;
      for (std::size_t i = 0; i < n; ++i) m[i] = acc += in[i];
    } else {
      hdsm::Reduce<model_add> sum;
      log(std::to_string(it) + ": Reduce v" + std::to_string(j) + range_text() + " on " + place(sum));
      u32 want = 0;
      for (std::size_t i = 0; i < n; ++i) want += in[i];
      u32 got = 0;
      with_operands([&](auto&&, auto&& i) { got = sum(i); });
      if (got != want) ADD_FAILURE() << "Reduce: " << got << ", expected " << want << "; " << where();
    }
  }

  void step(int it) {
    if (below(4) == 0) {
      matrix_step(it);
      return;
    }
    if (below(12) == 0) {
      skeleton_step(it);
      return;
    }
    const int k = static_cast<int>(below(kVectors));
    hdsm::Vector<u32>& v = vectors_[k];
    std::vector<u32>& m = models_[k];
    const unsigned d = devices_[below(devices_.size())];
    const auto [first, n] = random_range();
    const std::size_t op = below(100);
    const std::string where_ = "v" + std::to_string(k) + "[" + std::to_string(first) + ", " +
                               std::to_string(first + n) + ") dev " + std::to_string(d);
    if (op < 12) {
      log(std::to_string(it) + ": host read " + where_);
      const u32* p = v.host_range(first, n, Access::read);
      same(p, m, first, n, "host read");
    } else if (op < 22) {
      log(std::to_string(it) + ": host write " + where_);
      u32* p = v.host_range(first, n, Access::write);
      const u32 salt = any();
      for (std::size_t i = 0; i < n; ++i) p[i] = m[first + i] = salt + static_cast<u32>(i) * 7u;
    } else if (op < 30) {
      const std::size_t i = first;
      const u32 x = any();
      switch (below(3)) {
        case 0:
          log(std::to_string(it) + ": proxy read " + where_);
          if (static_cast<u32>(v[i]) != m[i])
            ADD_FAILURE() << "proxy read of " << i << ": " << static_cast<u32>(v[i]) << " vs " << m[i] << "; "
                          << where();
          break;
        case 1:
          log(std::to_string(it) + ": proxy write " + where_);
          v[i] = x;
          m[i] = x;
          break;
        default:
          log(std::to_string(it) + ": proxy += " + where_);
          v[i] += x;
          m[i] += x;
      }
    } else if (op < 45) {
      log(std::to_string(it) + ": device write " + where_);
      const u32 seed = any();
      hdsm::launch(d, fill_kernel(), hdsm::cover(n), hdsm::out(v.range(first, n)), std::uint64_t{n}, seed);
      for (std::size_t i = 0; i < n; ++i) m[first + i] = fill_value(seed, i);
    } else if (op < 65) {
      log(std::to_string(it) + ": device read-write " + where_);
      const u32 b = any();
      hdsm::launch(d, mad_kernel(), hdsm::cover(n), hdsm::inout(v.range(first, n)), std::uint64_t{n}, b);
      for (std::size_t i = 0; i < n; ++i) m[first + i] = m[first + i] * 3u + b;
    } else if (op < 85) {
      log(std::to_string(it) + ": device read " + where_);
      hdsm::launch(d, copy_kernel(), hdsm::cover(n), hdsm::in(v.range(first, n)),
                   hdsm::out(result_->range(0, n)), std::uint64_t{n});
      same(result_->host_range(0, n, Access::read), m, first, n, "device read", 0x5a5a5a5au);
    } else if (op < 88) {
      log(std::to_string(it) + ": update_host v" + std::to_string(k));
      v.update_host();
    } else if (op < 91) {
      log(std::to_string(it) + ": flush v" + std::to_string(k));
      v.flush();
    } else if (op < 94) {
      log(std::to_string(it) + ": invalidate_device_copies v" + std::to_string(k));
      v.invalidate_device_copies();
    } else {
      log(std::to_string(it) + ": wait v" + std::to_string(k));
      v.wait();
    }
  }

  std::unique_ptr<hdsm::Runtime> rt_;
  std::vector<unsigned> devices_;
  std::vector<hdsm::Vector<u32>> vectors_;
  std::vector<std::vector<u32>> models_;
  std::unique_ptr<hdsm::Vector<u32>> result_;
  std::unique_ptr<hdsm::Matrix<u32>> matrix_;
  std::vector<u32> matrix_model_;
  std::mt19937_64 rng_;
  // A quarter of the steps under a sanitizer: 5000 steps still evict, and each took 25-36 s there.
  hdsm::test::ModelRun run_{kDefaultSeed, kDefaultIterations, 4};
};

TEST_P(ContainerModel, MatchesPlainArrays) {
  for (int it = 0; it < run_.iterations(); ++it) {
    step(it);
    if (::testing::Test::HasFailure()) return;
    if (it % kCheckEvery == kCheckEvery - 1)
      for (int k = 0; k < kVectors; ++k) {
        log(std::to_string(it) + ": check v" + std::to_string(k));
        if (!same(vectors_[k].host_range(0, kElements, Access::read), models_[k], 0, kElements, "full check"))
          return;
      }
    if (it % kCheckEvery == kCheckEvery - 1 && !same(matrix_->host_range(0, kRows * kCols, Access::read),
                                                     matrix_model_, 0, kRows * kCols, "matrix check"))
      return;
  }
  const hdsm::ContainerStats s = hdsm::container_stats(*rt_);
  EXPECT_GT(s.evictions, 0u) << "the working set exceeds device memory";
  RecordProperty("evictions", std::to_string(s.evictions));
}

INSTANTIATE_TEST_SUITE_P(All, ContainerModel,
                         ::testing::Values(Param{"sim", 1, "all"}, Param{"sim", 2, "all"},
                                           Param{"sim", 3, "none"}, Param{"sim", 4, "0-1,2-3", 1},
                                           Param{"opencl", 1, "all"}),
                         [](const auto& info) {
                           std::string peers = info.param.peers;
                           for (char& c : peers)
                             if (c == '-' || c == ',') c = '_';
                           return std::string(info.param.backend) + "_" + std::to_string(info.param.devices) +
                                  "dev_" + peers + (info.param.sim_threads > 0 ? "_own_executors" : "");
                         });

}  // namespace
