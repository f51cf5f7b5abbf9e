#include "measure.hpp"

#include "os/cpu_binding.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

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
  return Measurement{median(std::move(per_rep)), reps, batches};
}

// Of an even count, the mean of the two middle samples (before, the upper one: "the median of 8
// runs" was the 5th of 8).
double median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  return n % 2 != 0 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
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

namespace {

double busy_ticks_of(std::string_view proc_stat, int cpu) {
  const std::string prefix = "cpu" + std::to_string(cpu) + ' ';
  std::size_t at = 0;
  for (;;) {  // the line that starts with the CPU's name
    at = proc_stat.find(prefix, at);
    if (at == std::string_view::npos) return -1;
    if (at == 0 || proc_stat[at - 1] == '\n') break;
    at += prefix.size();
  }
  std::string_view line = proc_stat.substr(at + prefix.size());
  line = line.substr(0, line.find('\n'));
  // user nice system idle iowait irq softirq steal [guest guest_nice: already in user and nice]
  double fields[8] = {};
  const char* p = line.data();
  const char* const end = line.data() + line.size();
  for (double& field : fields) {
    while (p != end && *p == ' ') ++p;
    unsigned long long value = 0;
    const auto [next, error] = std::from_chars(p, end, value);
    if (error != std::errc() || next == p) return -1;
    field = static_cast<double>(value);
    p = next;
  }
  return fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7];
}

double own_cpu_seconds() {
  double sum = 0;
  for (const int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage usage{};
    if (::getrusage(who, &usage) != 0) continue;
    for (const timeval& t : {usage.ru_utime, usage.ru_stime})
      sum += static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  }
  return sum;
}

double busy_ticks_now(std::span<const int> cpus) {
  std::ifstream in("/proc/stat");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return in.bad() || text.empty() ? -1 : busy_ticks(text, cpus);
}

}  // namespace

double busy_ticks(std::string_view proc_stat, std::span<const int> cpus) {
  double sum = 0;
  for (const int cpu : cpus) {
    const double ticks = busy_ticks_of(proc_stat, cpu);
    if (ticks < 0) return -1;
    sum += ticks;
  }
  return sum;
}

OtherWork::OtherWork() {
  try {
    cpus_ = os::allowed_cpus();
  } catch (...) {  // no affinity mask: no measurement
    return;
  }
  own_seconds_ = own_cpu_seconds();
  ticks_ = busy_ticks_now(cpus_);
}

double OtherWork::share() const {
  const double wall = wall_.seconds();
  if (ticks_ < 0 || cpus_.empty() || wall <= 0) return -1;
  const double ticks = busy_ticks_now(cpus_);
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (ticks < 0 || hz <= 0) return -1;
  const double others = (ticks - ticks_) / static_cast<double>(hz) - (own_cpu_seconds() - own_seconds_);
  return std::clamp(others / (wall * static_cast<double>(cpus_.size())), 0.0, 1.0);
}

}  // namespace hdsm::tool
