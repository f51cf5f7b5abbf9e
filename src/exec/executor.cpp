#include "exec/executor_impl.hpp"

#include "os/cpu_binding.hpp"
#include "os/fault.hpp"
#include "os/process.hpp"
#include "os/spin_wait.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>
#include <utility>

namespace hdsm::exec {
namespace {

constexpr std::uint64_t kMaxBlockThreads = 1024;
constexpr std::size_t kMaxDynamicShared = std::size_t{1} << 30;
constexpr unsigned kMaxWorkers = 4096;
// Chunks per worker: enough for load balance across uneven blocks, few enough that the shared
// counter is not contended.
constexpr std::uint64_t kChunksPerWorker = 16;
// job_word = generation << kParticipantBits | participants.
constexpr unsigned kParticipantBits = 24;
constexpr std::uint64_t kParticipantMask = (std::uint64_t{1} << kParticipantBits) - 1;
// The executor whose blocks the current thread is running (nested launches would deadlock).
thread_local const Executor::Impl* tl_running = nullptr;
// The innermost BlockInterval of the thread.
thread_local const BlockInterval* tl_interval = nullptr;

std::string dim(const Dim3& d) { return fmt::format("({}, {}, {})", d.x, d.y, d.z); }

std::string shape(const Launch& launch) {
  return fmt::format("grid {} x block {}", dim(launch.grid), dim(launch.block));
}

Dim3 block_at(std::uint64_t i, const Dim3& grid) {
  const auto x = static_cast<std::uint32_t>(i % grid.x);
  i /= grid.x;
  return Dim3{x, static_cast<std::uint32_t>(i % grid.y), static_cast<std::uint32_t>(i / grid.y)};
}

ExecutorOptions resolve(ExecutorOptions options) {
  // The CPUs this thread may use (taskset, cgroups, an MPI launcher's binding), not every CPU online.
  if (options.threads == 0) options.threads = os::usable_cpus();
  if (options.threads > kMaxWorkers)
    throw InvalidArgument(fmt::format("ExecutorOptions::threads = {} is above the limit of {} workers",
                                      options.threads, kMaxWorkers));
  if (options.fiber_stack_bytes < kMinFiberStack)
    throw InvalidArgument(fmt::format("ExecutorOptions::fiber_stack_bytes = {} is below the minimum of {}",
                                      options.fiber_stack_bytes, format_bytes(kMinFiberStack)));
  return options;
}

}  // namespace

void validate(const Launch& launch) {
  const Dim3 g = launch.grid, b = launch.block;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0)
    throw InvalidArgument(
        fmt::format("invalid launch {}: every grid and block dimension must be at least 1", shape(launch)));
  if (b.volume() > kMaxBlockThreads)
    throw InvalidArgument(
        fmt::format("invalid launch {}: a block of {} threads is above the limit of {} threads",
                    shape(launch), b.volume(), kMaxBlockThreads));
  // CUDA's dimension limits, refused on every backend so that a launch that runs on one runs on all.
  const auto above = [&](const char* what, std::uint32_t value, std::uint64_t limit) {
    if (value > limit)
      throw InvalidArgument(
          fmt::format("invalid launch {}: the {} is {}, above the limit of {} (CUDA's, kept on "
                      "every backend so that a kernel runs everywhere)",
                      shape(launch), what, value, limit));
  };
  above("grid's x dimension", g.x, kMaxGridX);
  above("grid's y dimension", g.y, kMaxGridYZ);
  above("grid's z dimension", g.z, kMaxGridYZ);
  above("block's x dimension", b.x, kMaxBlockThreads);
  above("block's y dimension", b.y, kMaxBlockThreads);
  above("block's z dimension", b.z, kMaxBlockZ);
  std::uint64_t blocks = 0;
  if (__builtin_mul_overflow(std::uint64_t{g.x} * g.y, std::uint64_t{g.z}, &blocks) ||
      blocks > std::numeric_limits<std::uint64_t>::max() / 2)
    throw InvalidArgument(
        fmt::format("invalid launch {}: the grid has more than 2^63 blocks", shape(launch)));
  if (launch.shared_bytes > kMaxDynamicShared)
    throw InvalidArgument(
        fmt::format("invalid launch {}: {} bytes of dynamic shared memory a block is above "
                    "the limit of {}",
                    shape(launch), launch.shared_bytes, format_bytes(kMaxDynamicShared)));
}

