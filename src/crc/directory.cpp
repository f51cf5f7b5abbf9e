#include "crc/directory.hpp"

#include "coherence/page_diff.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace hdsm::crc::detail {

Directory::Directory(std::size_t pages, std::size_t page_size, int workers)
    : page_size_(page_size), lists_(static_cast<std::size_t>(workers)) {
  if (workers < 1 || workers > kMaxWorkers)
    throw InvalidArgument(
        fmt::format("crc directory for {} workers: 1 to {} are supported", workers, kMaxWorkers));
  reset(pages, page_size);
}

void Directory::reset(std::size_t pages, std::size_t page_size) {
  for (const std::size_t p : touched_) {
    entries_[p] = Entry{};
    is_touched_[p] = 0;
  }
  touched_.clear();
  // All zeros now: a larger table is a fresh one.
  if (pages > entries_.size()) {
    entries_ = os::ZeroedTable<Entry>(pages, fmt::format("crc directory of {} pages", pages));
    is_touched_ = os::ZeroedTable<std::uint8_t>(pages, fmt::format("crc directory of {} pages", pages));
  }
  pages_ = pages;
  page_size_ = page_size;
  // Versions only grow (a worker compares two readings of one page's); the table only grows too.
  if (pages > versions_.size())
    versions_ = os::ZeroedTable<std::atomic<std::uint32_t>>(
        pages, fmt::format("crc page versions of {} pages", pages));
  for (auto& list : lists_) list.clear();
  twins_of_.clear();
  twins_.clear();
  free_twins_.clear();
  twins_alive_ = 0;
  twins_made_ = 0;  // a region's count: the runtime adds it to the totals
}

void Directory::touch(std::size_t page) {
  if (is_touched_[page] != 0) return;
  is_touched_[page] = 1;
  touched_.push_back(page);
}

void Directory::read_fetch(std::size_t page, int w) {
  touch(page);
  Entry& e = entries_[page];
  e.read |= bit(w);
  e.listed &= ~bit(w);  // the copy it gets now is current; the list entry is skipped when taken
}

bool Directory::write_fault(std::size_t page, int w, bool has_copy) {
  touch(page);
  Entry& e = entries_[page];
  const bool stale = has(e.listed, w);
  e.read |= bit(w);
  e.write |= bit(w);
  e.listed &= ~bit(w);
  return !has_copy || stale;
}

bool Directory::has_twin(std::size_t page, int w) const {
  const auto it = twins_of_.find(page);
  return it != twins_of_.end() && has(it->second.with_twin, w);
}

std::size_t Directory::make_twin(std::span<const std::byte> home) {
  std::size_t slot = 0;
  if (!free_twins_.empty()) {
    slot = free_twins_.back();
    free_twins_.pop_back();
  } else {
    slot = twins_.size();
    twins_.push_back(Twin{std::make_unique<std::byte[]>(page_size_), 0});
  }
  std::memcpy(twins_[slot].bytes.get(), home.data(), page_size_);
  ++twins_alive_;
  ++twins_made_;
  return slot;
}

void Directory::drop_twin(std::size_t page, int w) {
  const auto it = twins_of_.find(page);
  if (it == twins_of_.end() || !has(it->second.with_twin, w)) return;
  PageTwins& pt = it->second;
  const auto at = std::find_if(pt.of.begin(), pt.of.end(), [&](const auto& e) { return e.first == w; });
  Twin& twin = twins_[at->second];
  if (--twin.holders == 0) {
    free_twins_.push_back(at->second);
    --twins_alive_;
  }
  pt.of.erase(at);
  pt.with_twin &= ~bit(w);
  if (pt.with_twin == 0) twins_of_.erase(it);
}

void Directory::list_for(std::size_t page, WorkerSet workers) {
  Entry& e = entries_[page];
  const WorkerSet fresh = workers & ~e.listed;
  e.listed |= workers;
  for_each(fresh, [&](int x) { lists_[static_cast<std::size_t>(x)].push_back(page); });
}

std::size_t Directory::write_back(std::size_t page, int w, std::span<std::byte> home,
                                  std::span<const std::byte> local) {
  Entry& e = entries_[page];
  if (!has(e.write, w))
    throw InvalidArgument(fmt::format("crc: worker {} wrote back page {} without write permission", w, page));
  // Lazy twins: every writer that has none gets the page as it is before this update, which is
  // what it received (the shared page has not changed since it became a writer: any change would
  // have made its twin first).
  // A page with one writer has no entry here, and its write-back makes none (no allocation).
  auto it = twins_of_.find(page);
  const WorkerSet with_twin = it != twins_of_.end() ? it->second.with_twin : 0;
  const bool own_twin = has(with_twin, w);
  const WorkerSet need = e.write & ~with_twin & ~bit(w);
  if (need != 0) {
    if (it == twins_of_.end()) it = twins_of_.emplace(page, PageTwins{}).first;
    PageTwins& pt = it->second;
    const std::size_t slot = make_twin(home);
    for_each(need, [&](int x) {
      pt.of.emplace_back(x, slot);
      ++twins_[slot].holders;
    });
    pt.with_twin |= need;
  }
  std::size_t changed = 0;
  if (own_twin) {
    const PageTwins& pt = it->second;
    const auto at = std::find_if(pt.of.begin(), pt.of.end(), [&](const auto& t) { return t.first == w; });
    changed = coherence::merge_against_twin(
        home, local, std::span<const std::byte>(twins_[at->second].bytes.get(), page_size_));
  } else {
    // No update since `w` got the page: its twin would equal the shared page, and the merge is a
    // copy of what differs. No twin is made for it.
    changed = coherence::copy_changes(home, local);
  }
  drop_twin(page, w);
  e.write &= ~bit(w);
  if (changed != 0) {
    list_for(page, e.read & ~bit(w));
    // After the merge's bytes: a worker that reads this version before copying the page copies them.
    std::atomic<std::uint32_t>& v = versions_[page];
    v.store(v.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  return changed;
}

void Directory::single_writer_update(std::size_t page, int w) {
  touch(page);
  list_for(page, entries_[page].read & ~bit(w));
  // The writer's bytes reached the shared page before this note: a worker whose copy of the page
  // began before them and that the home counts as a reader only after the note copies again (it
  // would not be listed, nor see the version move, and keep stale bytes for good).
  std::atomic<std::uint32_t>& v = versions_[page];
  v.store(v.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

void Directory::take_invalidations(int w, std::vector<std::uint64_t>& out) {
  auto& list = lists_[static_cast<std::size_t>(w)];
  for (const std::uint64_t p : list) {
    Entry& e = entries_[p];
    if (!has(e.listed, w)) continue;  // left the list at a fetch or write fault since
    e.listed &= ~bit(w);
    out.push_back(p);
  }
  list.clear();
}

}  // namespace hdsm::crc::detail
