#include "coherence/copy_set.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace hdsm {

const char* to_string(Access access) {
  switch (access) {
    case Access::read:
      return "read";
    case Access::write:
      return "write";
    case Access::read_write:
      return "read-write";
  }
  return "?";
}

ContainerStats& ContainerStats::operator+=(const ContainerStats& o) {
  host_to_device_bytes += o.host_to_device_bytes;
  device_to_host_bytes += o.device_to_host_bytes;
  on_device_bytes += o.on_device_bytes;
  peer_bytes += o.peer_bytes;
  copies += o.copies;
  device_allocations += o.device_allocations;
  device_allocated_bytes += o.device_allocated_bytes;
  evictions += o.evictions;
  write_backs += o.write_backs;
  return *this;
}

}  // namespace hdsm

namespace hdsm::coherence {
namespace {

ElementRange intersect(ElementRange a, ElementRange b) {
  const ElementRange r{std::max(a.first, b.first), std::min(a.last, b.last)};
  return r.empty() ? ElementRange{} : r;
}

/// The first run of `e` (in element order) that overlaps `range`, cut to the overlap; empty if none.
ElementRange first_overlap(const Extent& e, ElementRange range) {
  if (e.rows == 1) return intersect(run(e, 0), range);
  std::size_t row = range.first <= e.offset ? 0 : (range.first - e.offset) / e.stride;
  for (; row < e.rows; ++row) {
    const ElementRange r = run(e, row);
    if (r.first >= range.last) break;
    if (const ElementRange o = intersect(r, range); !o.empty()) return o;
  }
  return {};
}

/// The parts of `range` that `e` does not cover, appended in order.
void subtract(ElementRange range, const Extent& e, std::vector<ElementRange>& out) {
  std::size_t at = range.first;
  while (at < range.last) {
    const ElementRange o = first_overlap(e, {at, range.last});
    if (o.empty()) break;
    if (o.first > at) out.push_back({at, o.first});
    at = o.last;
  }
  if (at < range.last) out.push_back({at, range.last});
}

}  // namespace

}  // namespace hdsm::coherence

namespace hdsm {

Extent Extent::normalized() const {
  Extent e = *this;
  if (e.rows > 1 && e.cols == e.stride) {
    e.cols *= e.rows;
    e.rows = 1;
  }
  if (e.rows == 1) e.stride = e.cols;
  return e;
}

std::size_t Extent::local(std::size_t i) const {
  if (rows == 1) return i - offset;
  const std::size_t d = i - offset;
  return (d / stride) * cols + d % stride;
}

}  // namespace hdsm

namespace hdsm::coherence {

CopySet::CopySet(Mechanism mechanism, std::size_t elements, std::size_t row_length)
    : mechanism_(mechanism), elements_(elements), row_length_(row_length == 0 ? 1 : row_length) {}

void CopySet::set_peers(unsigned devices, std::vector<std::uint8_t> peer) {
  if (peer.size() != std::size_t{devices} * devices)
    throw std::invalid_argument("CopySet::set_peers: the matrix must have devices * devices entries");
  devices_ = devices;
  peer_ = std::move(peer);
}

template <class F>
void CopySet::for_each_near(unsigned device, ElementRange range, F&& f) const {
  if (device >= index_.size()) return;
  for (const auto& [size_class, copies] : index_[device].by_class) {
    // The longest a copy of this class can be: one that starts further before the range ends before it.
    const std::size_t longest = size_class >= std::numeric_limits<std::size_t>::digits
                                    ? SIZE_MAX
                                    : (std::size_t{1} << size_class) - 1;
    const std::size_t from = range.first > longest ? range.first - longest : 0;
    for (auto it = copies.lower_bound(from); it != copies.end() && it->first < range.last; ++it)
      if (!f(it->second)) return;
  }
}

void CopySet::resize(std::size_t elements, std::size_t row_length) {
  if (has_device_copies()) throw std::logic_error("CopySet::resize: the set has device copies");
  elements_ = elements;
  row_length_ = row_length == 0 ? 1 : row_length;
}

CopyId CopySet::find(unsigned device, const Extent& extent) const {
  const Extent e = extent.normalized();
  if (device >= index_.size()) return kMainCopy;
  const auto& by_class = index_[device].by_class;
  const auto copies = by_class.find(size_class(bounds(e)));
  if (copies == by_class.end()) return kMainCopy;
  const auto [begin, end] = copies->second.equal_range(e.offset);
  for (auto it = begin; it != end; ++it)
    if (copies_[it->second].extent == e) return it->second;
  return kMainCopy;
}

CopyId CopySet::add(unsigned device, const Extent& extent) {
  const Extent e = extent.normalized();
  if (e.count() == 0 || bounds(e).last > elements_)
    throw std::invalid_argument(fmt::format("CopySet::add: extent [{}, {}) outside the {} elements",
                                            bounds(e).first, bounds(e).last, elements_));
  CopyId id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
    copies_[id] = DeviceCopy{device, e};
    live_[id] = true;
  } else {
    id = static_cast<CopyId>(copies_.size());
    copies_.push_back(DeviceCopy{device, e});
    live_.push_back(true);
  }
  if (device >= index_.size()) index_.resize(device + 1);
  index_[device].by_class[size_class(bounds(e))].emplace(e.offset, id);
  return id;
}

