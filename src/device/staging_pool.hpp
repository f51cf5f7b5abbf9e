// A fixed pool of pinned host chunks through which I/O and copies stage data between host memory,
// files and devices (seed 003 §5.4: two small pinned buffers instead of pinning the whole transfer).
// The pool allocates once; a caller that finds every chunk in use waits for one (back-pressure)
// instead of allocating more.
#pragma once

#include <hdsm/device.hpp>

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <vector>

namespace hdsm {

class StagingPool {
 public:
  /// A chunk lent to one caller, returned when the lease ends.
  class Lease {
   public:
    Lease(Lease&& other) noexcept : pool_(other.pool_), data_(other.data_), size_(other.size_) {
      other.pool_ = nullptr;
    }
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    std::byte* data() const { return data_; }
    std::size_t size() const { return size_; }

   private:
    friend class StagingPool;
    Lease(StagingPool* pool, std::byte* data) : pool_(pool), data_(data), size_(pool->chunk_bytes()) {}
    StagingPool* pool_;
    std::byte* data_;
    std::size_t size_;
  };

  /// `total_bytes / chunk_bytes` chunks of pinned memory of `device` (portable to the runtime's other
  /// devices). ConfigError, naming the knobs, when no chunk fits or the pool exceeds physical memory.
  StagingPool(Device& device, std::size_t total_bytes, std::size_t chunk_bytes);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  /// A free chunk, waiting for one when all are lent.
  Lease acquire();
  /// A free chunk if one is free now. A caller that already holds a chunk asks for a second one with
  /// this, never with acquire(): two callers each holding one and waiting for another would deadlock.
  std::optional<Lease> try_acquire();

  std::size_t chunk_bytes() const { return chunk_bytes_; }
  std::size_t chunks() const { return chunks_; }

 private:
  void give_back(std::byte* chunk);

  Device& device_;
  std::size_t chunk_bytes_;
  std::size_t chunks_;
  std::byte* memory_ = nullptr;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<std::byte*> free_;
};

}  // namespace hdsm
