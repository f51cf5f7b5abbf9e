// Run accounting relies on the kernel merging a changed range with neighbours of equal protection,
// so one mprotect per changed run is enough: widening it over neighbours that already have the
// protection yields the same VMAs with more page-table work. mprotect merges the pieces of one
// shared file mapping (the memfd arena views the shared space and the cluster protect), but not
// always those of a private anonymous one: once split pieces have faulted pages in, each has an
// anon_vma of its own and they stay apart, so a map over such memory may count fewer runs than the
// kernel has mappings. Keep it on shared mappings.
#include "os/protection.hpp"
#include "os/fault_path.hpp"

#include "os/mapping.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>

namespace hdsm::os {

namespace {

int prot_flags(Protection p) {
  switch (p) {
    case Protection::none:
      return PROT_NONE;
    case Protection::read:
      return PROT_READ;
    case Protection::read_write:
      return PROT_READ | PROT_WRITE;
  }
  return PROT_NONE;
}

}  // namespace

const char* to_string(Protection p) noexcept {
  switch (p) {
    case Protection::none:
      return "none";
    case Protection::read:
      return "read";
    case Protection::read_write:
      return "read_write";
  }
  return "unknown";
}

namespace {

// The lines of a file, read without allocating; nothing where it cannot be opened.
std::optional<std::size_t> count_lines(const char* path) noexcept {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::size_t lines = 0;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;)
    lines += static_cast<std::size_t>(std::count(buffer, buffer + n, '\n'));
  ::close(fd);
  return lines;
}

// The number a file starts with, read without allocating; 0 where it cannot be read.
std::size_t read_number(const char* path) noexcept {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buffer[32] = {};
  const ssize_t n = ::read(fd, buffer, sizeof buffer - 1);
  ::close(fd);
  std::size_t value = 0;
  for (ssize_t i = 0; i < n && buffer[i] >= '0' && buffer[i] <= '9'; ++i)
    value = value * 10 + static_cast<std::size_t>(buffer[i] - '0');
  return value;
}

}  // namespace

// Without allocating: a fault resolved at the mapping limit counts them, and malloc's own mmap
// fails there.
MappingCount count_mappings(const char* max_map_count_file, const char* maps_file) noexcept {
  MappingCount c;
  if (const std::size_t limit = read_number(max_map_count_file); limit > 0) c.limit = limit;
  if (const std::optional<std::size_t> lines = count_lines(maps_file)) {
    c.used = *lines;
    c.used_known = true;
  } else {
    c.used = c.limit / 2;
  }
  return c;
}

std::string out_of_mappings_note() {
  const MappingCount c = count_mappings();
  return fmt::format("; the process is out of kernel mappings ({} in use{}, vm.max_map_count {}): {}",
                     c.used_known ? fmt::to_string(c.used) : "unknown",
                     c.used_known ? "" : " (/proc/self/maps unreadable)", c.limit, kOutOfMappingsAdvice);
}

std::size_t default_run_budget(const char* max_map_count_file, const char* maps_file) {
  const MappingCount c = count_mappings(max_map_count_file, maps_file);
  const std::size_t limit = c.limit, used = c.used;
  // Other regions, the allocator, thread stacks and libraries need mappings too.
  const std::size_t margin = 1024 + limit / 16;
  if (used + margin >= limit) return 1;
  return std::max<std::size_t>((limit - used - margin) / 2, 1);
}

ProtectionMap::ProtectionMap(void* base, std::size_t blocks, std::size_t block_bytes, std::string what,
                             Protection initial, std::size_t run_budget)
    : base_(static_cast<std::byte*>(base)),
      blocks_(blocks),
      block_bytes_(block_bytes),
      what_(std::move(what)),
      budget_(run_budget) {
  const std::size_t page = page_size();
  if (base == nullptr || reinterpret_cast<std::uintptr_t>(base) % page != 0)
    throw InvalidArgument(fmt::format("protection map of {}: base {} is not aligned to the page size ({})",
                                      what_, base, format_bytes(page)));
  if (block_bytes == 0 || block_bytes % page != 0)
    throw InvalidArgument(
        fmt::format("protection map of {}: block size {} is not a multiple of the page size ({})", what_,
                    format_bytes(block_bytes), format_bytes(page)));
  if (blocks == 0 || blocks > SIZE_MAX / block_bytes)
    throw InvalidArgument(fmt::format("protection map of {}: {} blocks of {} do not form a region", what_,
                                      blocks, format_bytes(block_bytes)));
  if (run_budget == 0)
    throw InvalidArgument(fmt::format("protection map of {}: the run budget must be at least 1", what_));
  // Every level is allocated now, though filled only on the first coarsening: that happens when the
  // process has run out of kernel mappings, when an allocator that needs a new mapping would fail.
  min_.emplace_back(blocks, initial);
  for (std::size_t size = blocks; size > 1;) {
    size = (size + 1) / 2;
    min_.emplace_back(size, initial);
  }
  effective_.assign(blocks, initial);
  if (!protect(0, blocks, initial))
    throw SystemError("mprotect", describe(0, blocks) + out_of_mappings_note(), ENOMEM);
}