void CopySet::remove(CopyId id) {
  if (!exists(id)) throw std::invalid_argument(fmt::format("CopySet::remove: no device copy {}", id));
  DeviceCopy& c = copies_[id];
  if (c.modified) throw std::logic_error("CopySet::remove: a modified copy must be written back first");
  set_valid(id, false);
  auto& by_class = index_[c.device].by_class;
  const auto copies = by_class.find(size_class(bounds(c.extent)));
  const auto [begin, end] = copies->second.equal_range(c.extent.offset);
  for (auto it = begin; it != end; ++it)
    if (it->second == id) {
      copies->second.erase(it);
      break;
    }
  if (copies->second.empty()) by_class.erase(copies);
  live_[id] = false;
  free_ids_.push_back(id);
}

std::vector<CopyId> CopySet::device_copies() const {
  std::vector<CopyId> ids;
  for (CopyId id = 0; id < copies_.size(); ++id)
    if (live_[id]) ids.push_back(id);
  return ids;
}

std::size_t CopySet::valid_device_copies() const { return valid_; }

bool CopySet::host_access_is_free(Access mode) const {
  if (mechanism_ == Mechanism::initial)
    return mode == Access::read ? modified_ == 0 : copies_.size() == free_ids_.size();
  return main_valid_ && (mode == Access::read || valid_ == 0);
}

void CopySet::set_valid(CopyId id, bool valid) {
  DeviceCopy& c = copies_[id];
  if (!valid) set_modified(id, false);
  if (c.valid != valid) {
    c.valid = valid;
    if (valid)
      ++valid_;
    else
      --valid_;
  }
}

void CopySet::set_modified(CopyId id, bool modified) {
  DeviceCopy& c = copies_[id];
  if (c.modified != modified) {
    c.modified = modified;
    if (modified)
      ++modified_;
    else
      --modified_;
  }
}

void CopySet::set_main_valid_if_clean() {
  if (modified_ == 0) main_valid_ = true;
}

void CopySet::write_back(CopyId id, RangePlan& plan) {
  const Extent& e = copies_[id].extent;
  for (std::size_t row = 0; row < e.rows; ++row) plan.copies.push_back({id, kMainCopy, run(e, row)});
  set_modified(id, false);
  set_main_valid_if_clean();
}

bool CopySet::find_source(unsigned device, ElementRange range, CopyId except, bool modified_only,
                          CopyId& source, ElementRange& overlap) const {
  bool found = false;
  for_each_near(device, range, [&](CopyId id) {
    const DeviceCopy& c = copies_[id];
    if (id == except || !c.valid || (modified_only && !c.modified)) return true;
    const ElementRange o = first_overlap(c.extent, range);
    if (o.empty()) return true;
    source = id;
    overlap = o;
    found = true;
    return false;
  });
  return found;
}

