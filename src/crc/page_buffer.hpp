// A worker's page buffer: a software cache of shared pages in the worker's local store. S sets of 4
// ways, each way with an entry in the read tag array, the write tag array and the local-address
// array; a page-frame table of N frames with 4 S > N (S = N by default), so a page rarely finds its set full
// while frames are free (a page's set folds its page number's upper bits into the lower ones, so large
// aligned arrays do not share sets page for page); frames replaced round-robin. Separate read and write tags
// make a write hit one compare, like a read hit. Replacement passes over the last pages to come in (a full
// set gives up its oldest), so several localized runs can be held at once. No messages here: the worker
// decides what to fetch and flush.
#pragma once

#include <hdsm/crc.hpp>

#include "os/mapping.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <hdsm/export.h>

HDSM_VISIBLE_BEGIN
namespace hdsm::crc::detail {

/// Page size, frames and sets of a page buffer, validated.
struct Geometry {
  std::size_t page_size = 0;
  unsigned page_shift = 0;
  std::size_t frames = 0;
  std::size_t sets = 0;
};

/// The geometry for a local store of `local_store` bytes: frames = local_store / page_size, sets =
/// `sets` or (0) the largest power of two up to the frames (so 4 sets > frames). InvalidArgument when the
/// page size is not a power of two in [128 B, 64 KiB], `sets` is not a power of two, or the store holds fewer
/// pages than sets.
Geometry geometry(std::size_t local_store, std::size_t page_size, std::size_t sets);

inline constexpr std::size_t kMinPageSize = 128;
/// Localized runs that stay valid together: replacement never takes the frames of the last pages to
/// come in while older ones remain.
inline constexpr std::uint64_t kKeptLocals = 4;
inline constexpr std::size_t kMaxPageSize = 64 << 10;

class PageBuffer {
 public:
  /// A local store of `local_store` bytes, private to one worker.
  explicit PageBuffer(std::size_t local_store, const std::string& owner);

  /// Empties the buffer and lays it out for `g` (the caller has flushed what was modified).
  void configure(const Geometry& g);
  const Geometry& geometry() const { return geometry_; }
  const Lookup& lookup() const { return lookup_; }

  /// The way holding `page` (a page address) for reading or for writing, or -1.
  int find_read(std::uintptr_t page) const { return way_of(lookup_, read_tags_.data(), page); }
  int find_write(std::uintptr_t page) const { return way_of(lookup_, write_tags_.data(), page); }

  struct Victim {
    std::uintptr_t page = kNoPage;  // the page evicted from the chosen frame, if any
    bool dirty = false;             // it had write permission: its bytes must go home first
    bool single = false;            // written as a single writer (a direct put, no merge)
  };
  struct Place {
    int way = -1;
    std::size_t frame = 0;
    Victim victim;
  };
  /// Chooses a way of `page`'s set and a frame for it, evicting round-robin where needed. The
  /// victim's tags are gone, but its bytes stay in the frame until the caller installs the new page.
  [[gnu::always_inline]] Place place(std::uintptr_t page);
  /// The page is in the frame now. `registered`: the home counts this worker among its readers
  /// (false for read-only and single-writer copies, dropped at every acquire).
  [[gnu::always_inline]] void install(const Place& place, std::uintptr_t page, bool write, bool registered,
                                      bool single);
  /// A localized run now points into `way`'s frame: replacement counts its page among the last to
  /// come in, as if it came in now (a run handed out on a hit keeps its frame as one from a miss).
  void keep(int way) {
    const auto frame = static_cast<std::size_t>(way_frame_[static_cast<std::size_t>(way)]);
    if (recent_[0] == frame) return;  // the last page to come in or be handed out already
    frame_[frame].stamp = ++clock_;
    note_recent(frame);
  }
  /// Write permission for a page already buffered for reading.
  void grant_write(int way, bool single);
  /// Write permission gone (after the write-back); the page stays readable.
  void clean(int way);
  /// The page is gone from the buffer (an invalidation).
  void drop(int way);
  /// A place() whose page never came (the miss failed): its frame is free again.
  void unplace(const Place& place);
  /// Drops every copy the home does not know of (read-only and single-writer copies).
  std::size_t drop_unregistered();
  /// Every page invalid (the buffer must be clean).
  void clear();

