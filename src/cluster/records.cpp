#include "cluster/records.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

namespace hdsm::cluster::detail {
namespace {

constexpr std::uint32_t kWholeFlag = 0x8000'0000u;
constexpr std::uint32_t kMaskFlag = 0x4000'0000u;
constexpr std::uint32_t kFlags = kWholeFlag | kMaskFlag;

// The bits set in each byte value (without -mpopcnt std::popcount is a call into libgcc).
constexpr auto kBitsSet = [] {
  std::array<std::uint8_t, 256> t{};
  for (unsigned v = 0; v < 256; ++v) t[v] = static_cast<std::uint8_t>((v & 1u) + t[v >> 1]);
  return t;
}();

template <class T>
void put(std::vector<std::byte>& out, const T& value) {
  const auto* b = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), b, b + sizeof(T));
}

}  // namespace

coherence::DiffRun RecordView::run(std::uint32_t i) const {
  coherence::DiffRun r{};
  std::memcpy(&r, runs + std::size_t{i} * sizeof(coherence::DiffRun), sizeof r);
  return r;
}

std::size_t RecordWriter::add(std::uint64_t page, int writer, std::span<const std::byte> now,
                              std::span<const std::byte> before, bool exact) {
  runs_.clear();
  const std::size_t covered = coherence::diff_runs(now, before, runs_, exact ? 1 : 8);
  if (runs_.empty()) return 0;
  // Exact runs are the changed bytes; joined ones carry equal bytes too, which only a count of their
  // own tells apart (bytes outside the runs are equal).
  std::size_t changed = covered;
  if (!exact) {
    changed = 0;
    for (const coherence::DiffRun& r : runs_)
      changed +=
          coherence::differing_bytes(now.subspan(r.offset, r.length), before.subspan(r.offset, r.length));
  }
  // Runs (a header each, and the equal bytes a joined run carries) or a bitmap and the changed bytes
  // alone, where that halves the bytes: a bitmap costs the sender and each receiver a pass a byte
  // (3-5 and 2-3 us a 4 KiB page on the development VM, against 2 us and 0.1 for runs), more than the
  // bytes a smaller saving spares take to move. A mask is exact, so it serves pages of several
  // writers too.
  if (2 * ((now.size() + 7) / 8 + changed) <= runs_.size() * sizeof(coherence::DiffRun) + covered) {
    add_mask(page, writer, now, before, changed);
    return changed;
  }
  put(out_, RecordHeader{page, static_cast<std::uint32_t>(runs_.size()), static_cast<std::uint32_t>(writer)});
  std::size_t data = 0;
  for (const coherence::DiffRun& r : runs_) {
    put(out_, r);
    data += r.length;
  }
  for (const coherence::DiffRun& r : runs_) {
    const std::byte* from = now.data() + r.offset;
    out_.insert(out_.end(), from, from + r.length);
  }
  payload_ += data;
  return changed;
}

// A word at a time: the changed bytes of a word become its bitmap byte in one multiplication, which
// gathers bit 8k of the folded XOR (byte k nonzero) into bit k of the top byte.
void RecordWriter::add_mask(std::uint64_t page, int writer, std::span<const std::byte> now,
                            std::span<const std::byte> before, std::size_t changed) {
  const std::size_t n = now.size(), mask_bytes = (n + 7) / 8;
  put(out_, RecordHeader{page, static_cast<std::uint32_t>(mask_bytes),
                         static_cast<std::uint32_t>(writer) | kMaskFlag});
  const std::size_t bitmap_at = out_.size();
  out_.resize(bitmap_at + mask_bytes + changed);
  std::byte* const bitmap = out_.data() + bitmap_at;
  std::byte* data = bitmap + mask_bytes;
  const auto set = [&](std::size_t j, unsigned bits) {
    bitmap[j] = static_cast<std::byte>(bits);
    if (bits == 0xffu) {  // a whole word
      std::memcpy(data, now.data() + 8 * j, 8);
      data += 8;
      return;
    }
    for (; bits != 0; bits &= bits - 1)
      *data++ = now[8 * j + static_cast<std::size_t>(std::countr_zero(bits))];
  };
  std::size_t j = 0;
  for (; 8 * j + 8 <= n; ++j) {
    std::uint64_t a = 0, b = 0;
    std::memcpy(&a, now.data() + 8 * j, 8);
    std::memcpy(&b, before.data() + 8 * j, 8);
    std::uint64_t d = a ^ b;
    if (d == 0) {
      bitmap[j] = std::byte{0};
      continue;
    }
    static_assert(std::endian::native == std::endian::little, "byte k of a loaded word is its bits 8k..8k+7");
    d |= d >> 4;
    d |= d >> 2;
    d |= d >> 1;
    set(j, static_cast<unsigned>(((d & 0x0101010101010101ull) * 0x0102040810204080ull) >> 56));
  }
  for (; j < mask_bytes; ++j) {
    unsigned bits = 0;
    for (std::size_t k = 0; k < 8 && 8 * j + k < n; ++k)
      if (now[8 * j + k] != before[8 * j + k]) bits |= 1u << k;
    set(j, bits);
  }
  if (data != out_.data() + out_.size())
    throw Error(Errc::system, "cluster: a page's changed bytes were miscounted");
  payload_ += changed;
}

void RecordWriter::add_whole(std::uint64_t page, int writer, std::span<const std::byte> now) {
  put(out_, RecordHeader{page, 1, static_cast<std::uint32_t>(writer) | kWholeFlag});
  put(out_, coherence::DiffRun{0, static_cast<std::uint32_t>(now.size())});
  out_.insert(out_.end(), now.begin(), now.end());
  payload_ += now.size();
}