void CopySet::fill(CopyId dst, RangePlan& plan) {
  const DeviceCopy& d = copies_[dst];
  const unsigned here = d.device;
  std::vector<ElementRange> missing;
  for (std::size_t row = d.extent.rows; row-- > 0;) missing.push_back(run(d.extent, row));
  const auto take = [&](CopyId from, ElementRange range, ElementRange part) {
    plan.copies.push_back({from, dst, part});
    // What is left of `range` on either side of `part`, the lower part handled first.
    if (part.last < range.last) missing.push_back({part.last, range.last});
    if (range.first < part.first) missing.push_back({range.first, part.first});
  };
  const unsigned devices = std::max<unsigned>(devices_, static_cast<unsigned>(index_.size()));
  while (!missing.empty()) {
    const ElementRange range = missing.back();
    missing.pop_back();
    CopyId src = kMainCopy;
    ElementRange part;
    // 1. A current copy on the same device.
    if (find_source(here, range, dst, false, src, part)) {
      take(src, range, part);
      continue;
    }
    // 2. The main copy, when all of it is current.
    if (main_valid_) {
      plan.copies.push_back({kMainCopy, dst, range});
      continue;
    }
    // 3. A current copy on a peer device.
    bool done = false;
    for (unsigned dev = 0; dev < devices && !done; ++dev) {
      if (dev == here || dev >= devices_ || peer_[std::size_t{here} * devices_ + dev] == 0) continue;
      if (find_source(dev, range, kMainCopy, false, src, part)) {
        take(src, range, part);
        done = true;
      }
    }
    if (done) continue;
    // 4. A modified copy elsewhere, through the main copy.
    for (unsigned dev = 0; dev < devices && !done; ++dev) {
      if (dev == here) continue;
      if (find_source(dev, range, kMainCopy, true, src, part)) {
        write_back(src, plan);
        take(kMainCopy, range, part);
        done = true;
      }
    }
    if (done) continue;
    // No modified copy holds any of it: the main copy's part is current.
    plan.copies.push_back({kMainCopy, dst, range});
  }
  set_valid(dst, true);
}

void CopySet::invalidate_others(CopyId w, RangePlan& plan) {
  const Extent& we = copies_[w].extent;
  main_valid_ = false;
  std::vector<CopyId> hit;
  for (unsigned dev = 0; dev < index_.size(); ++dev)
    for (std::size_t row = 0; row < we.rows; ++row)
      for_each_near(dev, run(we, row), [&](CopyId id) {
        const DeviceCopy& c = copies_[id];
        if (id != w && c.valid && !first_overlap(c.extent, run(we, row)).empty() &&
            std::find(hit.begin(), hit.end(), id) == hit.end())
          hit.push_back(id);
        return true;
      });
  for (CopyId id : hit) {
    const DeviceCopy& c = copies_[id];
    if (c.modified) {
      std::vector<ElementRange> rest;
      for (std::size_t row = 0; row < c.extent.rows; ++row) subtract(run(c.extent, row), we, rest);
      for (const ElementRange& r : rest) plan.copies.push_back({id, kMainCopy, r});
    }
    set_valid(id, false);
  }
}

RangePlan CopySet::device_access(CopyId id, Access mode, std::uint64_t now) {
  RangePlan plan = prepare_device_access(id, mode, now);
  RangePlan writes = commit_device_write(id, mode);
  plan.copies.insert(plan.copies.end(), writes.copies.begin(), writes.copies.end());
  return plan;
}

RangePlan CopySet::prepare_device_access(CopyId id, Access mode, std::uint64_t now) {
  if (!exists(id)) throw std::invalid_argument(fmt::format("CopySet::device_access: no device copy {}", id));
  RangePlan plan;
  DeviceCopy& c = copies_[id];
  c.last_used = now;
  if (mode == Access::write || c.valid) return plan;
  if (mechanism_ == Mechanism::initial) {
    // A new copy is filled from the main copy after every modified copy was written back.
    for (CopyId other : device_copies())
      if (copies_[other].modified) write_back(other, plan);
    for (std::size_t row = 0; row < c.extent.rows; ++row)
      plan.copies.push_back({kMainCopy, id, run(c.extent, row)});
    set_valid(id, true);
    return plan;
  }
  fill(id, plan);
  return plan;
}

