// The copies of one container's elements: the main copy in host memory and any number of device
// copies, each of a rectangular block of elements, with the state that says which hold the current
// contents. A pure state machine: an access updates the states and returns the copies to make first,
// as a value; the container executes it with the copy engine. Nothing here touches a device.
//
// Two rule sets. `improved` keeps a valid flag per copy and the main copy, so that a copy is used only
// when current: a device read fills the missing parts from the closest current copies (same device,
// then the main copy, then peer devices, then modified copies elsewhere through the host), and a
// device write invalidates every overlapping copy, writing back only the parts of modified copies
// that the write does not cover. `initial` is the simpler scheme it replaced, kept to compare with:
// copies carry only a modified flag, a copy once made is used as it is, and a host write drops every
// device copy. It reads stale data when copies overlap (see docs/containers.md).
#pragma once

#include <hdsm/export.h>
#include <hdsm/container.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm::coherence {

/// Elements [first, last) of a container, in its row-major element order.
struct ElementRange {
  std::size_t first = 0;
  std::size_t last = 0;
  std::size_t size() const { return last - first; }
  bool empty() const { return first >= last; }
  bool operator==(const ElementRange&) const = default;
};

using hdsm::Extent;

using CopyId = std::uint32_t;
inline constexpr CopyId kMainCopy = 0xffffffffu;

using hdsm::Mechanism;

/// [first element, one past the last element] of an extent.
inline ElementRange bounds(const Extent& e) {
  return {e.offset, e.offset + (e.rows - 1) * e.stride + e.cols};
}
inline ElementRange run(const Extent& e, std::size_t row) {
  return {e.offset + row * e.stride, e.offset + row * e.stride + e.cols};
}

struct DeviceCopy {
  unsigned device = 0;
  Extent extent;
  bool valid = false;
  bool modified = false;  // implies valid
  std::uint64_t last_used = 0;
  DeviceBuffer buffer;  // set by the container once allocated
};

/// Copies elements [range.first, range.last) from one copy to another; the range lies in one run of
/// each device copy involved.
struct RangeCopy {
  CopyId from = kMainCopy;
  CopyId to = kMainCopy;
  ElementRange range;
  bool operator==(const RangeCopy&) const = default;
};

/// What to do before an access: the copies in order (write-backs to the main copy come before any
/// copy that reads the main copy), then the device copies to free.
struct RangePlan {
  std::vector<RangeCopy> copies;
  std::vector<CopyId> released;
  bool empty() const { return copies.empty() && released.empty(); }
  bool operator==(const RangePlan&) const = default;
};

class CopySet {
 public:
  /// A container of `elements` elements, in rows of `row_length` (a vector: its size), whose main copy
  /// is current.
  CopySet(Mechanism mechanism, std::size_t elements, std::size_t row_length);

  /// Which devices read each other's memory: peer[dst * devices + src] != 0. Without it, no device
  /// is a peer of another.
  void set_peers(unsigned devices, std::vector<std::uint8_t> peer);

  Mechanism mechanism() const { return mechanism_; }
  std::size_t elements() const { return elements_; }
  std::size_t row_length() const { return row_length_; }

  /// The device copy of exactly these elements on `device`, or kMainCopy.
  CopyId find(unsigned device, const Extent& extent) const;
  /// A new device copy, not valid (the caller allocates its buffer and sets it with copy()).
  CopyId add(unsigned device, const Extent& extent);
  /// Forgets a device copy that holds nothing the main copy lacks (not modified).
  void remove(CopyId id);
  DeviceCopy& copy(CopyId id) { return copies_.at(id); }
  const DeviceCopy& copy(CopyId id) const { return copies_.at(id); }
  bool exists(CopyId id) const { return id < copies_.size() && live_[id]; }
  /// The device copies, oldest first.
  std::vector<CopyId> device_copies() const;
  bool has_device_copies() const { return copies_.size() != free_ids_.size(); }
  /// A new size for a set with no device copy (std::logic_error otherwise): nothing to write back or
  /// free, so a push_back costs no new set.
  void resize(std::size_t elements, std::size_t row_length);

