#include "cluster/records.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstring>
#include <limits>
#include <string_view>

#if defined(__x86_64__) || defined(__SSE2__)
#include <immintrin.h>
#endif

namespace hdsm::cluster::detail {
namespace {

constexpr std::uint32_t kWholeFlag = 0x8000'0000u;
constexpr std::uint32_t kLanesFlag = 0x4000'0000u;
constexpr std::uint32_t kFlags = kWholeFlag | kLanesFlag;
constexpr std::uint16_t kEveryLane = 0x5555;  // every lane of every word

/// The bits set in each byte of `x`, in that byte (without -mpopcnt std::popcount is a call into
/// libgcc).
constexpr std::uint64_t byte_bits(std::uint64_t x) {
  x -= (x >> 1) & 0x5555555555555555ull;
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  return (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
}

// The bits set in each byte value.
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

std::uint64_t load_word(const std::byte* p) {
  std::uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

int bitmap_lanes(std::uint16_t plan) {
  int n = 0;
  for (int k = 0; k < 8; ++k) n += lane_of(plan, k) == Lane::bitmap ? 1 : 0;
  return n;
}

// A word's bytes that a mask names, moved as one: a byte shuffle per word where the CPU has one
// (SSSE3), which gathers them for the wire and spreads them back into the page; else a byte at a
// time. On the development VM the byte loops made a lane record cost 10-20x a run's copy to apply.
// kGather[m]: byte j is the position of the mask's j-th set bit; kSpread[m]: byte k is the rank of
// bit k among the set bits, where it is set; 0x80 (a zero byte) elsewhere. kBytes[m]: 0xff in the
// bytes the mask names.
/// kGather (spread false) or kSpread (true): for the j-th set bit k of each mask, byte j holds k, or
/// byte k holds j.
constexpr std::array<std::uint64_t, 256> shuffle_table(bool spread) {
  std::array<std::uint64_t, 256> t{};
  for (unsigned m = 0; m < 256; ++m) {
    std::uint64_t v = 0x8080808080808080ull;
    for (unsigned k = 0, j = 0; k < 8; ++k) {
      if (((m >> k) & 1u) == 0) continue;
      const unsigned at = spread ? k : j, value = spread ? j : k;
      v = (v & ~(std::uint64_t{0xff} << (8 * at))) | (std::uint64_t{value} << (8 * at));
      ++j;
    }
    t[m] = v;
  }
  return t;
}
constexpr auto kGather = shuffle_table(false);
constexpr auto kSpread = shuffle_table(true);
constexpr auto kBytes = [] {
  std::array<std::uint64_t, 256> t{};
  for (unsigned m = 0; m < 256; ++m)
    for (unsigned k = 0; k < 8; ++k)
      if (((m >> k) & 1u) != 0) t[m] |= std::uint64_t{0xff} << (8 * k);
  return t;
}();

/// masks[w]: bit k set where byte k of word w of `a` and `b` differ, for `words` words.
void word_masks(const std::byte* a, const std::byte* b, std::size_t words, std::uint8_t* masks) {
  std::size_t w = 0;
#if defined(__SSE2__)
  // Two words at once: a byte comparison's sign bits are the two masks, inverted.
  for (; w + 2 <= words; w += 2) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 8 * w));
    const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 8 * w));
    const auto differ = static_cast<unsigned>(~_mm_movemask_epi8(_mm_cmpeq_epi8(x, y)));
    masks[w] = static_cast<std::uint8_t>(differ);
    masks[w + 1] = static_cast<std::uint8_t>(differ >> 8);
  }
#endif
  // One multiplication gathers bit 8k of the folded XOR (byte k nonzero) into bit k of the top byte.
  static_assert(std::endian::native == std::endian::little, "byte k of a loaded word is its bits 8k..8k+7");
  for (; w < words; ++w) {
    std::uint64_t d = load_word(a + 8 * w) ^ load_word(b + 8 * w);
    d |= d >> 4;
    d |= d >> 2;
    d |= d >> 1;
    masks[w] = static_cast<std::uint8_t>(((d & 0x0101010101010101ull) * 0x0102040810204080ull) >> 56);
  }
}

