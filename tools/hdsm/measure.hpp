// Timing of repeated operations: warm up, calibrate a batch length, take the median of batches.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <vector>

namespace hdsm::tool {

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

struct MeasureOptions {
  double min_total_seconds = 0.050;  // the timed batches together last at least this long
  int batches = 3;                   // timed batches; the result is their median
};

struct Measurement {
  double seconds_per_rep = 0;  // median over the batches
  std::size_t reps_per_batch = 0;
  int batches = 0;
};

/// Time `op(reps)`, which must perform `reps` repetitions of one operation and return only when
/// they have completed. One untimed warm-up call, then the repetition count grows until a batch
/// lasts at least min_total_seconds / batches; that batch and the following ones (`batches` in all,
/// at least 1 repetition each) are timed and the median seconds per repetition returned.
Measurement measure(const std::function<void(std::size_t reps)>& op, const MeasureOptions& options);

/// The median of samples (the upper one of an even count; 0 for none).
double median(std::vector<double> samples);

/// Run orders of `n` versions measured interleaved: over the rows every version runs once in each
/// position and directly after every other version equally often (a Williams design: n rows for
/// even n, 2n for odd n). What one version leaves behind (cold caches, a busy device) then weighs
/// on each of the others alike, which rotating one order does not give: there each version always
/// follows the same one.
std::vector<std::vector<std::size_t>> balanced_orders(std::size_t n);

}  // namespace hdsm::tool