  /// A kernel on the copy's device is about to access the copy in `mode`; `now` orders the uses of all
  /// copies (least recently used first). The same as prepare_device_access() and then
  /// commit_device_write(), their plans in one.
  RangePlan device_access(CopyId id, Access mode, std::uint64_t now);
  /// The first half, before the kernel is enqueued: a read or read-write fills the copy if it is not
  /// valid (nothing else changes, so a launch that fails after it loses nothing).
  RangePlan prepare_device_access(CopyId id, Access mode, std::uint64_t now);
  /// The second half, once the kernel that writes the copy is enqueued: every overlapping copy becomes
  /// invalid (the uncovered parts of modified ones written back) and the copy is the modified one.
  /// Nothing for a read.
  RangePlan commit_device_write(CopyId id, Access mode);
  /// The copy's contents are unknown (a fill that failed): it is not valid any more.
  void forget(CopyId id);
  /// The host is about to access `range` of the main copy.
  RangePlan host_access(ElementRange range, Access mode);
  /// The copy is going away (eviction): write back what only it holds; released holds it.
  RangePlan evict(CopyId id);
  /// Every modified device copy written back; the main copy is current.
  RangePlan update_host();
  /// update_host(), then every device copy invalid (kept allocated).
  RangePlan invalidate_device_copies();
  /// update_host(), then every device copy released.
  RangePlan flush();

  /// Whether a host access of any range in `mode` needs no plan (the containers' checked element
  /// access caches this).
  bool host_access_is_free(Access mode) const;
  bool main_valid() const { return main_valid_; }
  std::size_t modified_copies() const { return modified_; }
  std::size_t valid_device_copies() const;

  std::string describe(const RangePlan& plan) const;

 private:
  /// A current copy on `device` (not `except`) overlapping `range`, with the overlap.
  bool find_source(unsigned device, ElementRange range, CopyId except, bool modified_only, CopyId& source,
                   ElementRange& overlap) const;
  void fill(CopyId dst, RangePlan& plan);             // Algorithm 1
  void invalidate_others(CopyId w, RangePlan& plan);  // Algorithm 2
  void write_back(CopyId id, RangePlan& plan);
  void set_modified(CopyId id, bool modified);
  void set_valid(CopyId id, bool valid);
  void set_main_valid_if_clean();
  /// Calls f(id) for every live copy on `device` whose bounds overlap `range` (f returns false to stop).
  template <class F>
  void for_each_near(unsigned device, ElementRange range, F&& f) const;

  Mechanism mechanism_;
  std::size_t elements_;
  std::size_t row_length_;
  bool main_valid_ = true;
  std::size_t modified_ = 0;
  std::vector<DeviceCopy> copies_;
  std::vector<bool> live_;
  std::vector<CopyId> free_ids_;
  /// Per device: the copies by the first element of their bounds, in classes by the bit width of
  /// their bounds' size. A copy of class k spans fewer than 2^k elements, so only the copies of class
  /// k that start less than 2^k before a range can reach it: the copies overlapping a range are found
  /// without visiting the others, and one long copy does not make every scan of the short ones long
  /// (with one bound for all, a whole-container copy made a scan visit every copy before the range).
  struct DeviceIndex {
    std::map<unsigned, std::multimap<std::size_t, CopyId>> by_class;
  };
  static unsigned size_class(ElementRange bounds) {
    return static_cast<unsigned>(std::bit_width(bounds.size()));
  }
  std::vector<DeviceIndex> index_;
  std::size_t valid_ = 0;  // valid device copies
  unsigned devices_ = 0;
  std::vector<std::uint8_t> peer_;
};

}  // namespace hdsm::coherence

HDSM_VISIBLE_END
