// The randomized model test of the cluster DSM, shared by the in-process ranks (tests/cluster) and
// the MPI ranks (tests/mpi): random kernels whose blocks write random disjoint ranges of an array
// (so pages get one writer, several writers or none), reading random elements of another array, with
// host copies in between. Every rank compares global memory with the same kernels run on plain
// memory by one executor, with no DSM, after every step.
#pragma once

#include "support/model_run.hpp"

#include <hdsm/cluster.hpp>
#include <hdsm/kernel.hpp>

#include "exec/executor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace hdsm::test::cluster_model {

struct Range {
  std::uint32_t begin, end;
};

inline std::int32_t mix(std::int32_t value, std::uint32_t salt, std::uint32_t i) {
  std::uint32_t x = static_cast<std::uint32_t>(value) * 2654435761u ^ (salt * 40503u + i);
  x ^= x >> 15;
  return static_cast<std::int32_t>(x * 2246822519u);
}

/// dst[i] = mix(src[(i * 31 + salt) % n], salt, i) for every i of the ranges of the thread's block
/// (block b owns ranges[first[b] .. first[b + 1])).
inline const auto& step_kernel() {
  static const auto k =
      per_thread("cluster_model_step",
                 [](const Thread& t, const std::int32_t* src, std::int32_t* dst, const Range* ranges,
                    const std::uint32_t* first, std::uint32_t n, std::uint32_t salt) {
                   const std::uint32_t b = t.block.x;
                   for (std::uint32_t r = first[b]; r < first[b + 1]; ++r)
                     for (std::uint32_t i = ranges[r].begin + t.idx.x; i < ranges[r].end; i += t.block_dim.x)
                       dst[i] = mix(src[(static_cast<std::uint64_t>(i) * 31 + salt) % n], salt, i);
                 });
  return k;
}

/// One step of the program, the same on every rank (drawn from the shared seed).
struct Step {
  bool host_copy = false;  // rank 0's host data into [copy_begin, copy_end) of `dst` instead of a kernel
  std::uint32_t copy_begin = 0, copy_end = 0;
  std::uint32_t blocks = 1, threads = 1, salt = 0;
  std::vector<Range> ranges;         // sorted by block
  std::vector<std::uint32_t> first;  // blocks + 1
  std::string describe() const {
    if (host_copy) return fmt::format("host copy into [{}, {})", copy_begin, copy_end);
    return fmt::format("kernel salt {}: {} blocks x {} threads, {} ranges", salt, blocks, threads,
                       ranges.size());
  }
};

