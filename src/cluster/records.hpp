// Modified pages on the wire: one record per page, the runs of bytes its writer changed against the
// page's twin (coherence::diff_runs), then those bytes. A fully rewritten page is one run; a page
// whose writer changed a few words costs those words and a header per run. Where that costs more
// than a bitmap of the changed bytes (a bit a byte) and those bytes alone, as for counters whose low
// byte changes, the record is such a mask instead. The same records carry single-writer broadcasts,
// diffs to rank 0 and rank 0's merged pages.
#pragma once

#include "coherence/page_diff.hpp"

#include <hdsm/export.h>

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

/// A record inside a buffer; `runs` and `data` point into it (the runs may be unaligned: read them
/// with run()).
struct RecordView {
  std::uint64_t page;
  std::uint32_t writer;
  std::uint32_t run_count;  // a mask record: the bytes of its bitmap
  const std::byte* runs;    // a mask record: the bitmap (bit k of byte j: page byte 8 j + k changed)
  const std::byte* data;
  std::size_t data_bytes;
  bool whole;  // the whole page, from the rank it was private to (applied before any change)
  bool mask;   // the changed bytes as a bitmap and those bytes, not as runs
  coherence::DiffRun run(std::uint32_t i) const;
  /// The bytes between the header and the data: the runs, or the bitmap.
  std::size_t meta_bytes() const {
    return mask ? run_count : std::size_t{run_count} * sizeof(coherence::DiffRun);
  }
  /// fn(DiffRun) for each maximal run of changed bytes, whichever the encoding.
  template <class F>
  void for_each_run(F&& fn) const;
};

class RecordWriter {
 public:
  /// Encodes the bytes of `now` that differ from `before` as page `page` of `writer`; nothing when
  /// none differs. Returns the bytes that differ.
  /// `exact`: the page has other writers, so runs are never joined across equal bytes (those may be
  /// another rank's changes, which a joined run would overwrite with this rank's old values).
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
  std::vector<std::byte> out_;
  /// A mask record of the `changed` bytes of `now` that differ from `before`.
  void add_mask(std::uint64_t page, int writer, std::span<const std::byte> now,
                std::span<const std::byte> before, std::size_t changed);

  std::vector<coherence::DiffRun> runs_;
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

/// Calls fn(RecordView) for every record of `buffer`; hdsm::Error when the buffer is malformed.
template <class F>
void for_each_record(std::span<const std::byte> buffer, F&& fn);

/// Writes the record's runs into `page`.
void apply_record(const RecordView& record, std::byte* page);

/// Overlapping runs of different writers in one page: a racy kernel.
class RaceCheck {
 public:
  explicit RaceCheck(bool enabled) : enabled_(enabled) {}
  void add(std::span<const std::byte> records);
  /// Prints one warning per racy page (the page, the byte range, the ranks) and returns how many.
  std::uint64_t report(const std::string& kernel, const std::byte* base, std::size_t page_bytes);

 private:
  struct Run {
    std::uint64_t page;
    std::uint32_t begin, end;
    std::uint32_t writer;
  };
  bool enabled_;
  std::vector<Run> runs_;
};

// Implementation of the template.
RecordView parse_record(std::span<const std::byte> buffer, std::size_t& at);

template <class F>
void for_each_record(std::span<const std::byte> buffer, F&& fn) {
  for (std::size_t at = 0; at < buffer.size();) fn(parse_record(buffer, at));
}

template <class F>
void RecordView::for_each_run(F&& fn) const {
  if (!mask) {
    for (std::uint32_t i = 0; i < run_count; ++i) fn(run(i));
    return;
  }
  std::uint32_t begin = 0, end = 0;  // the open run, [begin, end)
  bool open = false;
  for (std::uint32_t j = 0; j < run_count; ++j) {
    const auto bits = static_cast<std::uint8_t>(runs[j]);
    for (std::uint32_t k = 0; k < 8; ++k) {
      if (((bits >> k) & 1u) == 0) continue;
      const std::uint32_t b = 8 * j + k;
      if (open && b == end) {
        ++end;
        continue;
      }
      if (open) fn(coherence::DiffRun{begin, end - begin});
      begin = b;
      end = b + 1;
      open = true;
    }
  }
  if (open) fn(coherence::DiffRun{begin, end - begin});
}

}  // namespace hdsm::cluster::detail
HDSM_VISIBLE_END
