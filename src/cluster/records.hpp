// Modified pages on the wire: one record per page, in the cheaper of two encodings of the bytes its
// writer changed against the page's twin. Runs (coherence::diff_runs): a header per run of changed
// bytes, then those bytes; a fully rewritten page is one run. A lane plan: a page is 8-byte words,
// and each byte lane of the words the record covers is sent in every word, in the words a bitmap
// names, or never; the bytes follow word by word. A plan costs less where runs would carry many
// equal bytes or headers: an array of floats whose top bytes stay, counters whose low byte changes.
// The same records carry single-writer broadcasts, diffs to rank 0 and rank 0's merged pages.
#pragma once

#include "coherence/page_diff.hpp"

#include <hdsm/export.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm::cluster::detail {

struct RecordHeader {
  std::uint64_t page;
  std::uint32_t runs;
  std::uint32_t writer;
};

/// A lane record's plan: what each byte lane of the words [first_word, first_word + words) sends.
enum class Lane : std::uint8_t { none = 0, every = 1, bitmap = 2 };
/// Lane k of a plan (two bits a lane, lane 0 lowest).
inline Lane lane_of(std::uint16_t plan, int k) { return static_cast<Lane>((plan >> (2 * k)) & 3u); }
/// A lane record's plan on the wire: its first word, then two bits a lane.
inline constexpr std::size_t kLanePlanBytes = sizeof(std::uint32_t) + sizeof(std::uint16_t);

/// A record inside a buffer; `runs` and `data` point into it (the runs may be unaligned: read them
/// with run()).
struct RecordView {
  std::uint64_t page;
  std::uint32_t writer;
  std::uint32_t run_count;  // a lane record: its words
  const std::byte* runs;    // a lane record: its plan, then a bitmap for each bitmap lane
  const std::byte* data;
  std::size_t data_bytes;
  bool whole;                // the whole page, from the rank it was private to (applied before any change)
  bool lanes;                // a lane plan and its bytes, not runs
  std::uint32_t first_word;  // a lane record: the first word it covers
  std::uint16_t plan;        // a lane record: two bits a lane (a Lane), lane 0 lowest
  coherence::DiffRun run(std::uint32_t i) const;
  /// The bytes between the header and the data: the runs, or the plan and the bitmaps.
  std::size_t meta_bytes() const;
  /// fn(word, mask) for each word a lane record covers, with bit k of `mask` set where the record
  /// carries byte k of the word.
  template <class F>
  void for_each_word(F&& fn) const;
  /// fn(DiffRun) for each maximal run of bytes the record carries, whichever the encoding.
  template <class F>
  void for_each_run(F&& fn) const;
};

class RecordWriter {
 public:
  /// Encodes the bytes of `now` that differ from `before` as page `page` of `writer`; nothing when
  /// none differs. Returns the bytes that differ.
  /// `exact`: the page has other writers, so the record carries changed bytes alone, never equal
  /// ones (those may be another rank's changes, which this rank's old values would overwrite).
  std::size_t add(std::uint64_t page, int writer, std::span<const std::byte> now,
                  std::span<const std::byte> before, bool exact = false);
  /// Encodes the whole page `page` (one run, marked whole).
  void add_whole(std::uint64_t page, int writer, std::span<const std::byte> now);
  /// Copies a record of another buffer.
  void append(const RecordView& record);
  std::span<const std::byte> bytes() const { return out_; }
  std::span<std::byte> mutable_bytes() { return out_; }
  std::uint64_t payload() const { return payload_; }
  std::uint64_t headers() const { return out_.size() - payload_; }

 private:
  /// A lane record's plan for a page: the words [first, last] it covers, the mode of each lane,
  /// and its bytes.
  struct LanePlan {
    bool possible = false;  // the page is whole words (changed is counted either way)
    std::size_t changed = 0, first = 0, last = 0;
    std::uint16_t plan = 0;
    unsigned every = 0;  // bit k: lane k sent in every word
    std::size_t bitmaps = 0, bitmap_bytes = 0, data = 0;
    std::size_t fewest_runs = 0;  // the runs diff_runs would find at least (exact: that many)
    std::size_t cost() const { return sizeof(RecordHeader) + kLanePlanBytes + bitmaps * bitmap_bytes + data; }
  };
  LanePlan plan_lanes(std::span<const std::byte> now, std::span<const std::byte> before, bool exact);
  void add_lanes(const LanePlan& plan, std::uint64_t page, int writer, std::span<const std::byte> now);

  std::vector<std::byte> out_;
  std::vector<coherence::DiffRun> runs_;
  std::vector<std::uint8_t> masks_;  // add_lanes: the changed bytes of each word
  std::uint64_t payload_ = 0;
};

/// Records for each rank: a record goes to every rank but its writer (and rank 0, which keeps the
/// merged pages).
class PerRankRecords {
 public:
  explicit PerRankRecords(int ranks) : out_(static_cast<std::size_t>(ranks)) {}
  void add_record(const RecordView& record);
  /// Rank r's buffer at index r (empty for rank 0 and ranks without records).
  std::vector<std::span<const std::byte>> views() const;
  std::uint64_t payload() const;
  std::uint64_t headers() const;

 private:
  std::vector<RecordWriter> out_;
};

/// The pages records may name: [first, end), each `bytes` long.
struct RecordPages {
  RecordPages(std::size_t page_bytes, std::uint64_t first_page, std::uint64_t end_page)
      : bytes(page_bytes), first(first_page), end(end_page) {}
  /// Any page number (tests and benchmarks, whose records name made-up pages).
  static RecordPages any(std::size_t bytes) { return {bytes, 0, ~std::uint64_t{0}}; }
  std::size_t bytes;
  std::uint64_t first;
  std::uint64_t end;
};

