// What the layers built on libhdsm reach of a Runtime (libhdsm_mpi, the hdsm tool, benchmarks and
// tests of internals), in place of its whole state: the memory model, the pinned pools, and
// objects they keep per runtime.
#pragma once

#include <hdsm/export.h>

#include <hdsm/runtime.hpp>

#include "device/staging_pool.hpp"
#include "runtime/memory_model.hpp"
#include "runtime/routed_model.hpp"

#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm::detail {

struct RuntimeImpl;

/// The runtime's memory model (alloc, call, sync and bulk memory behind the public calls).
MemoryModel& memory_model(const Runtime& runtime);

/// What HDSM_PROTOCOL gives each of the runtime's devices, and why (hdsm info).
std::vector<ModelChoice> model_choices(const Runtime& runtime);

/// The runtime's pinned pool `name`, made on first use with these sizes (ConfigError naming `knobs`
/// when they make no pool).
StagingPool& pinned_pool(const Runtime& runtime, std::string_view name, std::size_t total_bytes,
                         std::size_t chunk_bytes, StagingPool::Knobs knobs);

/// The object kept for `key` on the runtime, made by `make` on first use and destroyed with the
/// runtime (before its devices).
void* attachment(const Runtime& runtime, std::string_view key,
                 const std::function<std::shared_ptr<void>()>& make);
template <class T, class Make>
T& attachment(const Runtime& runtime, std::string_view key, Make make) {
  return *static_cast<T*>(attachment(runtime, key, [&]() -> std::shared_ptr<void> { return make(); }));
}

/// The runtime's whole state, for tests and tools that look below the interfaces above.
RuntimeImpl& impl_of(const Runtime& runtime);

}  // namespace hdsm::detail

HDSM_VISIBLE_END
