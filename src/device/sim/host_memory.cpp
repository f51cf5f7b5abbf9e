#include "device/sim/host_memory.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <mutex>

namespace hdsm::sim {

void* HostMemory::alloc(std::size_t bytes) {
  if (bytes == 0) throw InvalidArgument("cannot allocate 0 bytes of pinned host memory");
  os::Mapping m(bytes, fmt::format("pinned host memory ({})", format_bytes(bytes)), /*populate=*/true);
  std::byte* p = m.data();
  std::unique_lock lock(mutex_);
  blocks_.emplace(p, std::move(m));
  return p;
}

void HostMemory::free(void* pointer) {
  std::unique_lock lock(mutex_);
  const auto it = blocks_.find(static_cast<const std::byte*>(pointer));
  if (it == blocks_.end())
    throw InvalidPointer(
        fmt::format("free_pinned({}): not pinned host memory of this runtime (foreign or "
                    "already freed)",
                    pointer));
  blocks_.erase(it);
}

bool HostMemory::contains(const void* pointer, std::size_t bytes) const {
  const auto* p = static_cast<const std::byte*>(pointer);
  std::shared_lock lock(mutex_);
  auto it = blocks_.upper_bound(p);
  if (it == blocks_.begin()) return false;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second.size();
}

}  // namespace hdsm::sim
