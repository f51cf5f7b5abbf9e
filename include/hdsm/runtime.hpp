// The process-wide runtime: configuration, devices, statistics and tracing, with an explicit
// lifetime. The implicit default instance (Runtime::instance(), used by the C API) is created on
// first use and destroyed at exit.
#pragma once

#include <hdsm/config.hpp>
#include <hdsm/device.hpp>
#include <hdsm/stats.hpp>

#include <cstddef>
#include <memory>
#include <span>

namespace hdsm {

namespace detail {
struct RuntimeImpl;
}

class Runtime {
 public:
  /// Create a runtime with the given configuration (by default: defaults + environment).
  explicit Runtime(Config config = Config::from_environment());
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// The implicit default instance, created on first use.
  static Runtime& instance();

  const Config& config() const;
  std::span<Device* const> devices() const;
  Device& device(std::size_t index) const;
  /// The device HDSM_DEVICE names (by default the first one).
  Device& default_device() const;

  Stats stats() const;
  void reset_stats();

  detail::RuntimeImpl& impl() const { return *impl_; }

 private:
  std::unique_ptr<detail::RuntimeImpl> impl_;
};

}  // namespace hdsm
