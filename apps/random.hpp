// The apps' fixed-seed pseudo-random generators: every input is generated from a constant seed, so
// each version of an app, and every run, sees the same numbers. Two xorshift64 variants are in use,
// and each app keeps the one (and the bit extraction) its reference outputs were produced with.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hdsm::apps {

/// Marsaglia's xorshift64 (shifts 13, 7, 17).
class Xorshift64 {
 public:
  explicit constexpr Xorshift64(std::uint64_t seed) : s_(seed) {}

  static constexpr std::uint64_t step(std::uint64_t s) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }

  constexpr std::uint64_t next() { return s_ = step(s_); }
  /// [0, 1) from the top 24 bits.
  constexpr float uniform() { return static_cast<float>(next() >> 40) * 0x1p-24f; }
  /// [lo, hi)
  constexpr float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  /// [0, n) by multiplying the top 32 bits with n, which needs no division.
  constexpr std::uint32_t below(std::uint32_t n) {
    return static_cast<std::uint32_t>(((next() >> 32) * n) >> 32);
  }
  constexpr std::uint64_t state() const { return s_; }

 private:
  std::uint64_t s_;
};

/// Vigna's xorshift64* (shifts 12, 25, 27, then a multiplication that scrambles the output).
class Xorshift64Star {
 public:
  explicit constexpr Xorshift64Star(std::uint64_t seed) : s_(seed) {}

  constexpr std::uint64_t next() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 0x2545F4914F6CDD1DULL;
  }
  /// [0, 1) from the top 53 bits.
  constexpr double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t s_;
};

/// p[0..n) uniform in [lo, hi), from a generator of its own.
inline void fill(float* p, std::size_t n, std::uint64_t seed, float lo, float hi) {
  Xorshift64 rng{seed};
  for (std::size_t i = 0; i < n; ++i) p[i] = rng.uniform(lo, hi);
}

}  // namespace hdsm::apps
