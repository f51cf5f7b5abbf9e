// Per-block page protection of one region, within a budget of kernel mappings (VMAs).
//
// Every maximal run of blocks with one protection is one VMA, and Linux caps the VMAs of a process
// (vm.max_map_count). When the desired protections would need more runs than the budget allows, or
// mprotect runs out of mappings (ENOMEM), the region degrades: groups of 2^k aligned blocks get the
// most restrictive desired protection of their members, doubling k until the runs fit. Accesses may
// then fault more often (spuriously) but never less; refine() lifts single blocks back.
#pragma once

#include <hdsm/export.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm::os {

/// Ordered from most to least restrictive.
enum class Protection : std::uint8_t { none, read, read_write };

const char* to_string(Protection p) noexcept;

struct ProtectionStats {
  std::uint64_t mprotect_calls = 0;
  std::uint64_t degradations = 0;         // doublings of the granularity
  std::uint64_t enomem_failures = 0;      // mprotect calls refused for lack of mappings
  std::uint64_t refinements = 0;          // refine() calls that applied a block's exact protection
  std::uint64_t refused_refinements = 0;  // refine() calls the budget or the kernel refused
  std::uint64_t regains = 0;              // returns of a degraded map to granularity 1
  std::uint64_t closed_for_room = 0;      // runs try_set_making_room() lowered to a neighbour's protection
};

/// The process's kernel mappings: vm.max_map_count's limit (65530, the kernel's default, when the file
/// cannot be read) and the mappings in use (the lines of /proc/self/maps; half the limit when unknown).
struct MappingCount {
  std::size_t limit = 65530;
  std::size_t used = 0;
  bool used_known = false;
};
MappingCount count_mappings(const char* max_map_count_file = "/proc/sys/vm/max_map_count",
                            const char* maps_file = "/proc/self/maps") noexcept;

/// What an mprotect refused with ENOMEM appends to its error's object: the mapping count and limit,
/// and what to do.
std::string out_of_mappings_note();
/// What out_of_mappings_note() advises, for a message made without allocating.
inline constexpr const char* kOutOfMappingsAdvice =
    "each run of blocks with one protection is one, and tens of thousands of small objects need as many; use "
    "fewer, larger objects, or raise vm.max_map_count";

/// Runs one region may use by default: half of what vm.max_map_count leaves after the mappings the
/// process has now and a safety margin. A file that cannot be read counts as the kernel default
/// limit (65530) or as half of the limit in use.
std::size_t default_run_budget(const char* max_map_count_file = "/proc/sys/vm/max_map_count",
                               const char* maps_file = "/proc/self/maps");

/// Not thread-safe: callers serialise set() and refine(); the const queries may run in a fault
/// handler of the thread that owns the map.
class ProtectionMap {
 public:
  /// Manages [base, base + blocks * block_bytes) of a mapping the caller owns and keeps mapped while
  /// this object lives. base must be page aligned and block_bytes a multiple of the page size.
  /// `what` names the region in error messages. The whole region gets `initial` at once.
  ProtectionMap(void* base, std::size_t blocks, std::size_t block_bytes, std::string what,
                Protection initial = Protection::read_write, std::size_t run_budget = default_run_budget());
  ProtectionMap(const ProtectionMap&) = delete;
  ProtectionMap& operator=(const ProtectionMap&) = delete;

