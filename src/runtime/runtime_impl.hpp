// The state of one Runtime. Member order is destruction order in reverse: devices go first (their
// queues drain), then the executor, counters and finally the tracer, which writes its file.
#pragma once

#include <hdsm/runtime.hpp>

#include "device/sim/sim_device.hpp"
#include "exec/executor.hpp"
#include "obs/counters.hpp"
#include "obs/trace.hpp"

#include <memory>
#include <string_view>
#include <vector>

namespace hdsm::detail {

struct RuntimeImpl {
  explicit RuntimeImpl(Config c);
  ~RuntimeImpl();

  Config config;
  obs::Tracer tracer;
  obs::Counters counters;
  exec::Executor executor;
  std::unique_ptr<sim::SimBackend> sim;
  std::vector<Device*> devices;
  std::size_t default_device = 0;
};

/// Set a knob of the implicit default runtime before it is created (C API hdsm_config_set).
void set_default_knob(std::string_view knob, std::string_view value);

/// Options of the sim backend as the configuration sets them.
sim::SimOptions sim_options(const Config& config);

}  // namespace hdsm::detail