void ProtectionMap::check_block(std::size_t block, const char* call) const {
  if (block >= blocks_)
    throw InvalidArgument(
        fmt::format("{}: block {} is past the end of {} ({} blocks)", call, block, what_, blocks_));
}

Protection ProtectionMap::desired(std::size_t block) const {
  check_block(block, "ProtectionMap::desired");
  return min_[0][block];
}

Protection ProtectionMap::effective(std::size_t block) const {
  check_block(block, "ProtectionMap::effective");
  return effective_[block];
}

bool ProtectionMap::allows(std::size_t block, bool write) const {
  check_block(block, "ProtectionMap::allows");
  return min_[0][block] >= (write ? Protection::read_write : Protection::read);
}

void ProtectionMap::set(std::size_t first_block, std::size_t count, Protection p) {
  if (first_block > blocks_ || count > blocks_ - first_block)
    throw InvalidArgument(
        fmt::format("ProtectionMap::set: blocks [{}, {}) are past the end of {} ({} blocks)", first_block,
                    first_block + count, what_, blocks_));
  if (count == 0) return;
  const std::size_t end = first_block + count;
  record_desired(first_block, end, p);

  // Whole groups around the range change; only boundaries from span_first to span_end can move.
  const std::size_t span_first = first_block >> shift_ << shift_;
  const std::size_t span_end = std::min(blocks_, (((end - 1) >> shift_) + 1) << shift_);
  const auto boundaries = [&](auto value) {
    std::size_t n = 0;
    for (std::size_t i = std::max<std::size_t>(span_first, 1); i <= std::min(span_end, blocks_ - 1); ++i)
      n += value(i - 1) != value(i);
    return n;
  };
  const std::size_t runs =
      runs_ - boundaries([&](std::size_t i) { return effective_[i]; }) + boundaries([&](std::size_t i) {
        return i >= span_first && i < span_end ? group_target(i) : effective_[i];
      });
  if (runs > budget_) return coarsen(false);
  if (!apply_targets(span_first, span_end, false)) return coarsen(true);
  runs_ = runs;
}

namespace {

// The fault handler sets one block at a time: a store, not a call to memset (whose vector stores in
// a signal handler cost more than the whole update).
void fill_blocks(std::vector<Protection>& v, std::size_t first, std::size_t end, Protection p) {
  if (end - first == 1)
    v[first] = p;
  else
    std::fill(v.begin() + static_cast<std::ptrdiff_t>(first), v.begin() + static_cast<std::ptrdiff_t>(end),
              p);
}

}  // namespace

HDSM_FAULT_PATH bool ProtectionMap::try_set(std::size_t first_block, std::size_t count,
                                            Protection p) noexcept {
  if (count == 0 || first_block > blocks_ || count > blocks_ - first_block) return false;
  const std::size_t end = first_block + count;
  if (count == 1) {
    // A fault's one block: only the boundaries with its two neighbours can change. At any
    // granularity: after a degradation the block gets its own protection, as refine() gives it, so
    // a fault handler can still open pages one at a time while the budget allows.
    const Protection old = effective_[first_block];
    std::size_t runs = runs_;
    for (const std::size_t n : {first_block - 1, end}) {
      if (n >= blocks_) continue;  // first_block - 1 wraps past the end for block 0
      runs = runs - (effective_[n] != old) + (effective_[n] != p);
    }
    if (runs > budget_) return false;
    // Recorded before the mprotect, whose TLB flush makes every page touched after it cost a walk.
    const Protection old_desired = min_[0][first_block];
    const std::size_t old_runs = runs_;
    record_desired(first_block, end, p);
    effective_[first_block] = p;
    runs_ = runs;
    ++stats_.mprotect_calls;
    if (refused_now() || ::mprotect(base_ + first_block * block_bytes_, block_bytes_, prot_flags(p)) != 0) {
      record_desired(first_block, end, old_desired);
      effective_[first_block] = old;
      runs_ = old_runs;
      return false;
    }
    return true;
  }
  if (shift_ != 0) return false;
  // At granularity 1 a block's effective protection is its desired one: boundaries move only at the
  // range's edges and inside it.
  const auto before = [&](std::size_t i) { return effective_[i]; };
  const auto after = [&](std::size_t i) { return i >= first_block && i < end ? p : effective_[i]; };
  std::size_t removed = 0, added = 0;
  for (std::size_t i = std::max<std::size_t>(first_block, 1); i <= std::min(end, blocks_ - 1); ++i) {
    removed += before(i - 1) != before(i);
    added += after(i - 1) != after(i);
  }
  const std::size_t runs = runs_ - removed + added;
  if (runs > budget_) return false;
  if (refused_now() ||
      ::mprotect(base_ + first_block * block_bytes_, count * block_bytes_, prot_flags(p)) != 0)
    return false;
  ++stats_.mprotect_calls;
  record_desired(first_block, end, p);  // fills arrays: no allocation
  fill_blocks(effective_, first_block, end, p);
  runs_ = runs;
  return true;
}