/// Appends the bytes of `word` that `mask` names, in order; returns where they end.
std::byte* gather_word(const std::byte* word, unsigned mask, std::byte* out) {
  if (mask == 0xffu) {
    std::memcpy(out, word, 8);
    return out + 8;
  }
  for (; mask != 0; mask &= mask - 1) *out++ = word[std::countr_zero(mask)];
  return out;
}

/// Writes the next bytes of `in` to the bytes of `word` that `mask` names; returns where they end.
const std::byte* scatter_word(std::byte* word, unsigned mask, const std::byte* in) {
  if (mask == 0xffu) {
    std::memcpy(word, in, 8);
    return in + 8;
  }
  for (; mask != 0; mask &= mask - 1) word[std::countr_zero(mask)] = *in++;
  return in;
}

/// The bytes of words [first, last] of `page` that masks[w] | every names, in order, at `out`,
/// which has eight bytes to spare after them; returns where they end.
std::byte* gather_words_bytewise(const std::byte* page, const std::uint8_t* masks, std::size_t first,
                                 std::size_t last, unsigned every, std::byte* out) {
  for (std::size_t w = first; w <= last; ++w) out = gather_word(page + 8 * w, masks[w] | every, out);
  return out;
}

/// Writes a lane record's bytes into `page`.
void spread_record_bytewise(const RecordView& record, std::byte* page) {
  const std::byte* from = record.data;
  record.for_each_word(
      [&](std::size_t word, unsigned mask) { from = scatter_word(page + 8 * word, mask, from); });
}

#if defined(__x86_64__)
__attribute__((target("ssse3"))) std::byte* gather_words_ssse3(const std::byte* page,
                                                               const std::uint8_t* masks, std::size_t first,
                                                               std::size_t last, unsigned every,
                                                               std::byte* out) {
  for (std::size_t w = first; w <= last; ++w) {
    const unsigned m = masks[w] | every;
    if (m == 0) continue;
    const __m128i word = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(page + 8 * w));
    const __m128i order = _mm_cvtsi64_si128(static_cast<long long>(kGather[m]));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_shuffle_epi8(word, order));
    out += kBitsSet[m];
  }
  return out;
}

// Blends 16 bytes of the page at a time: the bytes the record does not name are written back with
// the values just read, so nothing else may write the page meanwhile (apply_record's contract; the
// boundary applies records under the page server's lock, with every rank in it).
__attribute__((target("ssse3"))) void spread_record_ssse3(const RecordView& record, std::byte* page) {
  const std::byte* from = record.data;
  const std::byte* const end = record.data + record.data_bytes;
  const LaneMasks masks(record);
  std::byte* to = page + 8 * std::size_t{record.first_word};
  if (masks.uniform()) {
    // Every word has the lanes sent in every word (a page of floats whose top bytes stayed): one
    // shuffle and one blend for all pairs of words.
    const unsigned mask = masks.every();
    const std::size_t bytes = kBitsSet[mask];
    const __m128i order =
        _mm_set_epi64x(static_cast<long long>(kSpread[mask] + bytes * 0x0101010101010101ull),
                       static_cast<long long>(kSpread[mask]));
    const __m128i named = _mm_set1_epi64x(static_cast<long long>(kBytes[mask]));
    std::size_t w = 0;
    for (; w + 2 <= record.run_count && end - from >= 16; w += 2, to += 16, from += 2 * bytes) {
      const __m128i spread = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from)), order);
      const __m128i kept = _mm_andnot_si128(named, _mm_loadu_si128(reinterpret_cast<const __m128i*>(to)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(to), _mm_or_si128(kept, spread));
    }
    for (; w < record.run_count; ++w, to += 8) from = scatter_word(to, mask, from);
    return;
  }
  for (std::size_t g = 0; g < masks.groups(); ++g) {
    const std::uint64_t group = masks.group(g);
    const std::size_t words = masks.words(g);
    std::size_t i = 0;
    // Two words a shuffle: the second word's indices move past the first's bytes (0x80, a zero
    // byte, stays at or above 0x80).
    for (; i + 2 <= words && end - from >= 16; i += 2, to += 16) {
      const auto m0 = static_cast<unsigned>((group >> (8 * i)) & 0xffu);
      const auto m1 = static_cast<unsigned>((group >> (8 * i + 8)) & 0xffu);
      const unsigned first = kBitsSet[m0];
      const __m128i order =
          _mm_set_epi64x(static_cast<long long>(kSpread[m1] + first * 0x0101010101010101ull),
                         static_cast<long long>(kSpread[m0]));
      const __m128i spread = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from)), order);
      const __m128i named =
          _mm_set_epi64x(static_cast<long long>(kBytes[m1]), static_cast<long long>(kBytes[m0]));
      const __m128i kept = _mm_andnot_si128(named, _mm_loadu_si128(reinterpret_cast<const __m128i*>(to)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(to), _mm_or_si128(kept, spread));
      from += first + kBitsSet[m1];
    }
    for (; i < words; ++i, to += 8)  // the record's last bytes: no loading past them
      from = scatter_word(to, static_cast<unsigned>((group >> (8 * i)) & 0xffu), from);
  }
}