void RecordWriter::append(const RecordView& record) {
  put(out_, RecordHeader{record.page, record.run_count,
                         record.writer | (record.whole ? kWholeFlag : 0u) | (record.mask ? kMaskFlag : 0u)});
  const auto* runs = record.runs;
  out_.insert(out_.end(), runs, runs + record.meta_bytes());
  out_.insert(out_.end(), record.data, record.data + record.data_bytes);
  payload_ += record.data_bytes;
}

void PerRankRecords::add_record(const RecordView& record) {
  for (std::size_t r = 1; r < out_.size(); ++r)
    if (r != record.writer) out_[r].append(record);
}

std::vector<std::span<const std::byte>> PerRankRecords::views() const {
  std::vector<std::span<const std::byte>> v;
  v.reserve(out_.size());
  for (const RecordWriter& w : out_) v.push_back(w.bytes());
  return v;
}

std::uint64_t PerRankRecords::payload() const {
  std::uint64_t n = 0;
  for (const RecordWriter& w : out_) n += w.payload();
  return n;
}

std::uint64_t PerRankRecords::headers() const {
  std::uint64_t n = 0;
  for (const RecordWriter& w : out_) n += w.headers();
  return n;
}

RecordView parse_record(std::span<const std::byte> buffer, std::size_t& at) {
  const auto malformed = [&](const char* what) {
    return Error(Errc::system, fmt::format("cluster: a malformed page record at byte {} of {}: {}", at,
                                           buffer.size(), what));
  };
  if (buffer.size() - at < sizeof(RecordHeader)) throw malformed("truncated header");
  RecordHeader h{};
  std::memcpy(&h, buffer.data() + at, sizeof h);
  const std::size_t runs_at = at + sizeof h;
  const bool mask = (h.writer & kMaskFlag) != 0;
  if (mask && (h.writer & kWholeFlag) != 0) throw malformed("a whole page as a mask");
  if (h.runs > (buffer.size() - runs_at) / (mask ? 1 : sizeof(coherence::DiffRun)))
    throw malformed("truncated runs");
  RecordView v{h.page, h.writer & ~kFlags,           h.runs, buffer.data() + runs_at, nullptr,
               0,      (h.writer & kWholeFlag) != 0, mask};
  std::size_t data = 0;
  if (mask)
    for (std::uint32_t j = 0; j < h.runs; ++j) data += kBitsSet[static_cast<std::uint8_t>(v.runs[j])];
  else
    for (std::uint32_t i = 0; i < h.runs; ++i) data += v.run(i).length;
  const std::size_t data_at = runs_at + v.meta_bytes();
  if (data > buffer.size() - data_at) throw malformed("truncated data");
  v.data = buffer.data() + data_at;
  v.data_bytes = data;
  at = data_at + data;
  return v;
}

void apply_record(const RecordView& record, std::byte* page) {
  const std::byte* from = record.data;
  if (record.mask) {
    for (std::uint32_t j = 0; j < record.run_count; ++j) {
      auto bits = static_cast<unsigned>(record.runs[j]);
      if (bits == 0xffu) {  // a whole word: a page is whole words
        std::memcpy(page + 8 * std::size_t{j}, from, 8);
        from += 8;
        continue;
      }
      for (; bits != 0; bits &= bits - 1)
        page[8 * std::size_t{j} + static_cast<std::size_t>(std::countr_zero(bits))] = *from++;
    }
    return;
  }
  for (std::uint32_t i = 0; i < record.run_count; ++i) {
    const coherence::DiffRun r = record.run(i);
    std::memcpy(page + r.offset, from, r.length);
    from += r.length;
  }
}

void RaceCheck::add(std::span<const std::byte> records) {
  if (!enabled_) return;
  for_each_record(records, [&](const RecordView& r) {
    if (r.whole) return;  // a holder's page, not a change
    r.for_each_run([&](const coherence::DiffRun& run) {
      runs_.push_back({r.page, run.offset, run.offset + run.length, r.writer});
    });
  });
}

std::uint64_t RaceCheck::report(const std::string& kernel, const std::byte* base, std::size_t page_bytes) {
  if (!enabled_) return 0;
  std::sort(runs_.begin(), runs_.end(), [](const Run& a, const Run& b) {
    return a.page != b.page ? a.page < b.page : a.begin < b.begin;
  });
  std::uint64_t racy_pages = 0;
  for (std::size_t i = 0; i < runs_.size();) {
    std::size_t j = i;
    bool reported = false;
    // Within one page, compare each run with the furthest-reaching run of another writer before it.
    for (std::size_t k = i + 1; k < runs_.size() && runs_[k].page == runs_[i].page; ++k) {
      for (std::size_t m = i; m < k && !reported; ++m) {
        const Run &a = runs_[m], &b = runs_[k];
        if (a.writer == b.writer || a.end <= b.begin) continue;
        const std::uint32_t from = std::max(a.begin, b.begin), to = std::min(a.end, b.end);
        fmt::print(stderr,
                   "hdsm cluster: warning: kernel '{}' is racy: ranks {} and {} both wrote bytes [{}, {}) of "
                   "page {} "
                   "(address {}); its result there is undefined\n",
                   kernel, std::min(a.writer, b.writer), std::max(a.writer, b.writer), from, to, a.page,
                   static_cast<const void*>(base + a.page * page_bytes + from));
        reported = true;
      }
      j = k;
    }
    racy_pages += reported ? 1 : 0;
    i = j + 1;
  }
  runs_.clear();
  return racy_pages;
}

}  // namespace hdsm::cluster::detail
