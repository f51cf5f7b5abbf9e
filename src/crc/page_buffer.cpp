#include "crc/page_buffer.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <bit>

namespace hdsm::crc::detail {

Geometry geometry(std::size_t local_store, std::size_t page_size, std::size_t sets) {
  if (!std::has_single_bit(page_size) || page_size < kMinPageSize || page_size > kMaxPageSize)
    throw InvalidArgument(fmt::format("crc page size {} B: it must be a power of two from {} B to {} KiB",
                                      page_size, kMinPageSize, kMaxPageSize >> 10));
  if (sets != 0 && !std::has_single_bit(sets))
    throw InvalidArgument(
        fmt::format("crc page buffer of {} sets: the set count must be a power of two", sets));
  Geometry g;
  g.page_size = page_size;
  g.page_shift = static_cast<unsigned>(std::countr_zero(page_size));
  g.frames = local_store / page_size;
  g.sets = sets;
  if (g.sets == 0) {
    g.sets = 1;
    while (g.sets * 2 <= g.frames) g.sets *= 2;
  }
  if (g.frames < g.sets)
    throw InvalidArgument(
        fmt::format("crc local store of {} holds {} pages of {} B, fewer than its {} sets: it needs at least "
                    "one page per "
                    "set (a larger local store, a smaller page size or fewer sets)",
                    format_bytes(local_store), g.frames, page_size, g.sets));
  return g;
}

PageBuffer::PageBuffer(std::size_t local_store, const std::string& owner)
    : store_(local_store, "local store of " + owner, /*populate=*/true) {}

void PageBuffer::configure(const Geometry& g) {
  geometry_ = g;
  const std::size_t ways = g.sets * 4;
  read_tags_.assign(ways, kNoPage);
  write_tags_.assign(ways, kNoPage);
  frames_.assign(ways, nullptr);
  way_frame_.assign(ways, -1);
  frame_way_.assign(g.frames, -1);
  frame_flags_.assign(g.frames, 0);
  frame_stamp_.assign(g.frames, 0);
  unregistered_listed_.assign(g.frames, 0);
  clock_ = 0;
  free_frames_.resize(g.frames);
  // Popped from the back: frame 0 first.
  for (std::size_t f = 0; f < g.frames; ++f) free_frames_[f] = g.frames - 1 - f;
  next_frame_ = 0;
  modified_.clear();
  unregistered_.clear();
  lookup_ = Lookup{.read_tags = read_tags_.data(),
                   .write_tags = write_tags_.data(),
                   .frames = frames_.data(),
                   .offset_mask = g.page_size - 1,
                   .page_shift = g.page_shift,
                   .set_mask = g.sets - 1,
                   .set_shift = static_cast<unsigned>(std::countr_zero(g.sets))};
}

void PageBuffer::evict(int way, Victim& victim) {
  const auto w = static_cast<std::size_t>(way);
  const auto frame = static_cast<std::size_t>(way_frame_[w]);
  victim.page = read_tags_[w];
  victim.dirty = write_tags_[w] != kNoPage;
  victim.single = (frame_flags_[frame] & kSingle) != 0;
  read_tags_[w] = write_tags_[w] = kNoPage;
  frames_[w] = nullptr;
  way_frame_[w] = -1;
  frame_way_[frame] = -1;
  frame_flags_[frame] = 0;
  ++evictions;
}

PageBuffer::Place PageBuffer::place(std::uintptr_t page) {
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
    // it is one of the last pages to come in (localized runs may still point there).
    for (std::size_t tries = 0;; ++tries) {
      p.frame = next_frame_;
      if (++next_frame_ == geometry_.frames) next_frame_ = 0;  // no division on the miss path
      if (!recent(p.frame) || tries + 1 >= geometry_.frames) break;
    }
    evict(frame_way_[p.frame], p.victim);
    return p;
  }
  // The set is full: its oldest page gives way. With frames still free that is a conflict miss,
  // which 4 S > N keeps rare.
  if (!free_frames_.empty()) ++conflict_misses;
  p.way = static_cast<int>(base);
  for (std::size_t w = base + 1; w < base + 4; ++w)
    if (frame_stamp_[static_cast<std::size_t>(way_frame_[w])] <
        frame_stamp_[static_cast<std::size_t>(way_frame_[static_cast<std::size_t>(p.way)])])
      p.way = static_cast<int>(w);
  p.frame = static_cast<std::size_t>(way_frame_[static_cast<std::size_t>(p.way)]);
  evict(p.way, p.victim);
  return p;
}