  std::byte* frame_bytes(std::size_t frame) { return store_.data() + (frame << geometry_.page_shift); }
  std::byte* way_bytes(int way) { return frames_[static_cast<std::size_t>(way)]; }
  bool registered(int way) const;
  bool single(int way) const;
  std::uintptr_t page_at(int way) const { return read_tags_[static_cast<std::size_t>(way)]; }

  /// The ways with write permission, each once: (way, page, single).
  template <class F>
  void for_each_modified(F&& f) {
    for (const Modified& m : modified_)
      if (write_tags_[static_cast<std::size_t>(m.way)] == m.page) f(m.way, m.page, single(m.way));
  }
  /// Forgets the modified list (after every modified way was cleaned or dropped).
  void modified_done() { modified_.clear(); }

  std::uint64_t evictions = 0;
  std::uint64_t conflict_misses = 0;
  /// Frames listed for the next drop_unregistered (each once, so at most `frames`).
  std::size_t unregistered_listed() const { return unregistered_.size(); }
  /// Entries of the modified list (stale ones included: at most twice the frames).
  std::size_t modified_listed() const { return modified_.size(); }

 private:
  struct Modified {
    int way;
    std::uintptr_t page;
  };
  enum Flag : std::uint8_t { kRegistered = 1, kSingle = 2 };
  /// What a miss reads and writes of a frame, in one place (one cache line, not four).
  struct Frame {
    std::uint64_t stamp = 0;  // when its page came in, or a localized run last pointed into it
    std::int32_t way = -1;    // its way, or -1
    std::uint8_t flags = 0;
    std::uint8_t listed = 0;  // in unregistered_ already
  };
  [[gnu::always_inline]] void evict(int way, Victim& victim);
  /// One of the last kKeptLocals - 1 distinct pages to come in or be handed out as a run (with the
  /// page coming in now, kKeptLocals runs): replacement passes it over. Distinct pages, not the last
  /// ticks of the clock: a run handed out again (a table page read with every element) would
  /// otherwise take two of them and leave an older run unprotected.
  bool recent(std::size_t frame) const {
    return recent_[0] == frame || recent_[1] == frame || recent_[2] == frame;
  }
  void note_recent(std::size_t frame) {
    std::size_t i = 0;
    while (i + 1 < recent_.size() && recent_[i] != frame) ++i;
    for (; i > 0; --i) recent_[i] = recent_[i - 1];
    recent_[0] = frame;
  }
  std::size_t set_of(std::uintptr_t page) const { return detail::set_of(lookup_, page); }

