// The state of one Runtime. Member order is destruction order in reverse: devices go first (their
// queues drain), then the executor, counters and finally the tracer, which writes its file. The
// shared space goes before the devices (the destructor resets it first).
#pragma once

#include <hdsm/runtime.hpp>

#include "coherence/shared_space.hpp"
#include "device/backends.hpp"
#include "device/buffer_cache.hpp"
#include "device/staging_pool.hpp"
#include "exec/executor.hpp"
#include "obs/counters.hpp"
#include "obs/lock_wait.hpp"
#include "obs/trace.hpp"
#include "runtime/unified.hpp"

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace hdsm::detail {

struct RuntimeImpl {
  explicit RuntimeImpl(Config c);
  ~RuntimeImpl();

  Runtime* self = nullptr;  // the Runtime this is the state of (its owner in shared_ranges)
  Config config;
  obs::Tracer tracer;
  obs::Counters counters;
  exec::Executor executor;
  /// The registered backends the configuration asked for, in the order they were opened.
  std::vector<std::unique_ptr<DeviceBackend>> backends;
  std::vector<Device*> devices;
  std::size_t default_device = 0;

  /// HDSM_PROTOCOL=um: shared objects are the devices' unified memory (nullptr otherwise).
  std::unique_ptr<UnifiedSpace> unified;

  /// The shared space over all devices, created on first use with the configured protocol.
  coherence::SharedSpace& shared_space();
  /// The shared space if it exists (nullptr otherwise).
  coherence::SharedSpace* existing_space();
  /// Destroys the shared space (before the devices go).
  void destroy_space() noexcept;
  /// The pinned staging pool (HDSM_STAGING_BYTES, HDSM_STAGING_CHUNK), created on first use.
  StagingPool& staging();
  /// The pinned pool of MPI transfers on shared objects (HDSM_MPI_STAGING_BYTES, HDSM_MPI_CHUNK; used
  /// by libhdsm_mpi), created on first use.
  StagingPool& mpi_staging();
  /// Pageable receive buffers libhdsm_mpi keeps for reuse (HDSM_MPI_RECV_CACHE), created on first use.
  BufferCache& mpi_buffers();
  /// How the shared space's copy engine stages (HDSM_COPY_BUFFERS, HDSM_COPY_CHUNK) and its pool.
  coherence::SharedSpace::CopySetup copy_setup();

  using Uses = std::vector<coherence::ObjectUse>;
  /// An argument in an object of another device than the call's (remote access, seed 003 §4.2).
  struct Remote {
    const void* pointer;
    unsigned home;  // the device hosting the object: released and acquired there
    coherence::KernelUse use;
    std::optional<coherence::SharedSpace::Temporary> temporary;  // HDSM_REMOTE=copy: the copy passed
  };
  /// A kernel call in flight: what its sync waits for and acquires.
  struct Call {
    unsigned device;
    Uses uses;  // the objects of `device` it uses (annotated calls)
    std::vector<Remote> remote;
    bool every_object;       // an unannotated call: every object of `device`
    Event done;              // completes with the kernel
    std::thread::id thread;  // the thread that made the call: its sync acquires it
  };
  /// One per device (seed 003 §4.1): the short lock a call holds while it releases and launches
  /// (never while waiting for a device), and the calls in flight on the device.
  struct DeviceCalls {
    std::mutex mutex;
    std::vector<Call> in_flight;
  };
  std::deque<DeviceCalls> device_calls;  // by device index
  /// HDSM_REMOTE=copy: objects of non-peer devices are copied to the call's device.
  bool remote_copy = false;
  /// Where waits on the call locks are counted.
  obs::LockWaitSink lock_sink();

 private:
  std::mutex space_mutex_;  // creation and destruction of the space; the accessors read space_published_
  std::unique_ptr<coherence::SharedSpace> space_;
  std::atomic<coherence::SharedSpace*> space_published_{nullptr};
  std::mutex staging_mutex_;
  std::unique_ptr<StagingPool> staging_;
  std::unique_ptr<StagingPool> mpi_staging_;
  std::unique_ptr<BufferCache> mpi_buffers_;
};

/// Notes that the calling thread has a call in flight on `device` of `runtime`.
void note_call(const RuntimeImpl& runtime, unsigned device);
/// The devices the calling thread has calls in flight on (noted since its last take), forgotten.
std::vector<unsigned> take_noted_calls(const RuntimeImpl& runtime);
/// Whether call `c` may use the object `p` starts; drops the object from what its sync acquires.
bool forget_object(RuntimeImpl::Call& c, const coherence::Directory& directory, const void* p);

/// Set a knob of the implicit default runtime before it is created (C API hdsm_config_set).
void set_default_knob(std::string_view knob, std::string_view value);

}  // namespace hdsm::detail