Executor::Impl::Impl(Executor* owner_, ExecutorOptions options_) : owner(owner_), options(resolve(options_)) {
  // The fault dispatcher names a kernel's stack overflow or wild access ("next to the stack pointer: a
  // stack overflow?") also in programs that never use shared memory, which installed it until then.
  os::install_fault_handler();
  workers.reserve(options.threads);
  for (unsigned w = 0; w < options.threads; ++w)
    workers.push_back(std::make_unique<WorkerState>(w, options.fiber_stack_bytes));
  threads.reserve(options.threads - 1);
  try {
    for (unsigned w = 1; w < options.threads; ++w) threads.emplace_back([this, w] { worker_main(w); });
  } catch (const std::system_error& e) {
    // std::thread says only "Resource temporarily unavailable": name what was being made.
    const std::size_t made = threads.size() + 1;
    stop_threads();
    throw SystemError("pthread_create",
                      fmt::format("worker thread {} of {} for running kernels (the process's thread limit, "
                                  "ulimit -u, or memory for their stacks; HDSM_SIM_THREADS and "
                                  "HDSM_CLUSTER_THREADS set how many)",
                                  made + 1, options.threads),
                      e.code().value());
  } catch (...) {
    stop_threads();
    throw;
  }
}

Executor::Impl::~Impl() { stop_threads(); }

void Executor::Impl::stop_threads() {
  {
    std::lock_guard lock(sleep_mutex);
    stopping.store(true);
  }
  sleep_cv.notify_all();
  for (auto& t : threads) t.join();
  threads.clear();
}

void Executor::Impl::worker_main(unsigned index) {
  os::prepare_thread_for_faults();
  std::uint64_t seen = 0;
  for (;;) {
    seen = wait_for_job(seen);
    if (stopping.load(std::memory_order_acquire)) return;
    if (index >= (seen & kParticipantMask)) continue;
    run_blocks(index);
    if (pending.fetch_sub(1, std::memory_order_acq_rel) == 1) pending.notify_one();
  }
}

std::uint64_t Executor::Impl::wait_for_job(std::uint64_t seen) {
  const auto ready = [&] {
    return job_word.load(std::memory_order_acquire) != seen || stopping.load(std::memory_order_acquire);
  };
  if (!os::spin_until(ready)) {
    std::unique_lock lock(sleep_mutex);
    // seq_cst pairs with publish(): either it sees this sleeper or the predicate sees its job.
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    sleep_cv.wait(lock, [&] { return job_word.load(std::memory_order_seq_cst) != seen || stopping.load(); });
    sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
  return job_word.load(std::memory_order_acquire);
}

void Executor::Impl::publish(unsigned participants) {
  const std::uint64_t generation = (job_word.load(std::memory_order_relaxed) >> kParticipantBits) + 1;
  job_word.store(generation << kParticipantBits | participants, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) {
    // A sleeper holds sleep_mutex from registering until it waits, so taking it here means the
    // notification cannot fall between its predicate check and its wait.
    { std::lock_guard lock(sleep_mutex); }
    sleep_cv.notify_all();
  }
}

void Executor::Impl::wait_for_participants() {
  if (os::spin_until([&] { return pending.load(std::memory_order_acquire) == 0; })) return;
  for (std::uint32_t left; (left = pending.load(std::memory_order_acquire)) != 0;)
    pending.wait(left, std::memory_order_acquire);
}

void Executor::Impl::fail(std::exception_ptr e) {
  std::lock_guard lock(error_mutex);
  if (!error) error = std::move(e);
  failed.store(true, std::memory_order_relaxed);
}

void Executor::Impl::run_blocks(unsigned worker) {
  struct Running {
    explicit Running(const Impl* impl) : previous(std::exchange(tl_running, impl)) {}
    ~Running() { tl_running = previous; }
    const Impl* previous;
  } running(this);
  const os::RunningUserCode user_code;
  if (worker == 0) os::prepare_thread_for_faults();  // the launching thread: once per thread

  WorkerState& state = *workers[worker];
  const Launch& launch = *job_launch;
  const FunctionRef<void(const BlockRun&)>& fn = *job_fn;
  const Dim3 grid = launch.grid;
  BlockRun run{Dim3{},
               &launch,
               state.shared.data(),
               launch.shared_bytes + kStaticSharedBytes,
               state.scratch.data(),
               kScratchBytes,
               worker,
               owner};
  try {
    for (;;) {
      const std::uint64_t begin = next_block.fetch_add(job_chunk, std::memory_order_relaxed);
      if (begin >= job_blocks) return;
      const std::uint64_t end = std::min(job_blocks, begin + job_chunk);
      Dim3 b = block_at(begin, grid);
      for (std::uint64_t i = begin; i < end; ++i) {
        if (failed.load(std::memory_order_relaxed)) return;
        run.block = b;
        fn(run);
        if (++b.x == grid.x) {
          b.x = 0;
          if (++b.y == grid.y) {
            b.y = 0;
            ++b.z;
          }
        }
      }
    }
  } catch (abi::__forced_unwind&) {
    os::user_code_ended_its_thread("a kernel's block");
  } catch (...) {
    fail(std::current_exception());
  }
}

void Executor::Impl::launch(const Launch& launch, FunctionRef<void(const BlockRun&)> fn) {
  validate(launch);
  if (tl_running == this)
    throw InvalidArgument(
        fmt::format("launch {} from inside a block of the same executor: nested launches "
                    "are not supported",
                    shape(launch)));
  std::lock_guard lock(launch_mutex);
  std::uint64_t first = 0, last = launch.grid.volume();
  if (const BlockInterval* interval = tl_interval) {
    last = std::min(last, interval->end());
    first = std::min(interval->begin(), last);
  }
  if (first == last) return;
  const std::uint64_t blocks = last - first;
  const auto n = static_cast<std::uint64_t>(workers.size());
  const std::uint64_t chunk = std::max<std::uint64_t>(1, blocks / (n * kChunksPerWorker));
  const auto participants = static_cast<unsigned>(std::min(n, (blocks + chunk - 1) / chunk));
  for (unsigned w = 0; w < participants; ++w) {
    workers[w]->shared.ensure(launch.shared_bytes + kStaticSharedBytes);
    workers[w]->scratch.ensure(kScratchBytes);
  }
  job_launch = &launch;
  job_fn = &fn;
  job_blocks = last;
  job_chunk = chunk;
  next_block.store(first, std::memory_order_relaxed);
  failed.store(false, std::memory_order_relaxed);
  error = nullptr;
  if (participants > 1) {
    pending.store(participants - 1, std::memory_order_relaxed);
    publish(participants);
  }
  run_blocks(0);
  if (participants > 1) wait_for_participants();
  job_launch = nullptr;
  job_fn = nullptr;
  if (error) std::rethrow_exception(std::exchange(error, nullptr));
}

Executor::Executor(ExecutorOptions options) : impl_(std::make_unique<Impl>(this, options)) {}

bool Executor::running_here() const noexcept { return tl_running == impl_.get(); }

bool inside_a_block() noexcept { return tl_running != nullptr; }

BlockInterval::BlockInterval(std::uint64_t begin, std::uint64_t end)
    : begin_(begin), end_(std::max(begin, end)), previous_(std::exchange(tl_interval, this)) {}

BlockInterval::~BlockInterval() { tl_interval = previous_; }

const BlockInterval* BlockInterval::current() noexcept { return tl_interval; }

Executor::~Executor() = default;

unsigned Executor::workers() const { return impl_->options.threads; }

const ExecutorOptions& Executor::options() const { return impl_->options; }

void Executor::for_each_block(const Launch& launch, FunctionRef<void(const BlockRun&)> fn) {
  impl_->launch(launch, fn);
}

}  // namespace hdsm::exec

