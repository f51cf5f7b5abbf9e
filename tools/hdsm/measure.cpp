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

std::vector<std::vector<std::size_t>> balanced_orders(std::size_t n) {
  if (n == 0) return {};
  // The first row is 0, 1, n-1, 2, n-2, ...; row i adds i to each entry modulo n. For odd n the
  // reversed rows are needed as well to balance who follows whom.
  std::vector<std::size_t> first{0};
  for (std::size_t k = 1; first.size() < n; ++k) {
    first.push_back(k);
    if (first.size() < n) first.push_back(n - k);
  }
  std::vector<std::vector<std::size_t>> rows;
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<std::size_t> row;
    row.reserve(first.size());
    for (const std::size_t v : first) row.push_back((v + i) % n);
    rows.push_back(std::move(row));
  }
  if (n % 2 != 0 && n > 1)
    for (std::size_t i = 0; i < n; ++i) rows.emplace_back(rows[i].rbegin(), rows[i].rend());
  return rows;
}

}  // namespace hdsm::tool
