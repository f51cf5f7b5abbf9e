#include "cluster/records.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace hdsm::cluster::detail {
namespace {

constexpr std::uint32_t kWholeFlag = 0x8000'0000u;

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
  std::size_t changed = 0;
  coherence::diff_runs(now, before, runs_, exact ? 1 : 8, &changed);
  if (runs_.empty()) return 0;
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

void RecordWriter::add_whole(std::uint64_t page, int writer, std::span<const std::byte> now) {
  put(out_, RecordHeader{page, 1, static_cast<std::uint32_t>(writer) | kWholeFlag});
  put(out_, coherence::DiffRun{0, static_cast<std::uint32_t>(now.size())});
  out_.insert(out_.end(), now.begin(), now.end());
  payload_ += now.size();
}

void RecordWriter::append(const RecordView& record) {
  put(out_, RecordHeader{record.page, record.run_count, record.writer | (record.whole ? kWholeFlag : 0u)});
  const auto* runs = record.runs;
  out_.insert(out_.end(), runs, runs + std::size_t{record.run_count} * sizeof(coherence::DiffRun));
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
  if (h.runs > (buffer.size() - runs_at) / sizeof(coherence::DiffRun)) throw malformed("truncated runs");
  RecordView v{h.page, h.writer & ~kWholeFlag,      h.runs, buffer.data() + runs_at, nullptr,
               0,      (h.writer & kWholeFlag) != 0};
  std::size_t data = 0;
  for (std::uint32_t i = 0; i < h.runs; ++i) data += v.run(i).length;
  const std::size_t data_at = runs_at + std::size_t{h.runs} * sizeof(coherence::DiffRun);
  if (data > buffer.size() - data_at) throw malformed("truncated data");
  v.data = buffer.data() + data_at;
  v.data_bytes = data;
  at = data_at + data;
  return v;
}

void apply_record(const RecordView& record, std::byte* page) {
  const std::byte* from = record.data;
  for (std::uint32_t i = 0; i < record.run_count; ++i) {
    const coherence::DiffRun r = record.run(i);
    std::memcpy(page + r.offset, from, r.length);
    from += r.length;
  }
}

std::size_t records_changed_bytes(std::span<const std::byte> now, std::span<const std::byte> before) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < now.size(); ++i) n += now[i] != before[i] ? 1 : 0;
  return n;
}

void RaceCheck::add(std::span<const std::byte> records) {
  if (!enabled_) return;
  for_each_record(records, [&](const RecordView& r) {
    if (r.whole) return;  // a holder's page, not a change
    for (std::uint32_t i = 0; i < r.run_count; ++i) {
      const coherence::DiffRun run = r.run(i);
      runs_.push_back({r.page, run.offset, run.offset + run.length, r.writer});
    }
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
