#include "device/backends.hpp"

#include <algorithm>
#include <mutex>

namespace hdsm {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<BackendRegistration> backends;
};

Registry& registry() {
  static Registry r;  // constructed on first use: registrations run during other TUs' static init
  return r;
}

}  // namespace

bool register_backend(const BackendRegistration& backend) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.backends.push_back(backend);
  std::stable_sort(
      r.backends.begin(), r.backends.end(),
      [](const BackendRegistration& a, const BackendRegistration& b) { return a.order < b.order; });
  return true;
}

std::vector<BackendRegistration> registered_backends() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.backends;
}

bool switched_on(const Config& config, std::string_view knob, std::string_view name) {
  const std::string& value = config.get(knob);
  return value == "on" || (value == "auto" && config.get("HDSM_DEVICE").starts_with(name));
}

}  // namespace hdsm
