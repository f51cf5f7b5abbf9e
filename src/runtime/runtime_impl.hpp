// The state of one Runtime. Member order is destruction order in reverse: devices go first (their
// queues drain), then the executor, counters and finally the tracer, which writes its file. The
// shared space goes before the devices (the destructor resets it first).
#pragma once

#include <hdsm/runtime.hpp>

#include "coherence/shared_space.hpp"
#include "device/backends.hpp"
#include "device/staging_pool.hpp"
#include "device/sim/sim_device.hpp"
#include "exec/executor.hpp"
#include "obs/counters.hpp"
#include "obs/trace.hpp"
#include "runtime/unified.hpp"

#include <memory>
#include <mutex>
#include <string_view>
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
  std::unique_ptr<sim::SimBackend> sim;
  std::unique_ptr<DeviceBackend> opencl;  // when HDSM_OPENCL asks for it
  std::unique_ptr<DeviceBackend> cuda;    // when HDSM_CUDA asks for it
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
  /// How the shared space's copy engine stages (HDSM_COPY_BUFFERS, HDSM_COPY_CHUNK) and its pool.
  coherence::SharedSpace::CopySetup copy_setup();

  using Uses = std::vector<std::pair<const void*, coherence::KernelUse>>;
  struct Call {
    unsigned device;
    Uses uses;  // empty: every object of the device (an unannotated call)
  };
  std::mutex calls_mutex;  // orders release + launch and the in-flight list
  std::vector<Call> in_flight;

 private:
  std::mutex space_mutex_;
  std::unique_ptr<coherence::SharedSpace> space_;
  std::mutex staging_mutex_;
  std::unique_ptr<StagingPool> staging_;
  std::unique_ptr<StagingPool> mpi_staging_;
};

/// Set a knob of the implicit default runtime before it is created (C API hdsm_config_set).
void set_default_knob(std::string_view knob, std::string_view value);

/// Options of the sim backend as the configuration sets them.
sim::SimOptions sim_options(const Config& config);

}  // namespace hdsm::detail
