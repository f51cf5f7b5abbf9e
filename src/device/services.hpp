// What a backend receives from the runtime: counters, tracer and the CPU executor.
#pragma once

namespace hdsm {
namespace obs {
class Counters;
class Tracer;
}  // namespace obs
namespace exec {
class Executor;
}

struct DeviceServices {
  obs::Counters& counters;
  obs::Tracer& tracer;
  exec::Executor& executor;
};

}  // namespace hdsm
