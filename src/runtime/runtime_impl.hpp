// The state of one Runtime. Member order is destruction order in reverse: devices go first (their
// queues drain), then the executor, counters and finally the tracer, which writes its file. The
// shared space goes before the devices (the destructor resets it first).
#pragma once

#include <hdsm/export.h>
#include <hdsm/runtime.hpp>

#include "coherence/shared_space.hpp"
#include "device/backends.hpp"
#include "device/staging_pool.hpp"
#include "exec/executor.hpp"
#include "obs/counters.hpp"
#include "obs/lock_wait.hpp"
#include "obs/trace.hpp"
#include "os/process.hpp"
#include "runtime/memory_model.hpp"
#include "runtime/routed_model.hpp"

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace hdsm::detail {

struct RuntimeImpl {
  RuntimeImpl(Config c, Runtime* owner);
  ~RuntimeImpl();

  // The Runtime this is the state of: its objects' owner in shared_ranges and direct_objects(), set
  // before the memory model is made.
  Runtime* self = nullptr;
  os::Origin origin;  // set once the fork counter runs: a child of fork() may not use or stop it
  Config config;
  obs::Tracer tracer;
  obs::Counters counters;
  exec::Executor executor;
  /// The registered backends the configuration asked for, in the order they were opened.
  std::vector<std::unique_ptr<DeviceBackend>> backends;
  std::vector<Device*> devices;
  std::size_t default_device = 0;

  /// What HDSM_PROTOCOL gives each device, and why (a fallback changes an entry, under the mutex).
  std::vector<ModelChoice> model_choices;
  std::mutex model_choices_mutex;
  /// The memory model of the shared objects: the one every device gets, or a RoutedModel.
  std::unique_ptr<MemoryModel> model;

  /// The ADSM shared space, made on first use; Unsupported where no device gets an ADSM model.
  HDSM_API coherence::SharedSpace& shared_space();  // exported: tests and tools reach the space
  /// The ADSM shared space if it exists (nullptr otherwise, and under um).
  coherence::SharedSpace* existing_space() noexcept { return model->space(); }
  /// The runtime's pinned pools by use (the one registry: the copy engine and I/O take "staging",
  /// libhdsm_mpi "mpi").
  std::unique_ptr<PinnedPools> pools;
  /// The pinned staging pool of the copy engine and I/O (HDSM_STAGING_BYTES, HDSM_STAGING_CHUNK).
  HDSM_API StagingPool& staging();  // exported: tests reach the pool
  /// Where waits on the call locks are counted.
  obs::LockWaitSink lock_sink();

  /// Objects libraries built on libhdsm keep per runtime (internal.hpp's attachment), destroyed with
  /// it, before the devices.
  std::mutex attachments_mutex;
  std::map<std::string, std::shared_ptr<void>, std::less<>> attachments;
};

/// The state of a Runtime, for the library's own layers (tests and tools use internal.hpp).
RuntimeImpl& impl_of(const Runtime& runtime);

/// Set a knob of the implicit default runtime before it is created (C API hdsm_config_set).
void set_default_knob(std::string_view knob, std::string_view value);

}  // namespace hdsm::detail