void PageBuffer::install(const Place& place, std::uintptr_t page, bool write, bool registered, bool single) {
  const auto w = static_cast<std::size_t>(place.way);
  read_tags_[w] = page;
  write_tags_[w] = write ? page : kNoPage;
  frames_[w] = frame_bytes(place.frame);
  way_frame_[w] = static_cast<int>(place.frame);
  frame_way_[place.frame] = place.way;
  frame_stamp_[place.frame] = ++clock_;
  frame_flags_[place.frame] =
      static_cast<std::uint8_t>((registered ? kRegistered : 0) | (single ? kSingle : 0));
  if (write) note_modified(place.way, page);
  if (!registered) list_unregistered(place.frame);
}

void PageBuffer::list_unregistered(std::size_t frame) {
  // Once per frame: a phase of read-only misses must not grow the list with every miss.
  if (unregistered_listed_[frame] != 0) return;
  unregistered_listed_[frame] = 1;
  unregistered_.push_back(frame);
}

void PageBuffer::grant_write(int way, bool single) {
  const auto w = static_cast<std::size_t>(way);
  write_tags_[w] = read_tags_[w];
  if (single) frame_flags_[static_cast<std::size_t>(way_frame_[w])] |= kSingle;
  note_modified(way, read_tags_[w]);
}

void PageBuffer::note_modified(int way, std::uintptr_t page) {
  if (modified_.size() >= 2 * write_tags_.size()) compact_modified();
  modified_.push_back({way, page});
}

void PageBuffer::compact_modified() {
  // In order (the release writes back in the order the pages were written), each way once.
  modified_kept_.assign(write_tags_.size(), 0);
  std::size_t kept = 0;
  for (const Modified& m : modified_) {
    const auto w = static_cast<std::size_t>(m.way);
    if (write_tags_[w] != m.page || modified_kept_[w] != 0) continue;
    modified_kept_[w] = 1;
    modified_[kept++] = m;
  }
  modified_.resize(kept);
}

void PageBuffer::clean(int way) {
  const auto w = static_cast<std::size_t>(way);
  write_tags_[w] = kNoPage;
  auto& flags = frame_flags_[static_cast<std::size_t>(way_frame_[w])];
  // A single writer's page went back whole, unknown to the directory: it is dropped at the next
  // acquire like a read-only copy.
  if ((flags & kSingle) != 0) {
    flags = 0;
    list_unregistered(static_cast<std::size_t>(way_frame_[w]));
  }
}

void PageBuffer::drop(int way) {
  const auto w = static_cast<std::size_t>(way);
  const int frame = way_frame_[w];
  if (frame < 0) return;
  read_tags_[w] = write_tags_[w] = kNoPage;
  frames_[w] = nullptr;
  way_frame_[w] = -1;
  frame_way_[static_cast<std::size_t>(frame)] = -1;
  frame_flags_[static_cast<std::size_t>(frame)] = 0;
  free_frames_.push_back(static_cast<std::size_t>(frame));
}

std::size_t PageBuffer::drop_unregistered() {
  std::size_t dropped = 0;
  for (const std::size_t f : unregistered_) {
    unregistered_listed_[f] = 0;
    if (frame_way_[f] >= 0 && (frame_flags_[f] & kRegistered) == 0) {
      drop(frame_way_[f]);
      ++dropped;
    }
  }
  unregistered_.clear();
  return dropped;
}

void PageBuffer::clear() { configure(geometry_); }

bool PageBuffer::registered(int way) const {
  const int frame = way_frame_[static_cast<std::size_t>(way)];
  return frame >= 0 && (frame_flags_[static_cast<std::size_t>(frame)] & kRegistered) != 0;
}

bool PageBuffer::single(int way) const {
  const int frame = way_frame_[static_cast<std::size_t>(way)];
  return frame >= 0 && (frame_flags_[static_cast<std::size_t>(frame)] & kSingle) != 0;
}

}  // namespace hdsm::crc::detail