  /// Records `p` as the desired protection of [first_block, first_block + count) and applies it,
  /// coarsened to the current granularity. Degrades rather than exceeding the budget.
  void set(std::size_t first_block, std::size_t count, Protection p);
  /// Applies the block's exact desired protection if the budget and the kernel allow it.
  bool refine(std::size_t block);
  /// set() for a fault handler: neither allocates nor throws. Applies `p` to the blocks and returns
  /// true when that needs no degradation and mprotect succeeds; otherwise changes nothing and returns
  /// false (the caller then takes the general path). One block gets `p` exactly at any granularity
  /// (as refine() gives it its desired protection); several only at granularity 1.
  bool try_set(std::size_t first_block, std::size_t count, Protection p) noexcept;
  /// try_set() of one block, for a fault handler that reopens blocks whose effective protection is
  /// below their desired one: where the budget has no room for the block, other runs are first
  /// lowered to a neighbour's protection (each lowering merges a run with a neighbour; a clock hand
  /// goes round the region, so a sweep lowers each run at most once). Their blocks fault again when
  /// next accessed. False only when no run is left to lower or mprotect fails.
  bool try_set_making_room(std::size_t block, Protection p) noexcept;
  /// After a batch of set() calls: a degraded map goes back to one block per group when the desired
  /// protections fit in three quarters of the budget (the rest is room for the single blocks that
  /// faults open before the next batch, so the map does not swing between granularities at every
  /// batch). Without it, one batch that outgrew the budget would leave every later one coarse, its
  /// accesses faulting spuriously for good. When the kernel refuses a return (the rest of the
  /// process holds mappings the budget counted on), the next 1, 2, 4, ... 1024 calls do not try:
  /// each try costs an mprotect a run, and the coarsening after it as many again. Returns whether
  /// the map is at granularity 1.
  bool regain_granularity();
  /// Tests: the next `count` mprotect calls fail with ENOMEM, as when the process is out of mappings
  /// (the fault path's too).
  void refuse_mprotects(std::size_t count) { refusals_ = count; }
  /// effective() without the range check, for a fault handler (`block` < blocks()).
  Protection effective_unchecked(std::size_t block) const noexcept { return effective_[block]; }
  /// desired() likewise.
  Protection desired_unchecked(std::size_t block) const noexcept { return min_[0][block]; }

  Protection desired(std::size_t block) const;
  /// The protection really applied, never less restrictive than desired().
  Protection effective(std::size_t block) const;
  /// Whether the desired protection permits the access: a fault it permits is spurious.
  bool allows(std::size_t block, bool write) const;

  std::size_t granularity_blocks() const { return std::size_t{1} << shift_; }
  /// Maximal runs of equal effective protection, the VMAs this region contributes when the kernel
  /// merges equal neighbours (see protection.cpp).
  std::size_t runs() const { return runs_; }
  std::size_t run_budget() const { return budget_; }
  std::size_t blocks() const { return blocks_; }
  std::size_t block_bytes() const { return block_bytes_; }
  std::byte* base() const { return base_; }
  const ProtectionStats& stats() const { return stats_; }

 private:
  void check_block(std::size_t block, const char* call) const;
  /// try_set_making_room's step: lowers the first run from the clock hand on that does not hold
  /// `keep` and has a neighbour of lower protection; false when a sweep finds none.
  bool lower_a_run(std::size_t keep) noexcept;
  /// The end of the run of equal effective protections that holds `s`'s from `s` on.
  std::size_t run_end(std::size_t s) const noexcept;
  /// Whether refuse_mprotects() refuses this call (and counts it).
  bool refused_now() noexcept {
    if (refusals_ == 0) return false;
    --refusals_;
    return true;
  }
  void record_desired(std::size_t first, std::size_t end, Protection p);
  /// Fills min_[1..] from min_[0] (no allocation), once, before the first coarsening needs them.
  void build_levels();
  Protection group_target(std::size_t block) const { return min_[shift_][block >> shift_]; }
  /// Issues the mprotect calls that bring [first, end) to its group targets; false on ENOMEM.
  bool apply_targets(std::size_t first, std::size_t end, bool force);
  bool protect(std::size_t first, std::size_t end, Protection p);
  /// Doubles the granularity until the runs fit the budget and the kernel accepts them. `force`
  /// reapplies every block because a failed mprotect left the kernel's state unknown.
  void coarsen(bool force);
  std::string describe(std::size_t first, std::size_t end) const;

  std::byte* base_;
  std::size_t blocks_;
  std::size_t block_bytes_;
  std::string what_;
  std::size_t budget_;
  unsigned shift_ = 0;
  std::size_t runs_ = 1;
  std::size_t desired_runs_ = 1;  // runs of min_[0]: what granularity 1 would need
  std::size_t clock_ = 0;         // lower_a_run's hand
  /// min_[0] holds the desired protections; min_[j][i] the most restrictive of blocks
  /// [i << j, (i + 1) << j), so a group's target is one lookup at every granularity. The levels
  /// above 0 are filled on the first coarsening and kept current from then on: until then no lookup
  /// needs them, and a fault at granularity 1 updates one byte instead of one per level.
  std::vector<std::vector<Protection>> min_;
  bool levels_built_ = false;
  std::vector<Protection> effective_;
  ProtectionStats stats_;
  std::uint32_t regain_backoff_ = 0;  // calls the last refused return made regain_granularity skip
  std::uint32_t regain_wait_ = 0;     // of those, the ones left
  std::size_t refusals_ = 0;          // refuse_mprotects()
};

}  // namespace hdsm::os

HDSM_VISIBLE_END
