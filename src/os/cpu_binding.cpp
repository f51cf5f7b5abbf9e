#include "os/cpu_binding.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <tuple>

#include <sched.h>
#include <unistd.h>

namespace hdsm::os {

namespace {

// A CPU set of `count` CPUs (glibc's cpu_set_t stops at 1024; the kernel may number more).
struct CpuSet {
  explicit CpuSet(int at_least = 0) {
    const long configured = ::sysconf(_SC_NPROCESSORS_CONF);
    count = static_cast<int>(std::max<long>({configured, 1024, at_least}));
    set = CPU_ALLOC(count);
    bytes = CPU_ALLOC_SIZE(count);
    if (set == nullptr) throw std::bad_alloc();
    CPU_ZERO_S(bytes, set);
  }
  ~CpuSet() { CPU_FREE(set); }
  CpuSet(const CpuSet&) = delete;
  CpuSet& operator=(const CpuSet&) = delete;

  std::vector<int> cpus() const {
    std::vector<int> out;
    const int bits = static_cast<int>(bytes * 8);  // CPU_ALLOC rounds up to whole words
    for (int c = 0; c < bits; ++c)
      if (CPU_ISSET_S(static_cast<std::size_t>(c), bytes, set)) out.push_back(c);
    return out;
  }
  void add(int cpu) {
    if (cpu < 0 || cpu >= count)
      throw InvalidArgument(fmt::format("CPU {}: this machine numbers CPUs below {}", cpu, count));
    CPU_SET_S(static_cast<std::size_t>(cpu), bytes, set);
  }

  cpu_set_t* set = nullptr;
  std::size_t bytes = 0;
  int count = 0;
};

// The first integer of a sysfs file ("3", or a list such as "0-7,16-23"), or -1.
int read_first_int(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "re"), &std::fclose);
  if (!f) return -1;
  char text[64] = {};
  if (std::fgets(text, sizeof text, f.get()) == nullptr) return -1;
  int value = -1;
  const auto [end, error] = std::from_chars(text, text + std::strlen(text), value);
  return error == std::errc() && end != text ? value : -1;
}

}  // namespace

std::vector<int> allowed_cpus() {
  // EINVAL: the kernel's CPU mask is larger than the set; twice as large until it fits.
  for (int size = 0;;) {
    CpuSet s(size);
    if (::sched_getaffinity(0, s.bytes, s.set) == 0) return s.cpus();
    if (errno != EINVAL || s.count >= (1 << 22))
      throw SystemError("sched_getaffinity", "the calling thread's CPUs", errno);
    size = s.count * 2;
  }
}

unsigned usable_cpus() noexcept {
  try {
    return static_cast<unsigned>(std::max<std::size_t>(1, allowed_cpus().size()));
  } catch (...) {
    return std::max(1u, std::thread::hardware_concurrency());
  }
}

CpuPlace cpu_place(int cpu, const std::string& sysfs) {
  const std::string dir = fmt::format("{}/cpu{}", sysfs, cpu);
  CpuPlace p;
  p.package = read_first_int(dir + "/topology/physical_package_id");
  p.core = read_first_int(dir + "/topology/core_id");
  // The highest cache level the CPU has: named by the first CPU that shares it (every kernel lists
  // the sharers; not every one gives caches an id).
  int level = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string cache = fmt::format("{}/cache/index{}", dir, index);
    const int l = read_first_int(cache + "/level");
    if (l < 0) break;
    if (l < level) continue;
    const int first = read_first_int(cache + "/shared_cpu_list");
    if (first < 0) continue;
    level = l;
    p.last_level_cache = first;
  }
  return p;
}

std::vector<int> compact_order(std::vector<int> cpus, const std::function<CpuPlace(int)>& place) {
  std::sort(cpus.begin(), cpus.end());
  // Key: (which thread of its core, package, last-level cache, core, CPU).
  std::vector<std::tuple<int, int, int, int, int>> keyed;
  keyed.reserve(cpus.size());
  // (package, last-level cache, core) -> threads numbered so far: core ids repeat across clusters
  // on some machines, and a package may be unknown.
  std::map<std::tuple<int, int, int>, int> threads_seen;
  for (const int c : cpus) {
    const CpuPlace p = place(c);
    // A CPU whose core is unknown is a core of its own.
    const int thread = p.core < 0 ? 0 : threads_seen[{p.package, p.last_level_cache, p.core}]++;
    keyed.emplace_back(thread, p.package, p.last_level_cache, p.core, c);
  }
  std::sort(keyed.begin(), keyed.end());
  for (std::size_t i = 0; i < keyed.size(); ++i) cpus[i] = std::get<4>(keyed[i]);
  return cpus;
}

void bind_thread(pthread_t thread, int cpu, const std::string& what) {
  if (cpu < 0) throw InvalidArgument(fmt::format("{}: CPU {} does not exist", what, cpu));
  CpuSet s(cpu + 1);  // as large as the CPU's number needs: the kernel refuses one it does not have
  s.add(cpu);
  if (const int err = ::pthread_setaffinity_np(thread, s.bytes, s.set); err != 0)
    throw SystemError("pthread_setaffinity_np", fmt::format("{} to CPU {}", what, cpu), err);
}

ScopedBinding::ScopedBinding(std::optional<int> cpu, const std::string& what) {
  if (!cpu) return;
  std::vector<int> before = allowed_cpus();
  if (!std::binary_search(before.begin(), before.end(), *cpu)) return;
  bind_thread(::pthread_self(), *cpu, what);
  before_ = std::move(before);
}

ScopedBinding::~ScopedBinding() {
  if (before_.empty()) return;
  // Back to every CPU it had; a refusal here (CPUs taken offline meanwhile) leaves it bound, which
  // costs speed, not correctness, and a destructor cannot report it.
  CpuSet s(before_.back() + 1);
  for (const int c : before_) CPU_SET_S(static_cast<std::size_t>(c), s.bytes, s.set);
  (void)::pthread_setaffinity_np(::pthread_self(), s.bytes, s.set);
}

}  // namespace hdsm::os