  os::Mapping store_;
  Geometry geometry_;
  Lookup lookup_{};
  std::vector<std::uintptr_t> read_tags_, write_tags_;
  std::vector<std::byte*> frames_;  // per way: the local address of its page
  std::vector<int> way_frame_;      // per way: its frame, or -1
  std::vector<Frame> frame_;
  std::vector<std::size_t> free_frames_;
  std::uint64_t clock_ = 0;
  static constexpr std::size_t kNoFrame = ~std::size_t{0};
  static_assert(kKeptLocals == 4, "recent() looks at three frames");
  // The frames of the last distinct pages to come in or be handed out, the latest first.
  std::array<std::size_t, kKeptLocals - 1> recent_{kNoFrame, kNoFrame, kNoFrame};
  std::size_t next_frame_ = 0;  // round-robin replacement
  std::vector<Modified> modified_;
  std::vector<std::uint8_t> modified_kept_;  // per way, during compact_modified
  /// Lists a way given write permission; drops the entries of ways written back or evicted since
  /// when the list reaches twice the frames (a modified way holds a frame, so at most half of them
  /// stay), so a region that streams through many pages keeps it as bounded as the local store (its
  /// capacity, reserved once: no allocation on a miss).
  void note_modified(int way, std::uintptr_t page) {
    if (modified_.size() >= 2 * frame_.size()) [[unlikely]]
      compact_modified();
    modified_.push_back({way, page});
  }
  void compact_modified();
  void list_unregistered(std::size_t frame) {
    // Once per frame: a phase of read-only misses must not grow the list with every miss.
    if (frame_[frame].listed != 0) return;
    frame_[frame].listed = 1;
    unregistered_.push_back(frame);  // at most `frames` entries, reserved
  }
  std::vector<std::size_t> unregistered_;  // frames that may hold copies the home does not know of
};

inline void PageBuffer::evict(int way, Victim& victim) {
  const auto w = static_cast<std::size_t>(way);
  Frame& f = frame_[static_cast<std::size_t>(way_frame_[w])];
  victim.page = read_tags_[w];
  victim.dirty = write_tags_[w] != kNoPage;
  victim.single = (f.flags & kSingle) != 0;
  read_tags_[w] = write_tags_[w] = kNoPage;
  frames_[w] = nullptr;
  way_frame_[w] = -1;
  f.way = -1;
  f.flags = 0;
  ++evictions;
}

inline PageBuffer::Place PageBuffer::place(std::uintptr_t page) {
  Place p;
  const std::size_t base = set_of(page) * 4;
  for (std::size_t w = base; w < base + 4; ++w)
    if (read_tags_[w] == kNoPage) {
      p.way = static_cast<int>(w);
      break;
    }
  if (p.way >= 0) {
    if (!free_frames_.empty()) {
      p.frame = free_frames_.back();
      free_frames_.pop_back();
      return p;
    }
    // Capacity: the next frame in round-robin order gives way, whichever set its page is in, unless
    // it is one of the last pages to come in (localized runs may still point there). With fewer
    // frames than that, all are: the oldest gives way, so a run stays valid while frames - 1 more
    // pages come in (before, the round-robin frame did, which could be the run fetched just before).
    for (std::size_t tries = 0;; ++tries) {
      p.frame = next_frame_;
      if (++next_frame_ == geometry_.frames) next_frame_ = 0;  // no division on the miss path
      if (!recent(p.frame)) break;
      if (tries + 1 >= geometry_.frames) {
        for (std::size_t f = 0; f < geometry_.frames; ++f)
          if (frame_[f].stamp < frame_[p.frame].stamp) p.frame = f;
        break;
      }
    }
    evict(frame_[p.frame].way, p.victim);
    return p;
  }
  // The set is full: its oldest page gives way. With frames still free that is a conflict miss,
  // which 4 S > N keeps rare.
  if (!free_frames_.empty()) ++conflict_misses;
  p.way = static_cast<int>(base);
  for (std::size_t w = base + 1; w < base + 4; ++w)
    if (frame_[static_cast<std::size_t>(way_frame_[w])].stamp <
        frame_[static_cast<std::size_t>(way_frame_[static_cast<std::size_t>(p.way)])].stamp)
      p.way = static_cast<int>(w);
  p.frame = static_cast<std::size_t>(way_frame_[static_cast<std::size_t>(p.way)]);
  evict(p.way, p.victim);
  return p;
}

inline void PageBuffer::install(const Place& place, std::uintptr_t page, bool write, bool registered,
                                bool single) {
  const auto w = static_cast<std::size_t>(place.way);
  read_tags_[w] = page;
  write_tags_[w] = write ? page : kNoPage;
  frames_[w] = frame_bytes(place.frame);
  way_frame_[w] = static_cast<int>(place.frame);
  Frame& f = frame_[place.frame];
  f.way = place.way;
  f.stamp = ++clock_;
  note_recent(place.frame);
  f.flags = static_cast<std::uint8_t>((registered ? kRegistered : 0) | (single ? kSingle : 0));
  if (write) note_modified(place.way, page);
  if (!registered) list_unregistered(place.frame);
}

}  // namespace hdsm::crc::detail

HDSM_VISIBLE_END
