#include "device/staging_pool.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <unistd.h>

namespace hdsm {

StagingPool::StagingPool(Device& device, std::size_t total_bytes, std::size_t chunk_bytes)
    : device_(device), chunk_bytes_(chunk_bytes), chunks_(chunk_bytes == 0 ? 0 : total_bytes / chunk_bytes) {
  if (chunks_ == 0)
    throw ConfigError(
        fmt::format("HDSM_STAGING_BYTES={} holds no chunk of HDSM_STAGING_CHUNK={}: the staging "
                    "pool needs at least one",
                    format_bytes(total_bytes), format_bytes(chunk_bytes)));
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const std::size_t physical =
      pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
  const std::size_t bytes = chunks_ * chunk_bytes_;
  if (physical != 0 && bytes > physical)
    throw ConfigError(
        fmt::format("HDSM_STAGING_BYTES={} is more than this machine's memory ({}); the pool "
                    "is pinned, so it must fit",
                    format_bytes(total_bytes), format_bytes(physical)));
  memory_ = static_cast<std::byte*>(device_.alloc_pinned(bytes));
  free_.reserve(chunks_);
  for (std::size_t i = chunks_; i-- > 0;) free_.push_back(memory_ + i * chunk_bytes_);
}

StagingPool::~StagingPool() { device_.free_pinned(memory_); }

StagingPool::Lease StagingPool::acquire() {
  std::unique_lock lock(mutex_);
  freed_.wait(lock, [this] { return !free_.empty(); });
  std::byte* chunk = free_.back();
  free_.pop_back();
  return Lease(this, chunk);
}

std::optional<StagingPool::Lease> StagingPool::try_acquire() {
  std::lock_guard lock(mutex_);
  if (free_.empty()) return std::nullopt;
  std::byte* chunk = free_.back();
  free_.pop_back();
  return Lease(this, chunk);
}

void StagingPool::give_back(std::byte* chunk) {
  {
    std::lock_guard lock(mutex_);
    free_.push_back(chunk);
  }
  freed_.notify_one();
}

StagingPool::Lease::~Lease() {
  if (pool_ != nullptr) pool_->give_back(data_);
}

}  // namespace hdsm