inline Step draw(std::mt19937_64& rng, std::uint32_t n, std::uint32_t page_ints) {
  Step s;
  const auto uniform = [&](std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
  };
  if (uniform(0, 5) == 0) {
    s.host_copy = true;
    s.copy_begin = uniform(0, n - 1);
    s.copy_end = uniform(s.copy_begin + 1, std::min(n, s.copy_begin + 4 * page_ints));
    return s;
  }
  s.blocks = uniform(1, 24);
  s.threads = uniform(1, 8) * 8;
  s.salt = uniform(0, 1u << 30);
  // A random partition of [0, n) into pieces of up to 3/4 of a page; each piece goes to a random
  // block or stays unwritten. Dense or sparse steps (the share written) make lazy boundaries too.
  const std::uint32_t keep = uniform(1, 4);
  std::vector<std::pair<std::uint32_t, Range>> owned;
  for (std::uint32_t at = 0; at < n;) {
    const std::uint32_t len = std::min(n - at, uniform(1, page_ints * 3 / 4));
    if (uniform(1, 4) <= keep) owned.push_back({uniform(0, s.blocks - 1), Range{at, at + len}});
    at += len;
  }
  std::stable_sort(owned.begin(), owned.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  s.first.assign(s.blocks + 1, 0);
  for (const auto& [block, range] : owned) {
    s.ranges.push_back(range);
    ++s.first[block + 1];
  }
  for (std::uint32_t b = 0; b < s.blocks; ++b) s.first[b + 1] += s.first[b];
  if (s.ranges.empty()) s.ranges.push_back(Range{0, 0});  // a valid pointer for the kernel
  return s;
}

/// Runs the program on the calling rank's cluster node; returns "" or the first mismatch. With
/// `exact_modified`, also a boundary that counts more pages modified than the kernel's ranges cover.
inline std::string run(std::uint64_t seed, int steps, std::uint32_t n, std::uint32_t page_ints,
                       bool exact_modified = true) {
  namespace cl = hdsm::cluster;
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> model[2] = {std::vector<std::int32_t>(n), std::vector<std::int32_t>(n)};
  for (std::uint32_t i = 0; i < n; ++i) model[0][i] = static_cast<std::int32_t>(i * 7 + 1);
  std::int32_t* global[2] = {cl::alloc<std::int32_t>(n), cl::alloc<std::int32_t>(n)};
  // Array 0 is copied in (shared pages); array 1 starts as allocated, zero and untouched, so its
  // pages start private to the rank that first writes them.
  cl::memcpy(global[0], model[0].data(), n * sizeof(std::int32_t));
  exec::Executor plain(exec::ExecutorOptions{1});
  std::vector<std::int32_t> host(n);
  ModelRun trace(seed, steps);
  int src = 0;
  for (int k = 0; k < steps; ++k) {
    const Step s = draw(rng, n, page_ints);
    trace.log(fmt::format("step {}: {}", k, s.describe()));
    const int dst = 1 - src;
    if (s.host_copy) {
      std::vector<std::int32_t> data(s.copy_end - s.copy_begin);
      for (std::uint32_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::int32_t>(rng() & 0x7fffffff);
      std::copy(data.begin(), data.end(), model[dst].begin() + s.copy_begin);
      // Only rank 0's data counts: the other ranks pass garbage.
      if (cl::rank() != 0) std::fill(data.begin(), data.end(), -1);
      cl::memcpy(global[dst] + s.copy_begin, data.data(), data.size() * sizeof(std::int32_t));
    } else {
      const cl::Constant<Range> ranges(s.ranges.data(), s.ranges.size());
      const cl::Constant<std::uint32_t> first(s.first.data(), s.first.size());
      const Launch shape{Dim3{s.blocks}, Dim3{s.threads}, 0};
      const std::uint64_t modified_before = cl::stats().pages_modified;
      cl::launch(step_kernel(), shape, global[src], global[dst], ranges.data(), first.data(), n, s.salt);
      // No page counts as modified that no block wrote (a page a rank only read, say): the pages of
      // the destination array the ranges cover bound the boundary's count.
      std::vector<bool> covered((n + page_ints - 1) / page_ints, false);
      for (const Range& r : s.ranges)
        for (std::uint32_t p = r.begin / page_ints; r.begin < r.end && p <= (r.end - 1) / page_ints; ++p)
          covered[p] = true;
      const auto most = static_cast<std::uint64_t>(std::count(covered.begin(), covered.end(), true));
      const std::uint64_t modified = cl::stats().pages_modified - modified_before;
      if (exact_modified && modified > most)
        return fmt::format("rank {}: the boundary counts {} pages modified, the ranges cover {}; {}",
                           cl::rank(), modified, most, trace.where());
      const HostArgs<const std::int32_t*, std::int32_t*, const Range*, const std::uint32_t*, std::uint32_t,
                     std::uint32_t>
          args(model[src].data(), model[dst].data(), s.ranges.data(), s.first.data(), n, s.salt);
      step_kernel().host(plain, shape, args.pack());
      src = dst;
    }
    // Every rank reads global memory directly at times (pages invalidated at a lazy boundary are
    // fetched from rank 0 on the fault), and copies it out after every step.
    for (int a = 0; a < 2; ++a) {
      if (k % 3 == 0) {
        for (std::uint32_t i = 0; i < n; ++i)
          if (global[a][i] != model[a][i])
            return fmt::format("rank {} reads array {}[{}] = {}, the model has {}; {}", cl::rank(), a, i,
                               global[a][i], model[a][i], trace.where());
      }
      std::fill(host.begin(), host.end(), 0);
      cl::memcpy(host.data(), global[a], n * sizeof(std::int32_t));
      for (std::uint32_t i = 0; i < n; ++i)
        if (host[i] != model[a][i])
          return fmt::format("rank {}: array {}[{}] = {}, the model has {}; {}", cl::rank(), a, i, host[i],
                             model[a][i], trace.where());
    }
  }
  cl::free(global[1]);
  cl::free(global[0]);
  return "";
}

}  // namespace hdsm::test::cluster_model
