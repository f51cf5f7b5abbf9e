// The address space of shared objects (seed 003 §4.3, Fig. 6): one segment per hosting location,
// each `segment_bytes` long (a power of two) and aligned to its size, so "is this pointer shared",
// "which segment" and "which offset" are a subtraction, a compare and a shift. Each segment is one
// memfd mapped twice: the user view (the pointers programs get; its protections drive the
// coherence protocols) and the shadow view (always read-write; the runtime's own copies use it, so
// it never has to lift a protection of the user view).
//
// Released memory is kept, up to `keep_bytes` in all, for the next objects placed there, as malloc
// keeps freed heap memory: a new page of a memfd costs a page fault in each view that touches it,
// and its zeroing, which for a program that frees and allocates objects of the same size in a
// loop is more than zeroing a kept page. Kept ranges are zeroed when reused, so a new object still
// reads as zero.
#pragma once

#include <hdsm/export.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm::os {

class Arena {
 public:
  /// Reserves `segments` segments of `segment_bytes` (a power of two, a multiple of the page size)
  /// for each view. Nothing is backed by memory until written through a view. Up to `keep_bytes`
  /// of released memory is kept for reuse (0: every release gives its memory back).
  Arena(unsigned segments, std::size_t segment_bytes, std::size_t keep_bytes = 0);
  /// The same with the user view placed at `user_at` (aligned to `segment_bytes`), never over an
  /// existing mapping: the cluster runtime places its global memory at one address on every rank.
  /// Throws hdsm::SystemError with EEXIST when something is mapped in the way.
  Arena(unsigned segments, std::size_t segment_bytes, std::size_t keep_bytes, std::uintptr_t user_at);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  unsigned segments() const { return segments_; }
  std::size_t segment_bytes() const { return std::size_t{1} << shift_; }

  /// True when p lies in the user view of any segment.
  bool contains(const void* p) const { return address(p) - user_begin_ < user_bytes_; }
  /// Segment of a user-view pointer (p must be contained).
  unsigned segment_of(const void* p) const {
    return static_cast<unsigned>((address(p) - user_begin_) >> shift_);
  }
  /// Offset of a user-view pointer within its segment.
  std::size_t offset_of(const void* p) const { return (address(p) - user_begin_) & (segment_bytes() - 1); }

  /// Start of the user view (segment 0).
  std::uintptr_t user_begin() const { return user_begin_; }
  std::byte* user(unsigned segment, std::size_t offset) const {
    return reinterpret_cast<std::byte*>(user_begin_ + (std::uintptr_t{segment} << shift_) + offset);
  }
  std::byte* shadow(unsigned segment, std::size_t offset) const {
    return reinterpret_cast<std::byte*>(shadow_begin_ + (std::uintptr_t{segment} << shift_) + offset);
  }
  /// The shadow address of a user-view pointer.
  std::byte* shadow_of(const void* user_pointer) const {
    return reinterpret_cast<std::byte*>(address(user_pointer) - user_begin_ + shadow_begin_);
  }

  /// Set the protection (PROT_* flags) of a page-aligned range of a segment's user view.
  void protect(unsigned segment, std::size_t offset, std::size_t bytes, int prot);
  /// Who makes a released range inaccessible in the user view.
  enum class Closing {
    arena,   // release does it
    caller,  // the caller did already (through its protection map, which must know)
  };
  /// Make a page-aligned range inaccessible in the user view. Its memory is kept when the kept
  /// total stays within `keep_bytes`, and given back otherwise.
  void release(unsigned segment, std::size_t offset, std::size_t bytes, Closing closing = Closing::arena);
  /// Ready a page-aligned range for a new object: it reads as zero afterwards. Zeroes what a
  /// release kept in it (only the pages that hold memory); the rest reads as zero already.
  void reuse(unsigned segment, std::size_t offset, std::size_t bytes);
  /// Bytes of memory a segment holds now.
  std::uint64_t resident_bytes(unsigned segment) const;
  /// Bytes released and kept, in all segments.
  std::size_t kept_bytes() const;

 private:
  static std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
  void teardown() noexcept;
  void check_range(unsigned segment, std::size_t offset, std::size_t bytes, const char* what) const;
  void punch(unsigned segment, std::size_t offset, std::size_t bytes);
  /// Adds [begin, end) to the kept set, joined with its neighbours (under kept_mutex_).
  void keep(unsigned segment, std::size_t begin, std::size_t end);
  void zero_resident(unsigned segment, std::size_t offset, std::size_t bytes);

  unsigned segments_;
  unsigned shift_;
  std::uintptr_t user_begin_ = 0, shadow_begin_ = 0;
  std::uintptr_t user_bytes_ = 0;
  std::vector<int> memfds_;  // one per segment

  std::size_t keep_limit_;
  mutable std::mutex kept_mutex_;
  std::vector<std::map<std::size_t, std::size_t>> kept_;  // per segment: begin offset -> end offset
  std::size_t kept_total_ = 0;
};

/// A range [begin, end) of addresses.
struct AddressRange {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
  friend bool operator==(const AddressRange&, const AddressRange&) = default;
};

/// The ranges of this process's address space in which nothing is mapped, ascending, as
/// `maps_file` (the format of /proc/self/maps) lists the mappings: from 4 GiB up to the stack's
/// growth limit (the lowest `[stack]` mapping less the stack's size limit, at most 64 GiB, and 1
/// GiB more), and below 2^47. Throws hdsm::SystemError when the file cannot be read.
std::vector<AddressRange> unmapped_ranges(const char* maps_file = "/proc/self/maps");
/// The addresses both lists hold (each ascending and disjoint), ascending.
std::vector<AddressRange> common_ranges(std::span<const AddressRange> a, std::span<const AddressRange> b);
/// The highest address aligned to `align` (a power of two) at which `bytes` fit in one of the
/// ranges, or 0 when they fit nowhere.
std::uintptr_t highest_fit(std::span<const AddressRange> ranges, std::size_t bytes, std::size_t align);

}  // namespace hdsm::os

HDSM_VISIBLE_END
