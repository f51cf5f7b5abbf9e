#include "crc/directory.hpp"
#include "crc/engine.hpp"
#include "crc/home.hpp"
#include "crc/page_buffer.hpp"
#include "crc/threads_transport.hpp"
#include "crc/worker.hpp"

#include "os/cpu_binding.hpp"
#include "os/fault.hpp"
#include "os/mapping.hpp"
#include "os/offset_heap.hpp"
#include "os/process.hpp"
#include "os/spin_wait.hpp"
#include "runtime/knobs.hpp"

#include <hdsm/config.hpp>
#include <hdsm/crc.hpp>
#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <dlfcn.h>

#ifndef HDSM_MPI_LIBRARY  // set by the build where MPI was found
#define HDSM_MPI_LIBRARY "libhdsm_mpi.so"
#endif

namespace hdsm::crc {

namespace {
#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
}  // namespace

Options Options::from_environment() { return from_config(Config::from_environment()); }

Options Options::from_config(const Config& config) {
  Options o;
  o.workers = static_cast<int>(config.integer(knob_name(Knob::crc_workers)));
  o.local_store = config.size(knob_name(Knob::crc_local_store));
  o.page_size = config.size(knob_name(Knob::crc_page_size));
  o.shared_bytes = config.size(knob_name(Knob::crc_shared));
  o.timeout = std::chrono::milliseconds(config.integer(knob_name(Knob::crc_timeout_ms)));
  o.zero_copy = config.boolean(knob_name(Knob::crc_zero_copy));
  o.region_spin = std::chrono::microseconds(config.integer(knob_name(Knob::crc_spin_us)));
  o.bind = config.get(knob_name(Knob::crc_bind)) == "compact" ? Bind::compact : Bind::none;
  o.wait = WaitPolicy::from_config(config);
  return o;
}

namespace detail {
void add_stats(Stats& into, const Stats& s) {
  into.regions += s.regions;
  into.read_misses += s.read_misses;
  into.write_faults += s.write_faults;
  into.upgrades_with_data += s.upgrades_with_data;
  into.write_backs += s.write_backs;
  into.flush_fetches += s.flush_fetches;
  into.direct_gets += s.direct_gets;
  into.direct_puts += s.direct_puts;
  into.in_place += s.in_place;
  into.evictions += s.evictions;
  into.conflict_misses += s.conflict_misses;
  into.invalidations += s.invalidations;
  into.twins += s.twins;
  into.merged_bytes += s.merged_bytes;
  into.locks += s.locks;
  into.barriers += s.barriers;
  into.messages += s.messages;
}
}  // namespace detail

namespace {
constexpr std::size_t kAlignment = detail::kSpaceAlignment;

int default_workers() {
  const unsigned cores = os::usable_cpus();
  return static_cast<int>(std::clamp(cores - 1, 1u, static_cast<unsigned>(detail::kMaxWorkers)));
}

// Inside a region, the workers and the home wait only for each other. Where each has a core, they
// spin longer than elsewhere in hdsm, as the seed's SPEs did on their mailboxes: with the usual
// budget, the workers queued for a lock outwait it from about ten on, and every hand-on then pays
// a wake-up. They also spin the process's usual budget without yielding, since nobody waits for
// their cores: of 15 workers released by a barrier, one or more would otherwise be in a half-
// microsecond `sched_yield` nearly every time. With more threads than cores, waiting spinners
// would slow the ones that work, so they keep the usual budget and yield as usual.
detail::ThreadsTransport::Spin spin_in_region(std::chrono::microseconds region_spin, int workers) {
  const std::uint64_t policy = os::spin_budget();
  if (policy == 0 || policy == std::numeric_limits<std::uint64_t>::max()) return {policy, 0};  // block, spin
  if (static_cast<unsigned>(workers) + 1 > os::usable_cpus()) return {policy, 0};
  // HDSM_CRC_SPIN_US itself, also below HDSM_WAIT_SPIN_US: 0 sleeps at once inside a region.
  return {static_cast<std::uint64_t>(region_spin.count()) * 1000, policy};
}

// Workers on threads of this process; the home is the thread that calls run.
class ThreadsEngine final : public detail::Engine {
 public:
  explicit ThreadsEngine(const Options& o)
      : options_local_store_(o.local_store),
        // Under ThreadSanitizer nothing is in place: a single writer's in-place writes may overlap the
        // home's copy of the same page for another worker, which reads other bytes of it (the race
        // it formally is, and which the version check and invalidation lists make harmless).
        zero_copy_(o.zero_copy && !kThreadSanitizer),
        workers_(o.workers > 0 ? o.workers : default_workers()),
        bytes_(round_up(o.shared_bytes)),
        // One alignment more than the space: its start is rounded up to the largest page size, so
        // pages (aligned by address) never start before it.
        mapping_(bytes_ + kAlignment, "crc shared space"),
        data_(detail::align_space(mapping_.data())),
        heap_(bytes_, kAlignment),
        // One more worker than threads: the home, in regions it works in (run_with_home).
        directory_(bytes_ / o.page_size, o.page_size, std::min(workers_ + 1, detail::kMaxWorkers)),
        transport_(workers_, data_, spin_in_region(o.region_spin, workers_)),
        home_(transport_.home(), directory_, data_, workers_, o.timeout) {
    const detail::Space space{reinterpret_cast<std::uintptr_t>(data_), bytes_, &granules_};
    for (int w = 0; w < workers_; ++w) {
      workers_state_.push_back(
          std::make_unique<detail::Worker>(w, workers_, o.local_store, transport_.worker(w), space));
      workers_state_.back()->serve_in_place(zero_copy_);
    }
    home_.set_interrupt([this](int w) { workers_state_[static_cast<std::size_t>(w)]->interrupt(); });
    try {
      for (int w = 0; w < workers_; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
      if (o.bind == Bind::compact) bind_threads();
    } catch (...) {
      stop_threads();  // no destructor runs for an engine its constructor left: join what started
      throw;
    }
  }

  ~ThreadsEngine() override { stop_threads(); }

  static std::size_t round_up(std::size_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }

  int workers() const override { return workers_; }
  bool is_home() const override { return true; }

  void* allocate(std::size_t bytes) override {
    if (bytes == 0) throw InvalidArgument("crc::Runtime::allocate(0): nothing to allocate");
    const auto offset = heap_.allocate(bytes);
    if (!offset)
      throw OutOfDeviceMemory("crc shared space" + heap_.scattered_note(heap_.rounded(bytes)), bytes,
                              heap_.used(), heap_.capacity(), "HDSM_CRC_SHARED");
    std::byte* p = data_ + *offset;
    // Allocations come zeroed. Past every offset handed out so far the space is as mmap made it (zero,
    // and not committed: writing zeros there would commit all of a large allocation at once); below,
    // a freed allocation's bytes are cleared.
    const std::size_t end = *offset + heap_.rounded(bytes);
    if (*offset < fresh_from_) std::memset(p, 0, std::min(end, fresh_from_) - *offset);
    fresh_from_ = std::max(fresh_from_, end);
    sizes_[p] = bytes;
    granules_.mark(*offset, bytes, true);
    return p;
  }

  void free(void* pointer) override {
    if (pointer == nullptr) return;  // as std::free
    const auto it = sizes_.find(static_cast<std::byte*>(pointer));
    if (it == sizes_.end())
      throw InvalidPointer(
          fmt::format("crc::Runtime::free({}): not an allocation of this shared space", pointer));
    heap_.release(static_cast<std::size_t>(it->first - data_), it->second);
    granules_.mark(static_cast<std::size_t>(it->first - data_), it->second, false);
    sizes_.erase(it);
  }

  Stats run(const std::function<void()>& task, const detail::Geometry& geometry) override {
    return run_region(task, geometry, false);
  }

  Stats run_with_home(const std::function<void()>& task, const detail::Geometry& geometry) override {
    if (workers_ + 1 > detail::kMaxWorkers)
      throw InvalidArgument(
          fmt::format("crc::Runtime::run_with_home with {} workers: the home would be worker {}, "
                      "beyond the {} supported",
                      workers_, workers_ + 1, detail::kMaxWorkers));
    return run_region(task, geometry, true);
  }

 private:
  void stop_threads() {
    stop_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // The home first, then the workers, in compact order (wrapping around when the threads outnumber
  // the CPUs). The workers are bound once; the home, the caller's thread, only while it serves.
  void bind_threads() {
    const std::vector<int> order =
        os::compact_order(os::allowed_cpus(), [](int cpu) { return os::cpu_place(cpu); });
    if (order.empty()) return;
    home_cpu_ = order[0];
    for (int w = 0; w < workers_; ++w)
      os::bind_thread(threads_[static_cast<std::size_t>(w)].native_handle(),
                      order[static_cast<std::size_t>(w + 1) % order.size()], fmt::format("crc worker {}", w));
  }

  Stats run_region(const std::function<void()>& task, const detail::Geometry& geometry, bool home_works) {
    const os::ScopedBinding home_binding(home_cpu_, "the crc home");
    directory_.reset(bytes_ / geometry.page_size, geometry.page_size);
    transport_.set_page_size(geometry.page_size);
    transport_.set_versions(directory_.versions());
    geometry_ = geometry;
    region_count_ = home_works ? workers_ + 1 : workers_;
    // The home's own worker is made before the workers start: once they have, a failure here would
    // leave them waiting for answers nobody gives.
    if (home_works && !home_worker_)
      home_worker_ = std::make_unique<detail::HomeWorker>(
          directory_, data_, workers_, options_local_store_,
          detail::Space{reinterpret_cast<std::uintptr_t>(data_), bytes_, &granules_}, zero_copy_);
    task_ = &task;
    idle_.store(0);
    for (const auto& w : workers_state_) w->rearm();
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    Stats region;
    std::exception_ptr home_error;
    // The home's own share first (it needs no servicing, so nobody waits for it), then it serves
    // whatever the workers ask.
    if (home_works) home_error = home_worker_->run(task, geometry, workers_ + 1, region);
    std::exception_ptr error = home_.serve(geometry.page_size, region);
    if (!error) error = home_error;
    // The workers are back to waiting once they posted done; wait for them to get there.
    if (!os::spin_until([&] { return idle_.load() == workers_; }))
      while (idle_.load() != workers_) std::this_thread::yield();
    region.twins = directory_.twins_made();
    for (const auto& w : workers_state_) {
      detail::add_stats(region, w->stats());
      w->reset_stats();
    }
    region.regions = 1;
    task_ = nullptr;
    if (error) std::rethrow_exception(error);
    return region;
  }

  void worker_loop(int w) {
    detail::Worker& worker = *workers_state_[static_cast<std::size_t>(w)];
    std::uint64_t seen = 0;
    for (;;) {
      if (!os::spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; }))
        while (generation_.load(std::memory_order_acquire) == seen) generation_.wait(seen);
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load()) return;
      (void)worker.run(*task_, geometry_, region_count_);  // the home has its error
      idle_.fetch_add(1);
    }
  }

