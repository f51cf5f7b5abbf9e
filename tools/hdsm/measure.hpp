// Timing of repeated operations: warm up, calibrate a batch length, take the median of batches.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <span>
#include <string_view>
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

/// The busy clock ticks (user, nice, system, irq, softirq and steal) of `cpus` summed from the text
/// of /proc/stat; negative where a CPU's line is missing or malformed.
double busy_ticks(std::string_view proc_stat, std::span<const int> cpus);

/// The CPU time that other processes, and the hypervisor (steal), took on this process's usable
/// cores from construction to share(). Two 50 ms probes before and after a suite miss work that
/// starts and stops in between; this counts all of it, from the kernel's per-CPU counters less this
/// process's own time and its waited-for children's (the MPI suites' ranks).
class OtherWork {
 public:
  OtherWork();
  /// Of the usable cores' time since construction, the share (0..1) other work took; negative where
  /// /proc/stat could not be read.
  double share() const;

 private:
  std::vector<int> cpus_;
  double ticks_ = -1;       // busy ticks of cpus_ at construction
  double own_seconds_ = 0;  // this process's and its children's CPU time at construction
  Stopwatch wall_;
};

}  // namespace hdsm::tool