/// Calls fn(RecordView) for every record of `buffer`; hdsm::Error when the buffer is malformed (a
/// record of a page outside `pages`, or reaching outside its page, included).
template <class F>
void for_each_record(std::span<const std::byte> buffer, const RecordPages& pages, F&& fn);

/// Writes the record's bytes into `page`, which nothing else writes meanwhile (the bytes between
/// them may be rewritten with their own values).
void apply_record(const RecordView& record, std::byte* page);

/// Whether lane records move a word's bytes with a byte shuffle (SSSE3, where the CPU has it) or a
/// byte at a time: tests check both. Returns the previous setting; `on` has no effect without SSSE3.
bool lane_shuffles(bool on);

/// Overlapping runs of different writers in one page: a racy kernel.
class RaceCheck {
 public:
  RaceCheck(bool enabled, const RecordPages& pages) : enabled_(enabled), pages_(pages) {}
  void add(std::span<const std::byte> records);
  /// Prints one warning per racy page (the page, the byte range, the ranks) and returns how many.
  std::uint64_t report(const std::string& kernel, const std::byte* base);

 private:
  struct Run {
    std::uint64_t page;
    std::uint32_t begin, end;
    std::uint32_t writer;
  };
  bool enabled_;
  RecordPages pages_;
  std::vector<Run> runs_;
};

// Implementation of the templates.
RecordView parse_record(std::span<const std::byte> buffer, const RecordPages& pages, std::size_t& at);

/// The 8x8 bit matrix of `x` (row i: byte i, column k: bit k) transposed: bit k of byte i becomes
/// bit i of byte k. A lane record's bitmaps (a byte per lane for eight words) become the eight
/// words' masks, and back.
constexpr std::uint64_t transpose_bits(std::uint64_t x) {
  std::uint64_t t = (x ^ (x >> 7)) & 0x00aa00aa00aa00aaull;
  x ^= t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000cccc0000ccccull;
  x ^= t ^ (t << 14);
  t = (x ^ (x >> 28)) & 0x00000000f0f0f0f0ull;
  return x ^ t ^ (t << 28);
}

template <class F>
void for_each_record(std::span<const std::byte> buffer, const RecordPages& pages, F&& fn) {
  for (std::size_t at = 0; at < buffer.size();) fn(parse_record(buffer, pages, at));
}

/// A lane record's word masks, eight words at a time: a byte of each bitmap lane's bitmap and 0xff
/// for each lane sent in every word, transposed.
class LaneMasks {
 public:
  explicit LaneMasks(const RecordView& record) : words_(record.run_count), group_bytes_((words_ + 7) / 8) {
    for (int k = 0; k < 8; ++k) {
      const Lane lane = lane_of(record.plan, k);
      if (lane == Lane::every) every_ |= std::uint64_t{0xff} << (8 * k);
      if (lane == Lane::bitmap) {
        bitmap_[bitmaps_] = record.runs + kLanePlanBytes + static_cast<std::size_t>(bitmaps_) * group_bytes_;
        shift_[bitmaps_++] = 8 * k;
      }
    }
  }
  std::size_t groups() const { return group_bytes_; }
  /// No bitmap lane: every word's mask is every().
  bool uniform() const { return bitmaps_ == 0; }
  unsigned every() const { return static_cast<unsigned>(transpose_bits(every_) & 0xffu); }
  /// The words of group g: eight, but fewer in the last group.
  std::size_t words(std::size_t g) const { return std::min<std::size_t>(8, words_ - 8 * g); }
  /// Byte i: the mask of the group's word i.
  std::uint64_t group(std::size_t g) const {
    std::uint64_t t = every_;
    for (int b = 0; b < bitmaps_; ++b)
      t |= std::uint64_t{static_cast<std::uint8_t>(bitmap_[b][g])} << shift_[b];
    return transpose_bits(t);
  }

 private:
  std::size_t words_, group_bytes_;
  std::uint64_t every_ = 0;
  const std::byte* bitmap_[8] = {};
  int shift_[8] = {};
  int bitmaps_ = 0;
};

template <class F>
void RecordView::for_each_word(F&& fn) const {
  const LaneMasks masks(*this);
  for (std::size_t g = 0; g < masks.groups(); ++g) {
    const std::uint64_t m = masks.group(g);
    for (std::size_t i = 0; i < masks.words(g); ++i)
      fn(first_word + 8 * g + i, static_cast<unsigned>((m >> (8 * i)) & 0xffu));
  }
}

template <class F>
void RecordView::for_each_run(F&& fn) const {
  if (!lanes) {
    for (std::uint32_t i = 0; i < run_count; ++i) fn(run(i));
    return;
  }
  std::uint32_t begin = 0, end = 0;  // the open run, [begin, end)
  bool open = false;
  for_each_word([&](std::size_t word, unsigned bits) {
    for (std::uint32_t k = 0; k < 8; ++k) {
      if (((bits >> k) & 1u) == 0) continue;
      const auto b = static_cast<std::uint32_t>(8 * word + k);
      if (open && b == end) {
        ++end;
        continue;
      }
      if (open) fn(coherence::DiffRun{begin, end - begin});
      begin = b;
      end = b + 1;
      open = true;
    }
  });
  if (open) fn(coherence::DiffRun{begin, end - begin});
}

}  // namespace hdsm::cluster::detail
HDSM_VISIBLE_END