  std::size_t options_local_store_;
  bool zero_copy_;
  int workers_;
  std::size_t bytes_;
  os::Mapping mapping_;
  std::byte* data_;
  os::OffsetHeap heap_;
  std::size_t fresh_from_ = 0;  // no byte from this offset on was ever allocated: still zero
  std::map<std::byte*, std::size_t> sizes_;
  detail::Granules granules_{bytes_};
  detail::Geometry geometry_;
  detail::Directory directory_;
  detail::ThreadsTransport transport_;
  detail::Home home_;
  std::vector<std::unique_ptr<detail::Worker>> workers_state_;
  std::vector<std::thread> threads_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> idle_{0};
  std::atomic<bool> stop_{false};
  const std::function<void()>* task_ = nullptr;
  int region_count_ = 0;
  std::unique_ptr<detail::HomeWorker> home_worker_;
  std::optional<int> home_cpu_;  // Bind::compact: the home's CPU in a region
};

// libhdsm_mpi provides the MPI engine. A program that links it but calls nothing in it directly (a
// crc program's calls all go to libhdsm) loses it to the linker's --as-needed, Debian's and Ubuntu's
// default: the library is then loaded from libhdsm's own directory, where it is installed beside it.
detail::EngineFactory mpi_engine_factory() {
  using Lookup = detail::EngineFactory (*)();
  constexpr const char* kSymbol = "hdsm_crc_mpi_engine";
  if (const auto lookup = reinterpret_cast<Lookup>(::dlsym(RTLD_DEFAULT, kSymbol))) return lookup();
  std::string why = "libhdsm's own path is unknown";
  Dl_info self{};
  if (::dladdr(reinterpret_cast<const void*>(&mpi_engine_factory), &self) != 0 && self.dli_fname != nullptr) {
    std::string path = self.dli_fname;
    path = path.substr(0, path.rfind('/') + 1) + HDSM_MPI_LIBRARY;
    // Local: its MPI entry points interpose nothing the program did not ask for.
    void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept for the process's life
    if (library != nullptr) {
      if (const auto lookup = reinterpret_cast<Lookup>(::dlsym(library, kSymbol))) return lookup();
      why = fmt::format("{} has no {}", path, kSymbol);
    } else {
      const char* error = ::dlerror();  // NOLINT(concurrency-mt-unsafe): glibc keeps it per thread
      why = fmt::format("dlopen({}): {}", path, error != nullptr ? error : "failed");
    }
  }
  throw Unsupported(fmt::format(
      "crc::Runtime with the MPI transport needs libhdsm_mpi: link the program with hdsm::mpi (pkg-config "
      "hdsm-mpi), or install it beside libhdsm ({})",
      why));
}

std::unique_ptr<detail::Engine> make_engine(const Options& o, std::exception_ptr local_error) {
  // Threads, or a Transport no enumerator names (checked_locally's error, not an MPI job's).
  if (o.transport != Transport::mpi) {
    if (local_error) std::rethrow_exception(local_error);
    return std::make_unique<ThreadsEngine>(o);
  }
  // Over MPI each rank checks its own options and environment, and one of them may fail alone: the
  // engine's setup, which every rank enters, carries the failure.
  return mpi_engine_factory()(o, std::move(local_error));
}

// What a rank checks alone: the options' ranges, the page buffer's geometry, and the wait policy the
// workers and the home wait with, as the rest of hdsm does (HDSM_WAIT_POLICY, HDSM_WAIT_SPIN_US),
// set before the workers start.
detail::Geometry checked_locally(const Options& o) {
  if (o.transport == Transport::threads && (o.workers < 0 || o.workers > detail::kMaxWorkers))
    throw InvalidArgument(
        fmt::format("crc::Runtime with {} workers: 1 to {} are supported (0: one per usable CPU)", o.workers,
                    detail::kMaxWorkers));
  check_option("crc::Options::timeout", Knob::crc_timeout_ms, static_cast<double>(o.timeout.count()),
               fmt::format("{} ms", o.timeout.count()));
  check_option("crc::Options::region_spin", Knob::crc_spin_us, static_cast<double>(o.region_spin.count()),
               fmt::format("{} us", o.region_spin.count()));
  // The page buffer's geometry first: its error says more than a range (a store below one page).
  const detail::Geometry g = detail::geometry(o.local_store, o.page_size, o.sets);
  // The other options set in code get the ranges their knobs have.
  check_option("crc::Options::local_store", Knob::crc_local_store, static_cast<double>(o.local_store),
               format_bytes(o.local_store));
  check_option("crc::Options::shared_bytes", Knob::crc_shared, static_cast<double>(o.shared_bytes),
               format_bytes(o.shared_bytes));
  if (o.transport != Transport::threads && o.transport != Transport::mpi)
    throw InvalidArgument(fmt::format("crc::Options::transport = {} is no Transport (threads or mpi)",
                                      static_cast<int>(o.transport)));
  if (o.bind != Bind::none && o.bind != Bind::compact)
    throw InvalidArgument(
        fmt::format("crc::Options::bind = {} is no Bind (none or compact, HDSM_CRC_BIND's choices)",
                    static_cast<int>(o.bind)));
  check_wait_policy(o.wait, "crc::Options::wait");
  apply_wait_policy(o.wait);
  return g;
}
}  // namespace

