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
  if (g.frames == 0)
    throw InvalidArgument(
        fmt::format("crc local store of {} B holds no page of {} B: give it at least one page "
                    "(HDSM_CRC_LOCAL_STORE, Options::local_store), or use smaller pages (HDSM_CRC_PAGE_SIZE, "
                    "Options::page_size)",
                    local_store, page_size));  // in bytes: 4095 B would read as 4.0 KiB
  if (g.frames < g.sets)
    throw InvalidArgument(
        fmt::format("crc local store of {} holds {} pages of {} B, fewer than its {} sets: it needs at least "
                    "one page per set (a larger local store, a smaller page size or fewer sets)",
                    format_bytes(local_store), g.frames, page_size, g.sets));
  if (g.sets * 4 <= g.frames)
    throw InvalidArgument(fmt::format(
        "crc page buffer of {} sets for {} frames of {} B: it needs 4 x sets > frames (4 ways a set; with "
        "fewer ways, frames stay unused or sets fill while frames are free): at least {} sets, or 0 for the "
        "default (the largest power of two up to the frames)",
        g.sets, g.frames, page_size, std::bit_ceil(g.frames / 4 + 1)));
  return g;
}

// A local store is populated up front, so that a worker's first misses take no page faults (the
// seed's store is 256 KiB of on-chip memory). One of gigabytes is not: 4 workers with 1 GiB each
// committed 4.3 GB for 4 MiB of data touched.
constexpr std::size_t kPopulateLimit = std::size_t{64} << 20;

PageBuffer::PageBuffer(std::size_t local_store, const std::string& owner)
    : store_(local_store, "local store of " + owner, /*populate=*/local_store <= kPopulateLimit) {}

void PageBuffer::configure(const Geometry& g) {
  geometry_ = g;
  const std::size_t ways = g.sets * 4;
  read_tags_.assign(ways, kNoPage);
  write_tags_.assign(ways, kNoPage);
  frames_.assign(ways, nullptr);
  way_frame_.assign(ways, -1);
  frame_.assign(g.frames, Frame{});
  clock_ = 0;
  recent_.fill(kNoFrame);
  free_frames_.resize(g.frames);
  // Popped from the back: frame 0 first.
  for (std::size_t f = 0; f < g.frames; ++f) free_frames_[f] = g.frames - 1 - f;
  next_frame_ = 0;
  modified_.clear();
  modified_.reserve(2 * g.frames + 1);
  modified_kept_.reserve(ways);  // compact_modified's marks: no allocation on a miss either
  unregistered_.clear();
  unregistered_.reserve(g.frames);
  lookup_ = Lookup{.read_tags = read_tags_.data(),
                   .write_tags = write_tags_.data(),
                   .frames = frames_.data(),
                   .offset_mask = g.page_size - 1,
                   .page_shift = g.page_shift,
                   .set_mask = g.sets - 1,
                   .set_shift = static_cast<unsigned>(std::countr_zero(g.sets))};
}

void PageBuffer::grant_write(int way, bool single) {
  const auto w = static_cast<std::size_t>(way);
  write_tags_[w] = read_tags_[w];
  if (single) frame_[static_cast<std::size_t>(way_frame_[w])].flags |= kSingle;
  note_modified(way, read_tags_[w]);
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
  auto& flags = frame_[static_cast<std::size_t>(way_frame_[w])].flags;
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
  frame_[static_cast<std::size_t>(frame)].way = -1;
  frame_[static_cast<std::size_t>(frame)].flags = 0;
  free_frames_.push_back(static_cast<std::size_t>(frame));
}

void PageBuffer::unplace(const Place& place) {
  frame_[place.frame].way = -1;
  frame_[place.frame].flags = 0;
  free_frames_.push_back(place.frame);
}

std::size_t PageBuffer::drop_unregistered() {
  std::size_t dropped = 0;
  for (const std::size_t f : unregistered_) {
    frame_[f].listed = 0;
    if (frame_[f].way >= 0 && (frame_[f].flags & kRegistered) == 0) {
      drop(frame_[f].way);
      ++dropped;
    }
  }
  unregistered_.clear();
  return dropped;
}

void PageBuffer::clear() { configure(geometry_); }

bool PageBuffer::registered(int way) const {
  const int frame = way_frame_[static_cast<std::size_t>(way)];
  return frame >= 0 && (frame_[static_cast<std::size_t>(frame)].flags & kRegistered) != 0;
}

bool PageBuffer::single(int way) const {
  const int frame = way_frame_[static_cast<std::size_t>(way)];
  return frame >= 0 && (frame_[static_cast<std::size_t>(frame)].flags & kSingle) != 0;
}

}  // namespace hdsm::crc::detail