// __builtin_cpu_init first: this runs among the library's constructors, maybe before libgcc's.
const bool kShuffles = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("ssse3") != 0;
}();
#else
constexpr bool kShuffles = false;
#endif
// Set once at start-up (lane_shuffles() switches them for tests, between boundaries).
std::atomic<bool> shuffles{kShuffles};

std::byte* gather_words(const std::byte* page, const std::uint8_t* masks, std::size_t first, std::size_t last,
                        unsigned every, std::byte* out) {
#if defined(__x86_64__)
  if (shuffles.load(std::memory_order_relaxed))
    return gather_words_ssse3(page, masks, first, last, every, out);
#endif
  return gather_words_bytewise(page, masks, first, last, every, out);
}

void spread_record(const RecordView& record, std::byte* page) {
#if defined(__x86_64__)
  if (shuffles.load(std::memory_order_relaxed)) return spread_record_ssse3(record, page);
#endif
  spread_record_bytewise(record, page);
}

}  // namespace

bool lane_shuffles(bool on) { return shuffles.exchange(on && kShuffles, std::memory_order_relaxed); }

coherence::DiffRun RecordView::run(std::uint32_t i) const {
  coherence::DiffRun r{};
  std::memcpy(&r, runs + std::size_t{i} * sizeof(coherence::DiffRun), sizeof r);
  return r;
}

std::size_t RecordView::meta_bytes() const {
  if (!lanes) return std::size_t{run_count} * sizeof(coherence::DiffRun);
  return kLanePlanBytes + static_cast<std::size_t>(bitmap_lanes(plan)) * ((std::size_t{run_count} + 7) / 8);
}

// A lane plan first: its word masks give the changed bytes in one vector pass, and the runs there
// are at least. Where the plan costs at most 1/32 more than runs could (a header, the fewest runs
// and the changed bytes; exactly what exact runs cost) it is the record, and the runs are never
// found: finding them was most of the cost of a page of floats that changed (a run every three bytes
// when exact, and a pass over the page's words and another over the runs' bytes when joined).
// Otherwise the runs are found and the cheaper of the two is sent.
std::size_t RecordWriter::add(std::uint64_t page, int writer, std::span<const std::byte> now,
                              std::span<const std::byte> before, bool exact) {
  const LanePlan lanes = plan_lanes(now, before, exact);
  if (lanes.changed == 0) return 0;
  const std::size_t runs_at_least =
      sizeof(RecordHeader) + lanes.fewest_runs * sizeof(coherence::DiffRun) + lanes.changed;
  if (lanes.possible && lanes.cost() <= runs_at_least + runs_at_least / 32) {
    add_lanes(lanes, page, writer, now);
    return lanes.changed;
  }
  runs_.clear();
  const std::size_t covered = coherence::diff_runs(now, before, runs_, exact ? 1 : 8);
  const std::size_t runs_cost = sizeof(RecordHeader) + runs_.size() * sizeof(coherence::DiffRun) + covered;
  if (lanes.possible && lanes.cost() < runs_cost) {
    add_lanes(lanes, page, writer, now);
    return lanes.changed;
  }
  put(out_, RecordHeader{page, static_cast<std::uint32_t>(runs_.size()), static_cast<std::uint32_t>(writer)});
  for (const coherence::DiffRun& r : runs_) put(out_, r);
  for (const coherence::DiffRun& r : runs_) {
    const std::byte* from = now.data() + r.offset;
    out_.insert(out_.end(), from, from + r.length);
  }
  payload_ += covered;
  return lanes.changed;
}

