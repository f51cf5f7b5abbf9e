#include <hdsm/version.h>
#include <hdsm/error.hpp>
#include <hdsm/hdsm.hpp>

#include "os/process.hpp"
#include "runtime/adsm_model.hpp"
#include "runtime/internal.hpp"
#include "runtime/knobs.hpp"
#include "runtime/routed_model.hpp"
#include "runtime/runtime_impl.hpp"

#include <fmt/format.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

namespace hdsm {

const char* version() noexcept { return HDSM_VERSION_STRING; }

namespace detail {
namespace {

std::string name(Knob k) { return std::string(knob_name(k)); }

// HDSM_DEVICE: "backend" or "backend:index", as the configuration checked it.
std::size_t pick_default(const Config& config, const std::vector<Device*>& devices) {
  const std::string& spec = config.get(name(Knob::device));
  const auto colon = spec.find(':');
  const std::string backend = spec.substr(0, colon);
  std::size_t index = 0;
  if (colon != std::string::npos)
    (void)std::from_chars(spec.data() + colon + 1, spec.data() + spec.size(), index);
  std::size_t seen = 0;
  std::string available;
  std::map<std::string, std::size_t> per_backend;  // each device's index among its backend's
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto& p = devices[i]->properties();
    const std::string b(to_string(p.backend));
    available += fmt::format("{}{} ({}:{})", available.empty() ? "" : ", ", p.name, b, per_backend[b]++);
    if (b == backend && seen++ == index) return i;
  }
  throw NoDevice(fmt::format("HDSM_DEVICE={}: no such device; available: {}", spec,
                             available.empty() ? "none" : available));
}

}  // namespace

namespace {

// HDSM_WAIT_POLICY and HDSM_WAIT_SPIN_US, set before any thread of the runtime starts waiting; and
// the knobs that must fit each other, before any of them is used.
Config with_wait_policy(Config config) {
  check_knob_relations(config);
  apply_wait_policy(config);
  return config;
}

}  // namespace

RuntimeImpl::RuntimeImpl(Config c, Runtime* owner)
    : self(owner),
      config(with_wait_policy(std::move(c))),
      tracer(config.get(name(Knob::trace))),
      executor(exec::ExecutorOptions{static_cast<unsigned>(config.integer(name(Knob::threads))),
                                     config.size(name(Knob::fiber_stack))}) {
  counters.time_faults = config.boolean(name(Knob::stats));
  os::watch_forks();
  origin = os::Origin();
  const DeviceServices services{counters, tracer, executor};
  // Every registered backend the configuration asks for, in the registry's order (sim first).
  for (const BackendRegistration& b : registered_backends()) {
    if (!b.wanted(config)) continue;
    backends.push_back(b.open(services, config, static_cast<unsigned>(devices.size())));
    for (Device* d : backends.back()->devices()) devices.push_back(d);
  }
  default_device = pick_default(config, devices);
  pools = std::make_unique<PinnedPools>(*devices.at(default_device));
  model_choices = choose_models(config.get(name(Knob::protocol)), devices);
  model = make_memory_model(*this);
}

RuntimeImpl::~RuntimeImpl() {
  model.reset();                                  // its objects are memory of the devices
  attachments.clear();                            // libraries' state, which may hold pool chunks
  pools.reset();                                  // pinned memory of a device
  while (!backends.empty()) backends.pop_back();  // the last opened goes first
  if (config.boolean(name(Knob::stats))) std::fputs(counters.snapshot().to_string().c_str(), stderr);
}

RuntimeImpl& impl_of(const Runtime& runtime) { return *runtime.impl_; }

MemoryModel& memory_model(const Runtime& runtime) { return *impl_of(runtime).model; }

std::vector<ModelChoice> model_choices(const Runtime& runtime) {
  RuntimeImpl& impl = impl_of(runtime);
  std::lock_guard lock(impl.model_choices_mutex);
  return impl.model_choices;
}

StagingPool& pinned_pool(const Runtime& runtime, std::string_view name, std::size_t total_bytes,
                         std::size_t chunk_bytes, StagingPool::Knobs knobs) {
  return impl_of(runtime).pools->get(name, total_bytes, chunk_bytes, knobs);
}

void* attachment(const Runtime& runtime, std::string_view key,
                 const std::function<std::shared_ptr<void>()>& make) {
  RuntimeImpl& impl = impl_of(runtime);
  std::lock_guard lock(impl.attachments_mutex);
  auto it = impl.attachments.find(key);
  if (it == impl.attachments.end()) it = impl.attachments.emplace(std::string(key), make()).first;
  return it->second.get();
}

coherence::SharedSpace& RuntimeImpl::shared_space() {
  AdsmModel* adsm = model->adsm();
  if (adsm == nullptr)
    throw Unsupported(
        fmt::format("HDSM_PROTOCOL={} has no ADSM shared space: its objects are the devices' "
                    "unified memory or host memory they use in place",
                    config.get(name(Knob::protocol))));
  return adsm->shared_space();
}

obs::LockWaitSink RuntimeImpl::lock_sink() {
  return {&counters, tracer.enabled() ? &tracer : nullptr, "lock wait: device calls"};
}

}  // namespace detail

