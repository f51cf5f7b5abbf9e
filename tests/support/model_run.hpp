// What the randomized model tests share: the seed and the number of steps from HDSM_MODEL_SEED and
// HDSM_MODEL_ITERATIONS, and the last steps, printed with the seed when a check fails so that the run
// can be replayed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <string>

namespace hdsm::test {

/// Under a sanitizer the default number of steps is divided (by 2 unless the test says otherwise):
/// the sanitizers look for races and bad accesses, which every kind of step already exercises, and
/// their builds run the steps 5-20 times slower (CI's time budget). The plain build runs them all;
/// HDSM_MODEL_ITERATIONS still sets the number exactly.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif

class ModelRun {
 public:
  ModelRun(std::uint64_t default_seed, int default_iterations, int sanitizer_divisor = 2)
      : seed_(env_number("HDSM_MODEL_SEED", default_seed)),
        iterations_(static_cast<int>(env_number(
            "HDSM_MODEL_ITERATIONS",
            static_cast<std::uint64_t>(std::max(
                1, kUnderSanitizer ? default_iterations / sanitizer_divisor : default_iterations))))) {}

  std::uint64_t seed() const { return seed_; }
  int iterations() const { return iterations_; }

  /// Records a step; the last 12 are kept.
  void log(std::string line) {
    trace_.push_back(std::move(line));
    if (trace_.size() > 12) trace_.pop_front();
  }
  /// How to replay the run, and its last steps.
  std::string where() const {
    std::string s = "reproduce with HDSM_MODEL_SEED=" + std::to_string(seed_) + " (iterations " +
                    std::to_string(iterations_) + "); last steps:";
    for (const auto& line : trace_) s += "\n  " + line;
    return s;
  }

  static std::uint64_t env_number(const char* name, std::uint64_t fallback) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 0) : fallback;
  }

 private:
  std::uint64_t seed_;
  int iterations_;
  std::deque<std::string> trace_;
};

}  // namespace hdsm::test