// Each lane's changed words, counted from the transposed masks, choose its mode: every word where
// its equal bytes cost no more than its bitmap would (never on a page of several writers), a
// bitmap, or never where it did not change.
RecordWriter::LanePlan RecordWriter::plan_lanes(std::span<const std::byte> now,
                                                std::span<const std::byte> before, bool exact) {
  LanePlan p;
  const std::size_t n = now.size();
  if (n % 8 != 0 || n / 8 > std::numeric_limits<std::uint32_t>::max()) {
    // Not whole words (a page is; a test's buffer may not be): the changed bytes alone, no plan.
    p.changed = coherence::differing_bytes(now, before);
    return p;
  }
  const std::size_t words = n / 8;
  masks_.assign(words + 8, 0);  // eight more: the last group of eight words reads past the page's end
  std::uint8_t* const masks = masks_.data();
  word_masks(now.data(), before.data(), words, masks);
  std::size_t first = 0, end = words;
  while (first < words && masks[first] == 0) ++first;
  if (first == words) return p;
  while (masks[end - 1] == 0) --end;
  p.first = first;
  p.last = end - 1;
  const std::size_t count = end - first, group_bytes = (count + 7) / 8;
  // Each lane's changed words: the bits of each byte of the transposed masks, counted in place
  // (at most 8 a group, so a byte holds 31 groups' sums) and taken out every 31 groups.
  std::array<std::size_t, 8> lane_changed{};
  for (std::size_t g = 0; g < group_bytes;) {
    std::uint64_t sums = 0;
    for (const std::size_t stop = std::min(group_bytes, g + 31); g < stop; ++g)
      sums += byte_bits(transpose_bits(load_word(reinterpret_cast<const std::byte*>(masks) + first + 8 * g)));
    for (std::size_t k = 0; k < 8; ++k) lane_changed[k] += (sums >> (8 * k)) & 0xffu;
  }
  for (int k = 0; k < 8; ++k) {
    const std::size_t changed = lane_changed[static_cast<std::size_t>(k)];
    p.changed += changed;
    if (changed == 0) continue;
    const std::size_t equal = count - changed;
    if (equal == 0 || (!exact && equal <= group_bytes)) {
      p.plan |= static_cast<std::uint16_t>(static_cast<unsigned>(Lane::every) << (2 * k));
      p.every |= 1u << k;
      p.data += count;
    } else {
      p.plan |= static_cast<std::uint16_t>(static_cast<unsigned>(Lane::bitmap) << (2 * k));
      ++p.bitmaps;
      p.data += changed;
    }
  }
  p.bitmap_bytes = group_bytes;
  p.possible = true;
  // The masks are the page's changed bytes as a bit string (bit k of mask w: byte 8 w + k). A run
  // starts at a set bit after a clear one, or, joined, after eight clear ones (diff_runs joins runs
  // closer than 8 bytes).
  const std::size_t join = exact ? 1 : 8;
  std::uint64_t previous = 0;
  for (std::size_t c = first / 8; c <= (end - 1) / 8; ++c) {
    const std::uint64_t x = load_word(reinterpret_cast<const std::byte*>(masks) + 8 * c);
    std::uint64_t behind = 0;  // bit i: a set bit among the `join` before it
    for (std::size_t d = 1; d <= join; ++d) behind |= (x << d) | (previous >> (64 - d));
    p.fewest_runs += (byte_bits(x & ~behind) * 0x0101010101010101ull) >> 56;
    previous = x;
  }
  return p;
}

