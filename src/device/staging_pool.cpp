#include "device/staging_pool.hpp"

#include "os/mapping.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include <unistd.h>

namespace hdsm {

StagingPool::StagingPool(Device& device, std::size_t total_bytes, std::size_t chunk_bytes, Knobs knobs)
    : device_(device), chunk_bytes_(chunk_bytes), chunks_(chunk_bytes == 0 ? 0 : total_bytes / chunk_bytes) {
  if (chunks_ == 0)
    throw ConfigError(fmt::format("{}={} holds no chunk of {}={}: the staging pool needs at least one",
                                  knobs.total, format_bytes(total_bytes), knobs.chunk,
                                  format_bytes(chunk_bytes)));
  const std::size_t physical = os::physical_memory_bytes();
  const std::size_t bytes = chunks_ * chunk_bytes_;
  if (physical != 0 && bytes > physical)
    throw ConfigError(
        fmt::format("{}={} is more than this machine's memory ({}); the pool is pinned, so it must fit",
                    knobs.total, format_bytes(total_bytes), format_bytes(physical)));
  memory_ = static_cast<std::byte*>(device_.alloc_pinned(bytes));
  free_.reserve(chunks_);
  for (std::size_t i = chunks_; i-- > 0;) free_.push_back(memory_ + i * chunk_bytes_);
}

StagingPool::~StagingPool() {
  try {
    device_.free_pinned(memory_);
  } catch (const std::exception& e) {  // a platform that has shut down (CUDA at exit): the process ends
    fmt::print(stderr, "hdsm: the staging pool of {} could not free its pinned memory: {}\n", device_.name(),
               e.what());
  }
}

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

std::vector<StagingPool::Lease> StagingPool::lease(std::size_t want, Wait wait) {
  std::vector<Lease> out;
  if (want == 0) return out;
  if (wait == Wait::for_first) {
    out.push_back(acquire());
  } else if (auto first = try_acquire()) {
    out.push_back(std::move(*first));
  } else {
    return out;
  }
  while (out.size() < want) {
    auto more = try_acquire();
    if (!more) break;
    out.push_back(std::move(*more));
  }
  return out;
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

StagingChunk::~StagingChunk() {
  for (const Event& e : pending_) {
    try {
      e.wait();
    } catch (const std::exception&) {  // the transfer reported it, or ended before it mattered
    }
  }
}

void StagingChunk::acquire(StagingPool* pool, std::size_t bytes, StagingPool::Wait wait, BufferCache* cache) {
  if (data_ != nullptr && size_ >= bytes) return;
  if (pool != nullptr && bytes <= pool->chunk_bytes()) {
    std::vector<StagingPool::Lease> leases = pool->lease(1, wait);
    if (!leases.empty()) return adopt(std::move(leases.front()));
  }
  if (cache != nullptr) {
    kept_ = cache->take(bytes);
    data_ = kept_.data();
  } else {
    heap_.reset(static_cast<std::byte*>(::operator new (bytes, std::align_val_t{kHeapAlign})));
    data_ = heap_.get();
  }
  size_ = bytes;
}

void StagingChunk::adopt(StagingPool::Lease lease) {
  data_ = lease.data();
  size_ = lease.size();
  lease_.emplace(std::move(lease));
}

void StagingChunk::settle() {
  std::vector<Event> events;
  events.swap(pending_);
  for (const Event& e : events) e.wait();
}

bool StagingChunk::settled(std::exception_ptr& error) {
  for (const Event& e : pending_)
    if (!e.query()) return false;
  for (const Event& e : pending_) {
    try {
      e.wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  pending_.clear();
  return true;
}

StagingRing::StagingRing(StagingPool& pool, std::size_t depth) : bytes_(pool.chunk_bytes()) {
  for (StagingPool::Lease& l : pool.lease(depth, StagingPool::Wait::never)) {
    chunks_.push_back(std::make_unique<StagingChunk>());
    chunks_.back()->adopt(std::move(l));
  }
  if (chunks_.empty()) {  // none free: pageable memory of its own, not a wait
    chunks_.push_back(std::make_unique<StagingChunk>());
    chunks_.back()->acquire(nullptr, bytes_, StagingPool::Wait::never, nullptr);
  }
}

StagingPool& PinnedPools::get(std::string_view name, std::size_t total_bytes, std::size_t chunk_bytes,
                              StagingPool::Knobs knobs) {
  std::lock_guard lock(mutex_);
  auto it = pools_.find(name);
  if (it == pools_.end())
    it = pools_
             .emplace(std::string(name),
                      std::make_unique<StagingPool>(device_, total_bytes, chunk_bytes, knobs))
             .first;
  return *it->second;
}

}  // namespace hdsm
