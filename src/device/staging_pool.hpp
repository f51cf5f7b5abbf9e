// The one staging pipeline's memory: fixed pools of pinned host chunks through which the copy
// engine, file I/O and MPI stage data between host memory, files, the network and devices (two
// small pinned buffers instead of pinning the whole transfer), the one rule for leasing chunks
// from them, the staging chunk (a chunk and the device work still using it) that file and MPI
// chunking both move data through, and the registry of a runtime's pools. A pool allocates once; a
// caller that finds every chunk in use waits for one (back-pressure) or goes on without.
#pragma once

#include <hdsm/export.h>

#include <hdsm/device.hpp>

#include "device/buffer_cache.hpp"

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm {

/// The knobs a pool's sizes come from, for the errors that name them.
struct StagingPoolKnobs {
  std::string_view total = "HDSM_STAGING_BYTES";
  std::string_view chunk = "HDSM_STAGING_CHUNK";
};

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

  using Knobs = StagingPoolKnobs;
  /// `total_bytes / chunk_bytes` chunks of pinned memory of `device` (portable to the runtime's other
  /// devices). ConfigError, naming the knobs, when no chunk fits or the pool exceeds physical memory.
  StagingPool(Device& device, std::size_t total_bytes, std::size_t chunk_bytes, Knobs knobs = {});
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  /// A free chunk, waiting for one when all are lent.
  Lease acquire();
  /// A free chunk if one is free now. A caller that already holds a chunk asks for a second one with
  /// this, never with acquire(): two callers each holding one and waiting for another would deadlock.
  std::optional<Lease> try_acquire();

  /// How lease() takes the first chunk: waiting for one, or only if one is free now.
  enum class Wait { for_first, never };
  /// Up to `want` chunks: the first per `wait`, the others only if free now. The one leasing rule of
  /// every user: a caller that holds a chunk never waits for another, so two holders cannot wait for
  /// each other. Empty only with Wait::never and none free.
  std::vector<Lease> lease(std::size_t want, Wait wait);

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

/// One chunk of staging memory and the device work still using it: a pinned chunk of a pool when
/// one is free (the fast path for device copies), pageable memory otherwise (kept in a BufferCache
/// when given, else from the heap), so its user never has to wait. File I/O and MPI move data
/// through these, the device side and the file or network side taking turns on each chunk.
class StagingChunk {
 public:
  StagingChunk() = default;
  StagingChunk(const StagingChunk&) = delete;
  StagingChunk& operator=(const StagingChunk&) = delete;
  /// Waits for the device work still using the memory (a transfer that failed half way) before it
  /// goes back to its pool or cache.
  ~StagingChunk();

  /// Makes data() hold at least `bytes` (no-op when it does): a chunk of `pool` when they fit one and
  /// lease(1, wait) gives one, else pageable memory.
  void acquire(StagingPool* pool, std::size_t bytes, StagingPool::Wait wait = StagingPool::Wait::never,
               BufferCache* cache = nullptr);
  /// Takes `lease` as the memory.
  void adopt(StagingPool::Lease lease);
  std::byte* data() const { return data_; }
  bool pinned() const { return lease_.has_value(); }
  /// The device copies using data(); the next user of the memory waits for them.
  std::vector<Event>& pending() { return pending_; }
  /// Waits for the pending work; rethrows the first error.
  void settle();
  /// Non-blocking: true once every pending event completed (then `error` holds the first failure, if
  /// any, and pending() is empty).
  bool settled(std::exception_ptr& error);

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::optional<StagingPool::Lease> lease_;
  // Pageable memory when no chunk is free, page-aligned as the pool's chunks are: O_DIRECT I/O
  // through it needs that (malloc's large blocks start 16 bytes into a page: EINVAL).
  static constexpr std::size_t kHeapAlign = 4096;
  struct HeapFree {
    void operator()(std::byte* p) const noexcept { ::operator delete (p, std::align_val_t{kHeapAlign}); }
  };
  std::unique_ptr<std::byte, HeapFree> heap_;
  BufferCache::Buffer kept_;
  std::vector<Event> pending_;
};

/// N-buffered staging for a blocking transfer (file I/O): chunk i of the transfer uses memory
/// i % count(). Takes up to `depth` chunks of the pool, those free now; with none free (or `depth`
/// 0), one chunk of pageable memory of its own. It never waits for the pool, as its holder keeps its
/// chunks across system calls. A transfer whose calls may wait for another thread (a pipe's writer for
/// its reader) asks for depth 0: a chunk it held there would hold up every user of the pool that waits
/// for one (the copy engine does), and that may be the thread it waits for.
class StagingRing {
 public:
  StagingRing(StagingPool& pool, std::size_t depth);
  std::size_t count() const { return chunks_.size(); }
  std::size_t chunk() const { return bytes_; }
  std::byte* data(std::size_t i) { return chunks_[i % count()]->data(); }
  std::vector<Event>& pending(std::size_t i) { return chunks_[i % count()]->pending(); }
  /// Waits for the device work on chunk `i`'s memory; rethrows its error.
  void settle(std::size_t i) { chunks_[i % count()]->settle(); }

 private:
  std::size_t bytes_;
  std::vector<std::unique_ptr<StagingChunk>> chunks_;
};

/// A runtime's pinned pools by use, each made on first use with the sizes its first user gives
/// (the runtime's "staging" for the copy engine and I/O; libhdsm_mpi's "mpi").
class PinnedPools {
 public:
  explicit PinnedPools(Device& device) : device_(device) {}
  StagingPool& get(std::string_view name, std::size_t total_bytes, std::size_t chunk_bytes,
                   StagingPool::Knobs knobs);

 private:
  Device& device_;
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<StagingPool>, std::less<>> pools_;
};

}  // namespace hdsm

HDSM_VISIBLE_END