RangePlan CopySet::commit_device_write(CopyId id, Access mode) {
  if (!exists(id)) throw std::invalid_argument(fmt::format("CopySet::device_access: no device copy {}", id));
  RangePlan plan;
  if (mode == Access::read) return plan;
  // The initial mechanism uses a copy once made as it is and leaves the others alone.
  if (mechanism_ == Mechanism::improved) invalidate_others(id, plan);
  set_valid(id, true);
  set_modified(id, true);
  main_valid_ = false;
  return plan;
}

void CopySet::forget(CopyId id) {
  if (exists(id) && !copies_[id].modified) set_valid(id, false);
}

RangePlan CopySet::host_access(ElementRange range, Access mode) {
  if (range.last > elements_ || range.first > range.last)
    throw std::invalid_argument(fmt::format("CopySet::host_access: [{}, {}) outside the {} elements",
                                            range.first, range.last, elements_));
  RangePlan plan;
  if (range.empty()) return plan;
  if (mechanism_ == Mechanism::initial) {
    for (CopyId id : device_copies())
      if (copies_[id].modified) write_back(id, plan);
    if (mode != Access::read) plan.released = device_copies();
    return plan;
  }
  const Extent as_extent = Extent::range(range.first, range.size());
  std::vector<CopyId> hit;
  for (unsigned dev = 0; dev < index_.size(); ++dev)
    for_each_near(dev, range, [&](CopyId id) {
      if (copies_[id].valid && !first_overlap(copies_[id].extent, range).empty()) hit.push_back(id);
      return true;
    });
  if (!main_valid_) {
    for (CopyId id : hit) {
      const DeviceCopy& c = copies_[id];
      if (!c.modified) continue;
      if (mode == Access::write) {
        // The host overwrites the range: only the rest of the copy needs the main copy.
        std::vector<ElementRange> rest;
        for (std::size_t row = 0; row < c.extent.rows; ++row) subtract(run(c.extent, row), as_extent, rest);
        for (const ElementRange& r : rest) plan.copies.push_back({id, kMainCopy, r});
        set_modified(id, false);
      } else {
        write_back(id, plan);
      }
    }
  }
  if (mode != Access::read)
    for (CopyId id : hit) set_valid(id, false);
  set_main_valid_if_clean();
  return plan;
}

RangePlan CopySet::evict(CopyId id) {
  if (!exists(id)) throw std::invalid_argument(fmt::format("CopySet::evict: no device copy {}", id));
  RangePlan plan;
  if (copies_[id].modified) write_back(id, plan);
  plan.released.push_back(id);
  return plan;
}

RangePlan CopySet::update_host() {
  RangePlan plan;
  for (CopyId id : device_copies())
    if (copies_[id].modified) write_back(id, plan);
  main_valid_ = true;
  return plan;
}

RangePlan CopySet::invalidate_device_copies() {
  RangePlan plan = update_host();
  for (CopyId id : device_copies()) set_valid(id, false);
  return plan;
}

RangePlan CopySet::flush() {
  RangePlan plan = update_host();
  plan.released = device_copies();
  return plan;
}

std::string CopySet::describe(const RangePlan& plan) const {
  const auto name = [&](CopyId id) {
    if (id == kMainCopy) return std::string("main");
    const DeviceCopy& c = copies_.at(id);
    return fmt::format("dev{}#{}", c.device, id);
  };
  std::string s;
  for (const RangeCopy& c : plan.copies)
    s += fmt::format("{}[{}, {}) -> {}; ", name(c.from), c.range.first, c.range.last, name(c.to));
  for (CopyId id : plan.released) s += fmt::format("free {}; ", name(id));
  if (!s.empty()) s.resize(s.size() - 2);
  return s;
}

}  // namespace hdsm::coherence