class Runtime::Impl {
 public:
  explicit Impl(const Options& o) : options_(o) {
    std::exception_ptr local_error;
    try {
      // crc moves pages by calls, not faults; the dispatcher only gives a task's crash (a stack
      // overflow, a null pointer) a message, and passes it on to any handler the program had.
      // Installing it also starts the fork counter (origin_ below).
      os::install_fault_handler();
      geometry_ = checked_locally(o);
    } catch (...) {
      local_error = std::current_exception();
    }
    engine_ = make_engine(o, std::move(local_error));
  }

  Options options_;
  os::Origin origin_;  // a child of fork() may not stop the parent's workers
  detail::Geometry geometry_;
  std::unique_ptr<detail::Engine> engine_;
  std::atomic<std::thread::id> runner_{};  // the host thread in run(), while a region runs
  // allocate, free, page_size and define from several host threads between regions, one at a time:
  // each changes the heap, the geometry or the task table; run() takes it once before its region,
  // so that none is halfway when a region starts.
  std::mutex between_regions_;
  Stats stats_;
  std::map<int, std::function<void()>> tasks_;

  /// InvalidArgument for `call` while a region runs: from the region (its tasks or its host
  /// thread), `inside` says what to do; from another host thread, that a runtime runs one region
  /// at a time.
  void check_between_regions(const char* call, const char* inside) const {
    check_same_process(call);
    const std::thread::id runner = runner_.load(std::memory_order_acquire);
    if (runner == std::thread::id{}) return;
    if (runner == std::this_thread::get_id() || crc::worker_id() >= 0)
      throw InvalidArgument(fmt::format("crc::Runtime::{} inside a region: {}", call, inside));
    throw InvalidArgument(
        fmt::format("crc::Runtime::{} while another thread runs a region of this runtime: "
                    "a runtime runs one region at a time, and is changed between them",
                    call));
  }