namespace hdsm::detail {

void for_each_block(exec::Executor& executor, const Launch& launch, FunctionRef<void(const BlockRun&)> fn) {
  executor.for_each_block(launch, fn);
}

void throw_shared_overflow(const BlockRun& run, std::size_t bytes, const char* what) {
  const std::string where =
      fmt::format("block {} of launch {}", exec::dim(run.block), exec::shape(*run.launch));
  if (bytes == SIZE_MAX)  // shared<T>(n) whose n * sizeof(T) overflows
    throw KernelFailure(
        fmt::format("{} asks for an array of {} memory whose size in bytes overflows size_t", where, what));
  if (std::strcmp(what, "local") == 0)
    throw KernelFailure(
        fmt::format("{} needs {} bytes of Block::local storage, above the {} bytes ({}) of "
                    "per-worker scratch; keep fewer or smaller per-thread values",
                    where, bytes, run.scratch_capacity, format_bytes(run.scratch_capacity)));
  throw KernelFailure(
      fmt::format("{} needs {} bytes of {} memory, above its capacity of {} bytes ({} dynamic "
                  "+ {} static); raise Launch::shared_bytes or allocate less",
                  where, bytes, what, run.shared_capacity, run.launch->shared_bytes,
                  run.shared_capacity - run.launch->shared_bytes));
}

void throw_arg_mismatch(const std::string& kernel, std::size_t index, std::size_t got, std::size_t expected,
                        bool count) {
  if (count)
    throw InvalidArgument(fmt::format("kernel '{}' expects {} arguments, got {}", kernel, expected, got));
  throw InvalidArgument(
      fmt::format("argument {} of kernel '{}' is {} bytes, expected {}", index, kernel, got, expected));
}

}  // namespace hdsm::detail