HDSM_FAULT_PATH bool ProtectionMap::try_set_making_room(std::size_t block, Protection p) noexcept {
  if (try_set(block, 1, p)) return true;
  if (block >= blocks_) return false;
  // Each lowering removes at least one run, so this ends within as many steps as there are runs.
  for (std::size_t steps = runs_; steps > 0 && lower_a_run(block); --steps)
    if (try_set(block, 1, p)) return true;
  return false;
}

static_assert(sizeof(Protection) == 1, "run_end reads eight protections as one word");

// Eight blocks at a time: the hand crosses the unused end of a large region (two million blocks of
// 8 GiB) in a fault handler.
HDSM_FAULT_PATH std::size_t ProtectionMap::run_end(std::size_t s) const noexcept {
  const auto p = static_cast<std::uint8_t>(effective_[s]);
  const std::uint64_t all = p * 0x0101010101010101ull;
  std::size_t e = s + 1;
  for (; e + 8 <= blocks_; e += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, effective_.data() + e, 8);
    if (word != all) break;
  }
  while (e < blocks_ && effective_[e] == effective_[s]) ++e;
  return e;
}

HDSM_FAULT_PATH bool ProtectionMap::lower_a_run(std::size_t keep) noexcept {
  std::size_t s = clock_ < blocks_ ? clock_ : 0;
  while (s > 0 && s < blocks_ && effective_[s - 1] == effective_[s]) ++s;  // to the next run's start
  if (s == blocks_) s = 0;
  for (std::size_t scanned = 0; scanned <= blocks_;) {
    const std::size_t e = run_end(s);
    scanned += e - s;
    const Protection own = effective_[s];
    // The higher of the neighbours' protections below its own: the run merges with that neighbour
    // (with both where they are equal).
    bool lower = false;
    Protection to = Protection::none;
    for (const std::size_t n : {s - 1, e}) {
      if (n >= blocks_ || effective_[n] >= own) continue;  // s - 1 wraps past the end for s = 0
      to = lower ? std::max(to, effective_[n]) : effective_[n];
      lower = true;
    }
    if (lower && (keep < s || keep >= e)) {
      ++stats_.mprotect_calls;
      if (refused_now() || ::mprotect(base_ + s * block_bytes_, (e - s) * block_bytes_, prot_flags(to)) != 0)
        return false;
      fill_blocks(effective_, s, e, to);
      runs_ -=
          std::size_t{s > 0 && effective_[s - 1] == to} + std::size_t{e < blocks_ && effective_[e] == to};
      ++stats_.closed_for_room;
      clock_ = e;
      return true;
    }
    s = e == blocks_ ? 0 : e;
  }
  return false;
}

bool ProtectionMap::refine(std::size_t block) {
  check_block(block, "ProtectionMap::refine");
  const Protection want = min_[0][block];
  if (effective_[block] == want) return true;
  const auto boundaries = [&](Protection p) {
    return std::size_t{block > 0 && effective_[block - 1] != p} +
           std::size_t{block + 1 < blocks_ && effective_[block + 1] != p};
  };
  const std::size_t runs = runs_ - boundaries(effective_[block]) + boundaries(want);
  // A single block lies inside one VMA, so a refused mprotect leaves it unchanged.
  if (runs > budget_ || !protect(block, block + 1, want)) {
    ++stats_.refused_refinements;
    return false;
  }
  runs_ = runs;
  ++stats_.refinements;
  return true;
}