void RecordWriter::add_lanes(const LanePlan& p, std::uint64_t page, int writer,
                             std::span<const std::byte> now) {
  const std::size_t count = p.last + 1 - p.first;
  put(out_,
      RecordHeader{page, static_cast<std::uint32_t>(count), static_cast<std::uint32_t>(writer) | kLanesFlag});
  put(out_, static_cast<std::uint32_t>(p.first));
  put(out_, p.plan);
  const std::size_t bitmaps_at = out_.size();
  // Eight bytes more: the gather may write that far past the data; they are cut off after.
  out_.resize(bitmaps_at + p.bitmaps * p.bitmap_bytes + p.data + 8);
  std::byte* const bitmap = out_.data() + bitmaps_at;
  const auto* masks = reinterpret_cast<const std::byte*>(masks_.data());
  std::array<unsigned, 8> shift{};  // each bitmap lane's byte in a transposed group
  for (unsigned k = 0, b = 0; k < 8; ++k)
    if (lane_of(p.plan, static_cast<int>(k)) == Lane::bitmap) shift[b++] = 8 * k;
  if (p.bitmaps != 0)
    for (std::size_t g = 0; g < p.bitmap_bytes; ++g) {
      const std::uint64_t t = transpose_bits(load_word(masks + p.first + 8 * g));
      for (std::size_t b = 0; b < p.bitmaps; ++b)
        bitmap[b * p.bitmap_bytes + g] = static_cast<std::byte>(t >> shift[b]);
    }
  std::byte* const data = bitmap + p.bitmaps * p.bitmap_bytes;
  const std::byte* to = data + p.data;
  if (p.every == 0xffu)  // every byte of the words: one copy
    std::memcpy(data, now.data() + 8 * p.first, 8 * count);
  else  // a lane that never changed has no bit in any mask, and one sent in every word has all
    to = gather_words(now.data(), masks_.data(), p.first, p.last, p.every, data);
  out_.resize(out_.size() - 8);
  if (to != out_.data() + out_.size())
    throw Error(Errc::system, "cluster: a page's lane record was miscounted");
  payload_ += p.data;
}

void RecordWriter::add_whole(std::uint64_t page, int writer, std::span<const std::byte> now) {
  put(out_, RecordHeader{page, 1, static_cast<std::uint32_t>(writer) | kWholeFlag});
  put(out_, coherence::DiffRun{0, static_cast<std::uint32_t>(now.size())});
  out_.insert(out_.end(), now.begin(), now.end());
  payload_ += now.size();
}