  /// check_between_regions, then the lock that keeps these calls one at a time, then the check
  /// again (a region another thread began meanwhile).
  std::unique_lock<std::mutex> between_regions(const char* call, const char* inside) {
    check_between_regions(call, inside);
    std::unique_lock lock(between_regions_);
    check_between_regions(call, inside);
    return lock;
  }

  /// Unsupported in a child of fork(): the runtime's workers are the parent's threads (a region
  /// would wait for them forever).
  void check_same_process(const char* call) const {
    if (!origin_.same_process())
      throw Unsupported(fmt::format(
          "crc::Runtime::{}: the runtime was made before this process was forked, and a child of fork() "
          "has none of its workers (use it in the parent, or make a runtime in the child)",
          call));
  }

  void run(const std::function<void()>& task, bool home_works) {
    check_same_process("run");
    // Until this thread holds the runtime: the check throws while another region runs, and returns
    // (to try again) once it has ended.
    for (std::thread::id none{};
         !runner_.compare_exchange_strong(none, std::this_thread::get_id(), std::memory_order_acq_rel);
         none = std::thread::id{})
      check_between_regions("run", "regions do not nest");
    struct Ends {
      std::atomic<std::thread::id>& runner;
      ~Ends() { runner.store(std::thread::id{}, std::memory_order_release); }
    } ends{runner_};
    { std::lock_guard wait_for_changes(between_regions_); }
    try {
      const Stats region =
          home_works ? engine_->run_with_home(task, geometry_) : engine_->run(task, geometry_);
      detail::add_stats(stats_, region);
    } catch (...) {
      stats_.regions += 1;
      throw;
    }
  }
};

