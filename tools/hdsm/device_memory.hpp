// Owning wrappers for device buffers and pinned host memory, so a failing measurement does not
// leak what it allocated.
#pragma once

#include <hdsm/device.hpp>

#include <cstddef>
#include <cstdio>
#include <exception>
#include <utility>

namespace hdsm::tool {

class DeviceMemory {
 public:
  DeviceMemory(Device& device, std::size_t bytes) : device_(&device), buffer_(device.alloc(bytes)) {}
  ~DeviceMemory() { release(); }
  DeviceMemory(DeviceMemory&& other) noexcept
      : device_(other.device_), buffer_(std::exchange(other.buffer_, DeviceBuffer{})) {}
  DeviceMemory& operator=(DeviceMemory&&) = delete;

  DeviceBuffer get() const { return buffer_; }
  Device& device() const { return *device_; }

 private:
  void release() noexcept {
    if (!buffer_) return;
    try {
      device_->free(buffer_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hdsm: warning: freeing a device buffer failed: %s\n", e.what());
    }
  }
  Device* device_;
  DeviceBuffer buffer_;
};

class PinnedMemory {
 public:
  PinnedMemory(Device& device, std::size_t bytes)
      : device_(&device), pointer_(static_cast<std::byte*>(device.alloc_pinned(bytes))) {}
  ~PinnedMemory() { release(); }
  PinnedMemory(PinnedMemory&& other) noexcept
      : device_(other.device_), pointer_(std::exchange(other.pointer_, nullptr)) {}
  PinnedMemory& operator=(PinnedMemory&&) = delete;

  std::byte* get() const { return pointer_; }

 private:
  void release() noexcept {
    if (pointer_ == nullptr) return;
    try {
      device_->free_pinned(pointer_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hdsm: warning: freeing pinned memory failed: %s\n", e.what());
    }
  }
  Device* device_;
  std::byte* pointer_;
};

}  // namespace hdsm::tool
