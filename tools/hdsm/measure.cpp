#include "measure.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace hdsm::tool {

Measurement measure(const std::function<void(std::size_t reps)>& op, const MeasureOptions& options) {
  const int batches = std::max(options.batches, 1);
  const double batch_seconds = options.min_total_seconds / batches;
  auto timed = [&](std::size_t reps) {
    Stopwatch watch;
    op(reps);
    return watch.seconds();
  };

  op(1);  // warm-up: first-touch, queue threads, caches
  std::size_t reps = 1;
  double seconds = timed(reps);
  while (seconds < batch_seconds) {
    // Aim 20% past the target; grow at least 2x (timer noise) and at most 100x per step.
    const double scale = seconds > 0 ? batch_seconds / seconds * 1.2 : 100.0;
    reps = static_cast<std::size_t>(std::ceil(static_cast<double>(reps) * std::clamp(scale, 2.0, 100.0)));
    seconds = timed(reps);
  }

  std::vector<double> per_rep{seconds / static_cast<double>(reps)};
  while (static_cast<int>(per_rep.size()) < batches)
    per_rep.push_back(timed(reps) / static_cast<double>(reps));
  std::sort(per_rep.begin(), per_rep.end());
  const std::size_t n = per_rep.size();
  const double median = n % 2 ? per_rep[n / 2] : (per_rep[n / 2 - 1] + per_rep[n / 2]) / 2;
  return Measurement{median, reps, batches};
}

double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return samples.empty() ? 0 : samples[samples.size() / 2];
}

}  // namespace hdsm::tool
