#include "coherence/page_diff.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>

namespace hdsm::coherence {
namespace {

void check_sizes(const char* what, std::size_t a, std::size_t b, std::size_t c) {
  if (a != b || a != c)
    throw InvalidArgument(
        fmt::format("{}: page spans of {}, {} and {} bytes; they must be one size", what, a, b, c));
}

std::uint64_t load(const std::byte* p) {
  std::uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void store(std::byte* p, std::uint64_t v) { std::memcpy(p, &v, sizeof v); }

/// 0xff in every byte of the word where `d` has a nonzero byte.
std::uint64_t byte_mask(std::uint64_t d) {
  d |= d >> 4;
  d |= d >> 2;
  d |= d >> 1;
  return (d & 0x0101010101010101ull) * 0xffu;
}

/// Bytes compared at once where a page is mostly unchanged: eight words XORed and ORed together,
/// one test (SSE2 vectors at -O2), instead of a test and a branch for each word.
constexpr std::size_t kBlock = 64;
bool same_block(const std::byte* a, const std::byte* b) {
  std::uint64_t d = 0;
  for (std::size_t k = 0; k < kBlock; k += 8) d |= load(a + k) ^ load(b + k);
  return d == 0;
}

/// Calls word(i) for the offset of every word of [0, n) in a block that differs between `a` and
/// `b`, then for the words after the last whole block; returns where the words end (n rounded
/// down to a word).
template <class Word>
std::size_t for_each_changed_word(const std::byte* a, const std::byte* b, std::size_t n, Word&& word) {
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock)
    if (!same_block(a + i, b + i))
      for (std::size_t k = i; k < i + kBlock; k += 8) word(k);
  for (; i + 8 <= n; i += 8) word(i);
  return i;
}

}  // namespace

std::size_t merge_against_twin(std::span<std::byte> home, std::span<const std::byte> local,
                               std::span<const std::byte> twin) {
  check_sizes("merge_against_twin", home.size(), local.size(), twin.size());
  std::size_t changed = 0;
  // Block by block, then word at a time in a block that changed: most of a page is unchanged, and a
  // changed word is merged byte-exactly with a mask instead of a byte loop.
  std::size_t i = for_each_changed_word(local.data(), twin.data(), home.size(), [&](std::size_t k) {
    const std::uint64_t l = load(local.data() + k);
    const std::uint64_t d = l ^ load(twin.data() + k);
    if (d == 0) return;
    const std::uint64_t m = byte_mask(d);
    changed += static_cast<std::size_t>(__builtin_popcountll(m)) / 8;
    store(home.data() + k, (load(home.data() + k) & ~m) | (l & m));
  });
  for (; i < home.size(); ++i)
    if (local[i] != twin[i]) {
      home[i] = local[i];
      ++changed;
    }
  return changed;
}

std::size_t copy_changes(std::span<std::byte> home, std::span<const std::byte> local) {
  check_sizes("copy_changes", home.size(), local.size(), local.size());
  std::size_t changed = 0;
  std::size_t i = for_each_changed_word(local.data(), home.data(), home.size(), [&](std::size_t k) {
    const std::uint64_t l = load(local.data() + k);
    const std::uint64_t d = l ^ load(home.data() + k);
    if (d == 0) return;
    changed += static_cast<std::size_t>(__builtin_popcountll(byte_mask(d))) / 8;
    store(home.data() + k, l);
  });
  for (; i < home.size(); ++i)
    if (local[i] != home[i]) {
      home[i] = local[i];
      ++changed;
    }
  return changed;
}

void xor_diff(std::span<std::byte> diff, std::span<const std::byte> local, std::span<const std::byte> twin) {
  check_sizes("xor_diff", diff.size(), local.size(), twin.size());
  for (std::size_t i = 0; i < diff.size(); ++i) diff[i] = local[i] ^ twin[i];
}

void apply_xor_diff(std::span<std::byte> home, std::span<const std::byte> diff) {
  check_sizes("apply_xor_diff", home.size(), diff.size(), diff.size());
  for (std::size_t i = 0; i < home.size(); ++i) home[i] ^= diff[i];
}

bool any_change(std::span<const std::byte> diff) {
  for (const std::byte b : diff)
    if (b != std::byte{0}) return true;
  return false;
}

std::size_t diff_runs(std::span<const std::byte> local, std::span<const std::byte> twin,
                      std::vector<DiffRun>& runs, std::size_t join_gap) {
  check_sizes("diff_runs", local.size(), twin.size(), twin.size());
  if (local.size() > std::numeric_limits<std::uint32_t>::max())
    throw InvalidArgument(fmt::format("diff_runs: a page of {} bytes is above 4 GiB", local.size()));
  const std::size_t n = local.size();
  // Adjacent pieces always join: a run is a maximal stretch of changed bytes. The open run stays in
  // locals until a longer gap ends it.
  const std::size_t gap = std::max<std::size_t>(join_gap, 1);
  std::size_t covered = 0, begin = 0, end = 0;
  bool open = false;
  const auto close = [&] {
    runs.push_back({static_cast<std::uint32_t>(begin), static_cast<std::uint32_t>(end - begin)});
    covered += end - begin;
  };
  const auto piece = [&](std::size_t from, std::size_t to) {
    if (open && from - end < gap) {
      end = to;
      return;
    }
    if (open) close();
    begin = from;
    end = to;
    open = true;
  };
  // A word at a time, with the changed bytes as a mask: an updated array of floats changes three
  // bytes of four, and a byte loop there cost ten times the page's copy. Equal gaps inside a word
  // are at most six bytes, so where those join anyway a word's changes are one piece. Whole equal
  // blocks are skipped at once where the scan is in a gap.
  const bool whole_words = gap > 6;
  static_assert(std::endian::native == std::endian::little, "byte k of a loaded word is its bits 8k..8k+7");
  std::size_t i = 0;
  bool in_gap = true;
  while (i + 8 <= n) {
    if (in_gap && i % kBlock == 0 && i + kBlock <= n && same_block(local.data() + i, twin.data() + i)) {
      i += kBlock;
      continue;
    }
    const std::uint64_t x = load(local.data() + i) ^ load(twin.data() + i);
    in_gap = x == 0;
    if (x != 0 && whole_words) {
      // One piece from the first changed byte of this word through the changed words that follow
      // it closer than the gap; an equal word that ends them is passed over.
      const std::size_t from = i + static_cast<std::size_t>(std::countr_zero(x)) / 8;
      std::uint64_t last = x, y = 0;
      for (i += 8; i + 8 <= n; i += 8) {
        y = load(local.data() + i) ^ load(twin.data() + i);
        if (y == 0 || static_cast<std::size_t>(std::countl_zero(last) + std::countr_zero(y)) / 8 >= gap)
          break;
        last = y;
      }
      piece(from, i - static_cast<std::size_t>(std::countl_zero(last)) / 8);
      if (i + 8 <= n && y == 0) i += 8;
      in_gap = y == 0;
      continue;
    }
    if (x != 0) {
      std::uint64_t m = byte_mask(x);
      while (m != 0) {  // each stretch of changed bytes in the word
        const int from = std::countr_zero(m);
        const std::uint64_t rest = ~(m >> from);
        const int to = rest == 0 ? 64 : from + std::countr_zero(rest);
        piece(i + static_cast<std::size_t>(from) / 8, i + static_cast<std::size_t>(to) / 8);
        m = to == 64 ? 0 : m & (~std::uint64_t{0} << to);
      }
    }
    i += 8;
  }
  for (; i < n; ++i)
    if (local[i] != twin[i]) piece(i, i + 1);
  if (open) close();
  return covered;
}

std::size_t differing_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  check_sizes("differing_bytes", a.size(), b.size(), b.size());
  // GCC's and Clang's vector extensions: a lane comparison is -1 where the lanes differ, so
  // subtracting it counts; a lane holds at most 255 counts, so the sums are taken every 255 blocks.
  using Lanes = std::uint8_t __attribute__((vector_size(16)));
  const std::size_t n = a.size();
  std::size_t total = 0, i = 0;
  while (n - i >= 16) {
    Lanes count{};
    for (const std::size_t end = i + std::min<std::size_t>((n - i) / 16, 255) * 16; i < end; i += 16) {
      Lanes x, y;
      std::memcpy(&x, a.data() + i, 16);
      std::memcpy(&y, b.data() + i, 16);
      count -= reinterpret_cast<Lanes>(x != y);
    }
    for (int k = 0; k < 16; ++k) total += count[k];
  }
  for (; i < n; ++i) total += a[i] != b[i] ? 1 : 0;
  return total;
}

}  // namespace hdsm::coherence
