// Binding threads to CPUs. Threads that hand work to each other through shared cache lines (a crc
// worker and its home) pay a line transfer per hand-off, which costs several times more between
// sockets or last-level caches than within one; and a thread the scheduler moves loses its cache.
// A compact order keeps consecutive threads on cores that share the most (package, then last-level
// cache), one thread per core before any core gets a second, as OpenMP's OMP_PROC_BIND=close with
// OMP_PLACES=cores does.
#pragma once

#include <hdsm/export.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <pthread.h>

HDSM_VISIBLE_BEGIN
namespace hdsm::os {

/// The CPUs the calling thread may run on (sched_getaffinity), in increasing order. SystemError
/// naming the call when the kernel refuses.
std::vector<int> allowed_cpus();

/// How many CPUs the calling thread may run on (at least 1): what a default thread count should
/// follow, under taskset, a cgroup or an MPI launcher's binding, as OpenMP's does.
/// std::thread::hardware_concurrency() counts every online CPU instead.
unsigned usable_cpus() noexcept;

/// Where a CPU sits: ids of its package, its last-level cache and its core (-1 where unknown).
struct CpuPlace {
  int package = -1;
  int last_level_cache = -1;
  int core = -1;
};

/// The place of `cpu` as Linux describes it under `sysfs` (/sys/devices/system/cpu): its
/// topology/physical_package_id and core_id, and the id of its highest cache level. Files that
/// are missing or unreadable leave their field at -1.
CpuPlace cpu_place(int cpu, const std::string& sysfs = "/sys/devices/system/cpu");

/// `cpus` in compact order: the first hardware thread of every core, by package, then last-level
/// cache, then core, then the second threads in the same order, and so on; so each prefix of the
/// result is as close together as the machine allows without two threads on one core while a core
/// is free. `place` says where a CPU sits (CPUs of one package and core are one core's threads).
std::vector<int> compact_order(std::vector<int> cpus, const std::function<CpuPlace(int)>& place);

/// Binds `thread` to `cpu` alone; SystemError naming the call, the CPU and `what` on failure.
void bind_thread(pthread_t thread, int cpu, const std::string& what);

/// Binds the calling thread to one CPU while it lives and gives it back its former CPUs after.
class ScopedBinding {
 public:
  /// No binding when `cpu` is empty, or not one of the thread's CPUs (it may not run there).
  ScopedBinding(std::optional<int> cpu, const std::string& what);
  ~ScopedBinding();
  ScopedBinding(const ScopedBinding&) = delete;
  ScopedBinding& operator=(const ScopedBinding&) = delete;

 private:
  std::vector<int> before_;  // the CPUs to give back; empty when nothing was bound
};

}  // namespace hdsm::os
HDSM_VISIBLE_END