Runtime::Runtime(const Options& options) : impl_(std::make_unique<Impl>(options)) {}
Runtime::~Runtime() {
  // In a child of fork() the workers are the parent's; from an exit() in a task, one of them runs
  // this. Stopping them would wait forever: the process's end takes it all.
  if (!impl_->origin_.may_tear_down()) {
    if (impl_->engine_) impl_->engine_->abandon();
    (void)impl_.release();  // NOLINT(bugprone-unused-return-value)
  }
}

void* Runtime::allocate(std::size_t bytes) {
  // A size of 0 is refused by the engine: under MPI after the ranks agreed on the size, so that a
  // rank alone passing 0 does not leave the others in the collective.
  const auto one_at_a_time = impl_->between_regions("allocate", "allocate between regions");
  return impl_->engine_->allocate(bytes);
}
void Runtime::free(void* pointer) {
  // null included: collective over MPI
  const auto one_at_a_time = impl_->between_regions("free", "free between regions");
  impl_->engine_->free(pointer);
}
void Runtime::page_size(std::size_t bytes) {
  const auto one_at_a_time = impl_->between_regions("page_size", "change it between regions");
  impl_->geometry_ = detail::geometry(impl_->options_.local_store, bytes, impl_->options_.sets);
}
std::size_t Runtime::page_size() const { return impl_->geometry_.page_size; }
std::size_t Runtime::frames() const { return impl_->geometry_.frames; }
std::size_t Runtime::sets() const { return impl_->geometry_.sets; }
int Runtime::workers() const { return impl_->engine_->workers(); }
bool Runtime::is_home() const { return impl_->engine_->is_home(); }
void Runtime::run(const std::function<void()>& task) { impl_->run(task, false); }
void Runtime::run_with_home(const std::function<void()>& task) { impl_->run(task, true); }
void Runtime::define(int task_id, std::function<void()> task) {
  // The region's tasks run the table's functions: a change there would destroy one while it runs.
  const auto one_at_a_time = impl_->between_regions("define", "define tasks between regions");
  impl_->tasks_[task_id] = std::move(task);
}
void Runtime::run(int task_id) {
  const auto it = impl_->tasks_.find(task_id);
  if (it != impl_->tasks_.end()) {
    impl_->run(it->second, false);
    return;
  }
  std::string message = fmt::format("crc::Runtime::run({}): no task defined under that number", task_id);
  if (impl_->options_.transport != Transport::mpi) throw InvalidArgument(message);
  // Under MPI the other ranks are in the region's collective already: the region runs, and this
  // rank's worker fails it, on every rank (the home, rank 0, runs no task in a region).
  impl_->run([message = std::move(message)] { throw InvalidArgument(message); }, false);
}
Stats Runtime::stats() const { return impl_->stats_; }
void Runtime::reset_stats() { impl_->stats_ = Stats{}; }

}  // namespace hdsm::crc
