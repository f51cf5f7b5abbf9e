// Pageable host buffers kept for reuse. A fresh multi-megabyte buffer costs a page fault per 4 KiB
// the first time it is written (glibc maps allocations above 32 MiB anew every time), which for a
// buffer that is filled once and drained once is as much as the copy itself; a kept one is warm.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace hdsm {

class BufferCache {
 public:
  /// A buffer of at least `size` bytes; it goes back to its cache (if any) when it is destroyed.
  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&& other) noexcept = default;
    Buffer& operator=(Buffer&& other) noexcept {
      if (this != &other) {
        give_back();
        cache_ = other.cache_;
        data_ = std::move(other.data_);
        size_ = other.size_;
        other.cache_ = nullptr;
      }
      return *this;
    }
    ~Buffer() { give_back(); }
    std::byte* data() const { return data_.get(); }
    std::size_t size() const { return size_; }

   private:
    friend class BufferCache;
    void give_back() noexcept {
      if (cache_ != nullptr && data_) cache_->give(std::move(data_), size_);
    }
    BufferCache* cache_ = nullptr;
    std::unique_ptr<std::byte[]> data_;
    std::size_t size_ = 0;
  };

  /// Keeps buffers while their total stays within `keep_bytes` (0: keeps none).
  explicit BufferCache(std::size_t keep_bytes) : keep_bytes_(keep_bytes) {}
  BufferCache(const BufferCache&) = delete;
  BufferCache& operator=(const BufferCache&) = delete;

  /// The smallest kept buffer of at least `bytes`, else a new one of exactly `bytes`. The cache must
  /// outlive the buffer.
  Buffer take(std::size_t bytes) {
    Buffer b;
    b.cache_ = this;
    {
      std::lock_guard lock(mutex_);
      auto best = kept_.end();
      for (auto it = kept_.begin(); it != kept_.end(); ++it)
        if (it->size >= bytes && (best == kept_.end() || it->size < best->size)) best = it;
      if (best != kept_.end()) {
        b.data_ = std::move(best->data);
        b.size_ = best->size;
        kept_bytes_now_ -= best->size;
        kept_.erase(best);
        return b;
      }
    }
    b.data_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
    b.size_ = bytes;
    return b;
  }

  /// Bytes kept now.
  std::size_t kept_bytes() const {
    std::lock_guard lock(mutex_);
    return kept_bytes_now_;
  }

 private:
  /// Keeps `data` when it fits beside what is kept, making room by dropping smaller buffers (a large
  /// buffer serves every smaller request; the reverse is not true).
  void give(std::unique_ptr<std::byte[]> data, std::size_t size) noexcept {
    std::vector<Kept> evicted;  // freed after the lock
    std::lock_guard lock(mutex_);
    if (size > keep_bytes_) return;
    std::sort(kept_.begin(), kept_.end(), [](const Kept& a, const Kept& b) { return a.size < b.size; });
    while (kept_bytes_now_ + size > keep_bytes_ && !kept_.empty() && kept_.front().size <= size) {
      kept_bytes_now_ -= kept_.front().size;
      evicted.push_back(std::move(kept_.front()));
      kept_.erase(kept_.begin());
    }
    if (kept_bytes_now_ + size > keep_bytes_) return;
    try {
      kept_.push_back({std::move(data), size});
      kept_bytes_now_ += size;
    } catch (...) {  // no memory for the list entry: the buffer is freed instead
    }
  }

  struct Kept {
    std::unique_ptr<std::byte[]> data;
    std::size_t size;
  };
  const std::size_t keep_bytes_;
  mutable std::mutex mutex_;
  std::vector<Kept> kept_;
  std::size_t kept_bytes_now_ = 0;
};

}  // namespace hdsm