Runtime::Runtime(Config config) : impl_(std::make_unique<detail::RuntimeImpl>(std::move(config), this)) {}
Runtime::~Runtime() {
  // In a child of fork() the runtime's threads are the parent's; from an exit() in a kernel, one of
  // them runs this destructor. Stopping them would wait forever: the process's end takes it all.
  if (!impl_->origin.may_tear_down()) (void)impl_.release();  // NOLINT(bugprone-unused-return-value)
}

namespace {

// Set when the default runtime ends with the program's static objects: a global that outlives it
// (declared before its first use) then finds it gone instead of reading a destroyed one. Constant
// initialized and trivially destructible, so it is valid throughout static destruction.
constinit std::atomic<bool> default_runtime_ended{false};

struct DefaultRuntime {
  std::mutex mutex;  // creation and the settings; never taken once the runtime is published
  std::vector<std::pair<std::string, std::string>> settings;  // programmatic, applied over the environment
  std::unique_ptr<Runtime> runtime;
  std::atomic<Runtime*> published{nullptr};  // runtime.get() once it is made: what every call reads
  ~DefaultRuntime() {
    published.store(nullptr, std::memory_order_release);
    default_runtime_ended.store(true, std::memory_order_release);
  }
};

DefaultRuntime& default_runtime() {
  static DefaultRuntime instance;
  return instance;
}

// The default runtime ends at exit() in the order of its own making, not of `instance`'s (which a
// knob set or a free before the first use makes earlier): a platform runtime that started while the
// Runtime was made, and registered its own teardown with atexit then (CUDA's static runtime does),
// is still there while the runtime's devices free their memory. Before, such a program's exit
// unloaded CUDA first, and freeing the staging pool's pinned memory then ended in std::terminate.
void end_default_runtime() {
  auto& d = default_runtime();
  d.published.store(nullptr, std::memory_order_release);
  default_runtime_ended.store(true, std::memory_order_release);
  d.runtime.reset();
}

}  // namespace

void detail::set_default_knob(std::string_view knob, std::string_view value) {
  auto& d = default_runtime();
  std::lock_guard lock(d.mutex);
  if (d.runtime)
    throw ConfigError(
        fmt::format("cannot set {}={}: the default runtime is already running; set knobs before the "
                    "first call that uses it",
                    knob, value));
  Config::defaults().set(knob, value);  // validate now, so the error comes from this call
  d.settings.emplace_back(knob, value);
}

void detail::free_in_default_runtime(void* p) {
  if (default_runtime_ended.load(std::memory_order_acquire)) return;
  Runtime::instance().free(p);
}

Runtime& Runtime::instance() {
  auto& d = default_runtime();
  // Every call, sync and memcpy of the default runtime comes here: one acquire load once it exists.
  if (Runtime* rt = d.published.load(std::memory_order_acquire)) {
    if (!rt->impl_->origin.same_process()) [[unlikely]]
      throw Unsupported(
          "hdsm's runtime was made before this process was forked: a child of fork() has neither its threads "
          "nor its shared memory (use it in the parent, or exec)");
    return *rt;
  }
  // Not published: not made yet, or ended (then the object `d` itself is destroyed: not touched).
  if (default_runtime_ended.load(std::memory_order_acquire))
    throw Unsupported(
        "hdsm's default runtime has ended with the program's static objects: a global or static object "
        "that outlives it cannot use it (hdsm::free is a no-op then)");
  std::lock_guard lock(d.mutex);
  if (!d.runtime) {
    Config config = Config::from_environment();
    for (const auto& [knob, value] : d.settings) config.set(knob, value);
    d.runtime = std::make_unique<Runtime>(std::move(config));
    // Where atexit cannot take it, `instance`'s destructor ends the runtime, as before.
    (void)std::atexit(end_default_runtime);
    d.published.store(d.runtime.get(), std::memory_order_release);
  }
  return *d.runtime;
}

const Config& Runtime::config() const { return impl_->config; }
std::span<Device* const> Runtime::devices() const { return impl_->devices; }

Device& Runtime::device(std::size_t index) const {
  if (index >= impl_->devices.size())
    throw InvalidArgument(fmt::format("device index {} out of range: this runtime has {} devices", index,
                                      impl_->devices.size()));
  return *impl_->devices[index];
}

Device& Runtime::default_device() const { return *impl_->devices[impl_->default_device]; }
Stats Runtime::stats() const { return impl_->counters.snapshot(); }
void Runtime::reset_stats() { impl_->counters.reset(); }

}  // namespace hdsm