HDSM_FAULT_PATH void ProtectionMap::record_desired(std::size_t first, std::size_t end, Protection p) {
  // Only the boundaries at the range's edges and inside it can change.
  std::vector<Protection>& desired = min_[0];
  const std::size_t lo = std::max<std::size_t>(first, 1), hi = std::min(end, blocks_ - 1);
  std::size_t removed = 0;
  for (std::size_t i = lo; i <= hi; ++i) removed += desired[i - 1] != desired[i];
  fill_blocks(desired, first, end, p);
  const std::size_t added =
      std::size_t{first > 0 && desired[first - 1] != p} + std::size_t{end < blocks_ && desired[end] != p};
  desired_runs_ = desired_runs_ - removed + added;
  if (!levels_built_) return;
  for (std::size_t level = 1; level < min_.size(); ++level) {
    first >>= 1;
    end = (end + 1) >> 1;
    const auto& below = min_[level - 1];
    for (std::size_t i = first; i < end; ++i)
      min_[level][i] = 2 * i + 1 < below.size() ? std::min(below[2 * i], below[2 * i + 1]) : below[2 * i];
  }
}

bool ProtectionMap::regain_granularity() {
  if (shift_ == 0) return true;
  if (regain_wait_ > 0) {  // counted down at every batch, whether the desired runs fit or not
    --regain_wait_;
    return false;
  }
  if (desired_runs_ > budget_ - budget_ / 4) return false;
  shift_ = 0;  // group_target() is now each block's desired protection
  if (!apply_targets(0, blocks_, false)) {
    coarsen(true);  // the kernel ran out of mappings part-way
    regain_backoff_ = std::min<std::uint32_t>(regain_backoff_ == 0 ? 1 : 2 * regain_backoff_, 1024);
    regain_wait_ = regain_backoff_;
    return false;
  }
  regain_backoff_ = 0;
  runs_ = desired_runs_;
  ++stats_.regains;
  return true;
}

bool ProtectionMap::apply_targets(std::size_t first, std::size_t end, bool force) {
  for (std::size_t i = first; i < end;) {
    const Protection p = group_target(i);
    std::size_t j = i + 1;
    while (j < end && group_target(j) == p) ++j;
    std::size_t lo = i, hi = j;
    if (!force) {
      while (lo < hi && effective_[lo] == p) ++lo;
      while (hi > lo && effective_[hi - 1] == p) --hi;
    }
    if (lo < hi && !protect(lo, hi, p)) return false;
    i = j;
  }
  return true;
}

bool ProtectionMap::protect(std::size_t first, std::size_t end, Protection p) {
  ++stats_.mprotect_calls;
  const bool refused = refusals_ > 0;
  if (refused) --refusals_;
  if (refused || ::mprotect(base_ + first * block_bytes_, (end - first) * block_bytes_, prot_flags(p)) != 0) {
    const int err = refused ? ENOMEM : errno;
    if (err != ENOMEM) throw SystemError("mprotect", describe(first, end), err);
    ++stats_.enomem_failures;
    return false;
  }
  std::fill(effective_.begin() + static_cast<std::ptrdiff_t>(first),
            effective_.begin() + static_cast<std::ptrdiff_t>(end), p);
  return true;
}

void ProtectionMap::build_levels() {
  if (levels_built_) return;
  for (std::size_t level = 1; level < min_.size(); ++level) {
    const auto& below = min_[level - 1];
    for (std::size_t i = 0; i < min_[level].size(); ++i)
      min_[level][i] = 2 * i + 1 < below.size() ? std::min(below[2 * i], below[2 * i + 1]) : below[2 * i];
  }
  levels_built_ = true;
}

void ProtectionMap::coarsen(bool force) {
  build_levels();
  for (;;) {
    // One group covers the region: nothing coarser exists, the kernel has no mapping to spare.
    if (shift_ + 1 >= min_.size())
      throw SystemError("mprotect", describe(0, blocks_) + out_of_mappings_note(), ENOMEM);
    ++shift_;
    ++stats_.degradations;
    const auto& groups = min_[shift_];
    std::size_t runs = 1;
    for (std::size_t g = 1; g < groups.size(); ++g) runs += groups[g] != groups[g - 1];
    if (runs > budget_) continue;
    if (apply_targets(0, blocks_, force)) {
      runs_ = runs;
      return;
    }
    force = true;
  }
}

std::string ProtectionMap::describe(std::size_t first, std::size_t end) const {
  return fmt::format("blocks [{}, {}) of {} ({} blocks of {} at {})", first, end, what_, blocks_,
                     format_bytes(block_bytes_), static_cast<const void*>(base_));
}

}  // namespace hdsm::os