void RecordWriter::append(const RecordView& record) {
  put(out_,
      RecordHeader{record.page, record.run_count,
                   record.writer | (record.whole ? kWholeFlag : 0u) | (record.lanes ? kLanesFlag : 0u)});
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

RecordView parse_record(std::span<const std::byte> buffer, const RecordPages& pages, std::size_t& at) {
  const std::size_t page_bytes = pages.bytes;
  const auto malformed = [&](std::string_view what) {
    return Error(Errc::system, fmt::format("cluster: a malformed page record at byte {} of {}: {}", at,
                                           buffer.size(), what));
  };
  if (buffer.size() - at < sizeof(RecordHeader)) throw malformed("truncated header");
  RecordHeader h{};
  std::memcpy(&h, buffer.data() + at, sizeof h);
  if (h.page < pages.first || h.page >= pages.end)
    throw malformed(
        fmt::format("page {} outside the records' pages [{}, {})", h.page, pages.first, pages.end));
  const std::size_t runs_at = at + sizeof h;
  RecordView v{h.page,
               h.writer & ~kFlags,
               h.runs,
               buffer.data() + runs_at,
               nullptr,
               0,
               (h.writer & kWholeFlag) != 0,
               (h.writer & kLanesFlag) != 0,
               0,
               0};
  const std::size_t left = buffer.size() - runs_at;
  std::size_t data = 0;
  if (v.lanes) {
    if (v.whole) throw malformed("a whole page as a lane plan");
    if (left < kLanePlanBytes) throw malformed("truncated lane plan");
    std::memcpy(&v.first_word, v.runs, sizeof v.first_word);
    std::memcpy(&v.plan, v.runs + sizeof v.first_word, sizeof v.plan);
    const std::size_t words = page_bytes / 8;
    if (page_bytes % 8 != 0 || h.runs == 0 || v.first_word > words || h.runs > words - v.first_word)
      throw malformed("words outside the page");
    if (v.meta_bytes() > left) throw malformed("truncated bitmaps");
    const std::size_t group_bytes = (std::size_t{h.runs} + 7) / 8;
    const std::byte* bitmap = v.runs + kLanePlanBytes;
    for (int k = 0; k < 8; ++k) {
      const Lane lane = lane_of(v.plan, k);
      if (lane == Lane::every) data += h.runs;
      if (lane != Lane::bitmap) {
        if (lane != Lane::none && lane != Lane::every) throw malformed("an unknown lane mode");
        continue;
      }
      for (std::size_t g = 0; g < group_bytes; ++g) data += kBitsSet[static_cast<std::uint8_t>(bitmap[g])];
      // Bits past the last word are zero: the data's size counts them.
      if (h.runs % 8 != 0 && (static_cast<unsigned>(bitmap[group_bytes - 1]) >> (h.runs % 8)) != 0)
        throw malformed("a bitmap bit past the last word");
      bitmap += group_bytes;
    }
  } else {
    if (h.runs > left / sizeof(coherence::DiffRun)) throw malformed("truncated runs");
    for (std::uint32_t i = 0; i < h.runs; ++i) {
      const coherence::DiffRun r = v.run(i);
      if (r.offset > page_bytes || r.length > page_bytes - r.offset)
        throw malformed("a run outside the page");
      data += r.length;
    }
    if (v.whole && (h.runs != 1 || data != page_bytes)) throw malformed("a whole page of another size");
  }
  const std::size_t data_at = runs_at + v.meta_bytes();
  if (data > buffer.size() - data_at) throw malformed("truncated data");
  v.data = buffer.data() + data_at;
  v.data_bytes = data;
  at = data_at + data;
  return v;
}

void apply_record(const RecordView& record, std::byte* page) {
  const std::byte* from = record.data;
  if (record.lanes) {
    if (record.plan == kEveryLane)  // every byte of the words: one copy
      std::memcpy(page + 8 * std::size_t{record.first_word}, from, record.data_bytes);
    else
      spread_record(record, page);
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
  for_each_record(records, pages_, [&](const RecordView& r) {
    if (r.whole) return;  // a holder's page, not a change
    r.for_each_run([&](const coherence::DiffRun& run) {
      runs_.push_back({r.page, run.offset, run.offset + run.length, r.writer});
    });
  });
}

std::uint64_t RaceCheck::report(const std::string& kernel, const std::byte* base) {
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
        // Every writer of the page whose runs reach into those bytes, not only the first two.
        std::vector<std::uint32_t> who;
        for (std::size_t q = i; q < runs_.size() && runs_[q].page == a.page; ++q)
          if (runs_[q].begin < to && runs_[q].end > from) who.push_back(runs_[q].writer);
        std::sort(who.begin(), who.end());
        who.erase(std::unique(who.begin(), who.end()), who.end());
        const std::uint32_t last = who.back();
        who.pop_back();
        // All of the page's bytes that several ranks wrote (a rank's own runs never overlap): a sweep
        // over the runs' ends, counting how many cover each stretch.
        std::vector<std::pair<std::uint32_t, int>> ends;
        for (std::size_t q = i; q < runs_.size() && runs_[q].page == a.page; ++q) {
          ends.emplace_back(runs_[q].begin, 1);
          ends.emplace_back(runs_[q].end, -1);
        }
        std::sort(ends.begin(), ends.end());
        std::uint64_t bytes = 0, stretches = 0;
        int covering = 0;
        for (std::size_t e = 0; e < ends.size(); ++e) {
          const int before = covering;
          covering += ends[e].second;
          if (covering >= 2 && before < 2) ++stretches;
          if (covering >= 2 && e + 1 < ends.size()) bytes += ends[e + 1].first - ends[e].first;
        }
        const std::string more = stretches > 1 || bytes > to - from
                                     ? fmt::format(" ({} B in {} range{} of the page in all)", bytes,
                                                   stretches, stretches == 1 ? "" : "s")
                                     : std::string();
        fmt::print(
            stderr,
            "hdsm cluster: warning: kernel '{}' is racy: ranks {} and {} wrote bytes [{}, {}) of page {} "
            "(address {}){}; its result there is undefined\n",
            kernel, fmt::join(who, ", "), last, from, to, a.page,
            static_cast<const void*>(base + a.page * pages_.bytes + from), more);
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
