// The live buffers of one device whose memory a driver allocates (OpenCL, CUDA), and the capacity
// hdsm lets programs allocate there: one place for the capacity check, for telling a live buffer
// from a freed or foreign one, and for range checks. Header-only and free of device APIs, so unit
// tests check it without a device. Thread-safe.
#pragma once

#include <hdsm/device.hpp>
#include <hdsm/error.hpp>

#include "device/checks.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace hdsm {

template <class Value>
class BufferTable {
 public:
  /// `capacity`: what programs may allocate in all; `largest`: the most one buffer may hold, which
  /// the driver's property `largest_name` states (named in the error of a larger allocation).
  /// `hex_handles`: handles are addresses, shown in hexadecimal in messages.
  BufferTable(std::string device, std::size_t capacity,
              std::size_t largest = std::numeric_limits<std::size_t>::max(), bool hex_handles = false,
              std::string largest_name = {})
      : device_(std::move(device)),
        capacity_(capacity),
        largest_(largest),
        hex_(hex_handles),
        largest_name_(std::move(largest_name)) {}

  /// Takes `bytes` of the capacity before the driver allocates them; OutOfDeviceMemory (nothing
  /// taken) when they do not fit. Give them back with unreserve() if the allocation fails.
  void reserve(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    if (bytes > largest_)
      throw OutOfDeviceMemory(
          fmt::format("{} (one buffer holds at most {}{}{})", device_, format_bytes(largest_),
                      largest_name_.empty() ? "" : ", ", largest_name_),
          bytes, used_, capacity_);
    if (bytes > capacity_ - used_) throw OutOfDeviceMemory(device_, bytes, used_, capacity_);
    used_ += bytes;
  }
  void unreserve(std::size_t bytes) noexcept {
    std::lock_guard lock(mutex_);
    used_ -= bytes;
  }
  /// Records a buffer whose bytes were reserved.
  void insert(std::uint64_t handle, std::size_t bytes, Value value) {
    std::lock_guard lock(mutex_);
    buffers_.insert_or_assign(handle, Entry{bytes, std::move(value)});
  }
  /// Forgets a live buffer and gives its bytes back; returns what the backend kept for it.
  /// InvalidPointer for a buffer that is not live (freed twice, or another device's).
  Value take(DeviceBuffer buffer) {
    std::lock_guard lock(mutex_);
    const auto it = buffers_.find(buffer.handle);
    if (it == buffers_.end())
      throw InvalidPointer(
          fmt::format("free on {}: buffer {} is not a live buffer of this device (freed twice, "
                      "or another device's)",
                      device_, handle(buffer.handle)));
    Value value = std::move(it->second.value);
    used_ -= it->second.bytes;
    buffers_.erase(it);
    return value;
  }
  /// f(value) for a live buffer, after checking that [offset, offset + bytes) lies inside it
  /// (InvalidPointer for a buffer that is not live, InvalidArgument for a range past its end).
  template <class F>
  auto with(DeviceBuffer buffer, std::size_t offset, std::size_t bytes, const std::string& what,
            F&& f) const {
    std::lock_guard lock(mutex_);
    const auto it = buffers_.find(buffer.handle);
    if (it == buffers_.end())
      throw InvalidPointer(fmt::format("{} on {}: buffer {} is not a live buffer of this device", what,
                                       device_, handle(buffer.handle)));
    require_range(what, device_, offset, bytes, it->second.bytes);
    return f(it->second.value);
  }
  std::size_t used() const {
    std::lock_guard lock(mutex_);
    return used_;
  }
  std::size_t capacity() const { return capacity_; }
  /// f(handle, bytes, value) for every live buffer (a device's destructor frees what is left).
  template <class F>
  void for_each(F&& f) {
    std::lock_guard lock(mutex_);
    for (auto& [h, e] : buffers_) f(h, e.bytes, e.value);
  }

 private:
  struct Entry {
    std::size_t bytes;
    Value value;
  };
  std::string handle(std::uint64_t h) const { return hex_ ? fmt::format("{:#x}", h) : std::to_string(h); }

  std::string device_;
  std::size_t capacity_, largest_;
  bool hex_;
  std::string largest_name_;
  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, Entry> buffers_;
  std::size_t used_ = 0;  // reserved or held by live buffers
};

}  // namespace hdsm
