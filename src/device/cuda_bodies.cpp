// The registry of CUDA bodies by kernel name (<hdsm/kernel_registry.hpp>). Registrations run during
// static initialisation, so the table is made on first use.
#include <hdsm/kernel_registry.hpp>

#include <mutex>
#include <string>
#include <unordered_map>

namespace hdsm::detail {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<std::string, CudaBodyLookup> bodies;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

bool register_cuda_body(const char* name, CudaBodyLookup lookup) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.bodies.insert_or_assign(name, lookup);
  return true;
}

CudaBodyLookup registered_cuda_body(const char* name) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.bodies.find(name);
  return it == r.bodies.end() ? nullptr : it->second;
}

}  // namespace hdsm::detail
