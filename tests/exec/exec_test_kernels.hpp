// Kernels and host references shared by the exec tests. Inputs are small integers stored in
// floats, so every sum below is exact and results compare with ==.
#pragma once

#include "exec/executor.hpp"

#include <hdsm/kernel.hpp>

#include <cstdint>
#include <random>
#include <vector>

namespace hdsm::exec::testing {

inline constexpr int kTile = 16;

/// kernel.host(executor, launch, HostArgs(args...).pack()).
template <class... A>
void run(const Kernel& kernel, Executor& executor, const Launch& launch, const A&... args) {
  kernel.host(executor, launch, HostArgs<A...>(args...).pack());
}

inline std::vector<float> small_ints(std::size_t n, unsigned seed, int lo = -3, int hi = 3) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(dist(rng));
  return v;
}

inline Kernel vector_add() {
  return per_thread("vector_add",
                    [](const Thread& t, const float* a, const float* b, float* c, std::uint64_t n) {
                      const std::uint64_t i = t.global_x();
                      if (i < n) c[i] = a[i] + b[i];
                    });
}

/// out[blockIdx.x] = sum of the block's slice of in (blockDim.x must be a power of two).
inline Kernel reduce_cooperative() {
  return cooperative("reduce_coop", [](ThreadCtx& t, const float* in, float* out, std::uint64_t n) {
    float* s = t.shared<float>(t.block_dim.x);
    const std::uint64_t i = t.global_x();
    s[t.idx.x] = i < n ? in[i] : 0.0f;
    t.sync();
    for (std::uint32_t stride = t.block_dim.x / 2; stride > 0; stride /= 2) {
      if (t.idx.x < stride) s[t.idx.x] += s[t.idx.x + stride];
      t.sync();
    }
    if (t.idx.x == 0) out[t.block.x] = s[0];
  });
}

inline Kernel reduce_per_block() {
  return per_block("reduce_phases", [](Block& b, const float* in, float* out, std::uint64_t n) {
    float* s = b.shared<float>(b.size());
    b.threads([&](const Thread& t) {
      const std::uint64_t i = t.global_x();
      s[t.idx.x] = i < n ? in[i] : 0.0f;
    });
    for (std::uint32_t stride = b.dim().x / 2; stride > 0; stride /= 2)
      b.threads([&](const Thread& t) {
        if (t.idx.x < stride) s[t.idx.x] += s[t.idx.x + stride];
      });
    out[b.index().x] = s[0];
  });
}

inline std::vector<float> reduce_reference(const std::vector<float>& in, std::uint32_t block) {
  std::vector<float> out((in.size() + block - 1) / block, 0.0f);
  for (std::size_t i = 0; i < in.size(); ++i) out[i / block] += in[i];
  return out;
}

/// C (m x n) = A (m x k) * B (k x n), row-major, 16x16 tiles through shared memory.
inline Kernel matmul_cooperative() {
  return cooperative("matmul_coop",
                     [](ThreadCtx& t, const float* a, const float* b, float* c, int m, int n, int k) {
                       float* as = t.shared<float>(kTile * kTile);
                       float* bs = t.shared<float>(kTile * kTile);
                       const int tx = static_cast<int>(t.idx.x), ty = static_cast<int>(t.idx.y);
                       const int row = static_cast<int>(t.global_y()), col = static_cast<int>(t.global_x());
                       float acc = 0.0f;
                       for (int k0 = 0; k0 < k; k0 += kTile) {
                         as[ty * kTile + tx] = row < m && k0 + tx < k ? a[row * k + k0 + tx] : 0.0f;
                         bs[ty * kTile + tx] = k0 + ty < k && col < n ? b[(k0 + ty) * n + col] : 0.0f;
                         t.sync();
                         for (int kk = 0; kk < kTile; ++kk) acc += as[ty * kTile + kk] * bs[kk * kTile + tx];
                         t.sync();
                       }
                       if (row < m && col < n) c[row * n + col] = acc;
                     });
}

inline Kernel matmul_per_block() {
  return per_block(
      "matmul_phases", [](Block& blk, const float* a, const float* b, float* c, int m, int n, int k) {
        float* as = blk.shared<float>(kTile * kTile);
        float* bs = blk.shared<float>(kTile * kTile);
        auto acc = blk.local<float>();
        for (int k0 = 0; k0 < k; k0 += kTile) {
          blk.threads([&](const Thread& t) {
            const int tx = static_cast<int>(t.idx.x), ty = static_cast<int>(t.idx.y);
            const int row = static_cast<int>(t.global_y()), col = static_cast<int>(t.global_x());
            as[ty * kTile + tx] = row < m && k0 + tx < k ? a[row * k + k0 + tx] : 0.0f;
            bs[ty * kTile + tx] = k0 + ty < k && col < n ? b[(k0 + ty) * n + col] : 0.0f;
          });
          blk.threads([&](const Thread& t) {
            float sum = acc[t.rank()];
            for (int kk = 0; kk < kTile; ++kk)
              sum += as[static_cast<int>(t.idx.y) * kTile + kk] * bs[kk * kTile + static_cast<int>(t.idx.x)];
            acc[t.rank()] = sum;
          });
        }
        blk.threads([&](const Thread& t) {
          const int row = static_cast<int>(t.global_y()), col = static_cast<int>(t.global_x());
          if (row < m && col < n) c[row * n + col] = acc[t.rank()];
        });
      });
}

inline Launch matmul_launch(int m, int n) {
  return Launch{Dim3(static_cast<std::uint32_t>((n + kTile - 1) / kTile),
                     static_cast<std::uint32_t>((m + kTile - 1) / kTile)),
                Dim3(kTile, kTile), 0};
}

inline std::vector<float> matmul_reference(const std::vector<float>& a, const std::vector<float>& b, int m,
                                           int n, int k) {
  std::vector<float> c(static_cast<std::size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int kk = 0; kk < k; ++kk) sum += double{a[i * k + kk]} * b[kk * n + j];
      c[i * n + j] = static_cast<float>(sum);
    }
  return c;
}

/// Inclusive prefix sum of each block's slice (Hillis-Steele: log2(blockDim) barrier rounds).
inline Kernel scan_cooperative() {
  return cooperative("scan_coop", [](ThreadCtx& t, const float* in, float* out, std::uint64_t n) {
    float* s = t.shared<float>(t.block_dim.x);
    const std::uint64_t i = t.global_x();
    s[t.idx.x] = i < n ? in[i] : 0.0f;
    t.sync();
    for (std::uint32_t offset = 1; offset < t.block_dim.x; offset *= 2) {
      const float add = t.idx.x >= offset ? s[t.idx.x - offset] : 0.0f;
      t.sync();
      s[t.idx.x] += add;
      t.sync();
    }
    if (i < n) out[i] = s[t.idx.x];
  });
}

inline std::vector<float> scan_reference(const std::vector<float>& in, std::uint32_t block) {
  std::vector<float> out(in.size());
  float sum = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (i % block == 0) sum = 0;
    sum += in[i];
    out[i] = sum;
  }
  return out;
}

}  // namespace hdsm::exec::testing
