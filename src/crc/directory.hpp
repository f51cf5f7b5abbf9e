// The home's directory: for every page of the shared space, the workers that hold it for reading
// and for writing, and one twin per writer, made lazily: not at the write fault but just before the
// first write-back that changes the page while the writer still holds it. Plus one invalidation
// list per worker, which the worker takes at its next acquire. Pure bookkeeping over the shared
// space's bytes; the home serializes every call.
#pragma once

#include "crc/worker_set.hpp"
#include "os/mapping.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include <hdsm/export.h>

HDSM_VISIBLE_BEGIN
namespace hdsm::crc::detail {

class Directory {
 public:
  /// `pages` pages of `page_size` bytes, `workers` workers (at most kMaxWorkers).
  Directory(std::size_t pages, std::size_t page_size, int workers);

  /// Forgets every reader, writer, twin and list, for a region or a page size.
  void reset(std::size_t pages, std::size_t page_size);

  /// `w` fetched `page` for reading: a reader now, with a current copy.
  void read_fetch(std::size_t page, int w);
  /// `w` wants to write `page` (a fetch for writing, or an upgrade of the copy it holds when
  /// `has_copy`). Returns true when `w` must be sent the page: it has no copy, or its copy is
  /// stale (the page is on its invalidation list, from which it leaves).
  bool write_fault(std::size_t page, int w, bool has_copy);
  /// `w` writes back its copy `local` of `page`, whose bytes in the shared space are `home`: the
  /// writers without a twin get one (the page as it is before this update), `w`'s modifications
  /// against its twin are merged into `home`, `w` leaves the writers, and, where bytes changed,
  /// the page goes on the lists of the other readers. Returns the bytes that changed.
  std::size_t write_back(std::size_t page, int w, std::span<std::byte> home,
                         std::span<const std::byte> local);
  /// `w` put `page` back whole by itself (a single writer): the other readers' lists.
  void single_writer_update(std::size_t page, int w);
  /// `w`'s acquire: its invalidation list, which empties.
  void take_invalidations(int w, std::vector<std::uint64_t>& out);
  /// Per page, a count of the write-backs that changed it (released after their bytes), which
  /// workers on shared memory read: a worker that copies a page itself reads the version before
  /// it copies, and the copy holds every change the home made before the reader was counted when
  /// that version is the one the home saw then (version()). Valid from one reset to the next.
  const std::atomic<std::uint32_t>* versions() const { return versions_.data(); }
  std::uint32_t version(std::size_t page) const { return versions_[page].load(std::memory_order_relaxed); }

  WorkerSet readers(std::size_t page) const { return entries_[page].read; }
  WorkerSet writers(std::size_t page) const { return entries_[page].write; }
  bool has_twin(std::size_t page, int w) const;
  bool listed(std::size_t page, int w) const { return has(entries_[page].listed, w); }
  std::size_t twins_alive() const { return twins_alive_; }
  std::uint64_t twins_made() const { return twins_made_; }
  std::size_t pages() const { return pages_; }

 private:
  struct Entry {
    WorkerSet read = 0;
    WorkerSet write = 0;
    WorkerSet listed = 0;  // on these workers' invalidation lists
  };
  struct Twin {
    std::unique_ptr<std::byte[]> bytes;
    int holders = 0;  // writers whose twin pointer points here
  };
  struct PageTwins {
    WorkerSet with_twin = 0;
    std::vector<std::pair<int, std::size_t>> of;  // (writer, twin slot)
  };
  void touch(std::size_t page);
  void list_for(std::size_t page, WorkerSet workers);
  std::size_t make_twin(std::span<const std::byte> home);
  void drop_twin(std::size_t page, int w);

  std::size_t page_size_;
  std::size_t pages_ = 0;
  // Tables of zeros committed as pages are touched, sized for the most pages a region has had:
  // building the directory of a large space costs nothing until its pages are used.
  os::ZeroedTable<Entry> entries_;
  std::vector<std::size_t> touched_;  // pages whose entry is not empty, for a cheap reset
  os::ZeroedTable<std::uint8_t> is_touched_;
  std::vector<std::vector<std::uint64_t>> lists_;
  std::unordered_map<std::size_t, PageTwins> twins_of_;
  std::vector<Twin> twins_;
  std::vector<std::size_t> free_twins_;
  os::ZeroedTable<std::atomic<std::uint32_t>> versions_;
  std::size_t twins_alive_ = 0;
  std::uint64_t twins_made_ = 0;
};

}  // namespace hdsm::crc::detail

HDSM_VISIBLE_END
