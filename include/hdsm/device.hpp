// The Device interface: what every backend (sim, opencl, cuda) provides. Programs that want
// explicit control (the "hand-written cudaMemcpy" style) use it directly; the coherence layers use
// it underneath.
#pragma once

#include <hdsm/export.h>

#include <hdsm/kernel.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

HDSM_VISIBLE_BEGIN
namespace hdsm {

enum class Backend { sim, opencl, cuda };
std::string_view to_string(Backend backend);

struct DeviceProperties {
  std::string name;         // "sim0", "opencl0"
  std::string description;  // what the platform calls the device (OpenCL: CL_DEVICE_NAME), may be empty
  Backend backend = Backend::sim;
  unsigned index = 0;  // position in the runtime's device list
  std::size_t memory_bytes = 0;
  unsigned copy_engines = 0;  // independent DMA engines (2: one per direction)
  int peer_group = -1;        // devices with the same non-negative group can copy peer-to-peer
  double link_gbps = 0;       // modelled or nominal host link rate (GB/s); 0: unthrottled/unknown
  double latency_us = 0;      // modelled per-transfer latency
  bool zeroed_alloc = false;  // alloc() returns buffers that read as zero (false: poisoned or undefined)
  /// The device's kernels use host memory in place as fast as its own (a CPU device, an integrated
  /// GPU, a coherent superchip): copying data to it only costs time. HDSM_PROTOCOL=auto then keeps
  /// its shared objects in host memory.
  bool shares_host_memory = false;
  std::string host_memory_source;  // what the platform reported for shares_host_memory
};

/// A device allocation. The handle is backend-specific (sim: an offset in the device mapping,
/// opencl: a cl_mem, cuda: a device address); user code never dereferences it.
struct DeviceBuffer {
  std::uint64_t handle = 0;
  std::size_t bytes = 0;
  explicit operator bool() const { return handle != 0; }
  friend bool operator==(const DeviceBuffer&, const DeviceBuffer&) = default;
};

namespace detail {
struct EventState;
}

/// Completion of the work a queue had enqueued when the event was recorded.
class Event {
 public:
  Event() = default;
  explicit Event(std::shared_ptr<detail::EventState> state) : state_(std::move(state)) {}
  /// True once the recorded work has finished (a default-constructed event is complete).
  bool query() const;
  /// Block the calling host thread until the recorded work has finished; rethrows the first error
  /// of that work.
  void wait() const;
  const std::shared_ptr<detail::EventState>& state() const { return state_; }

 private:
  std::shared_ptr<detail::EventState> state_;
};

/// One kernel argument: a device buffer (plus offset) or a plain value copied at enqueue time.
class KernelArg {
 public:
  static KernelArg buffer(DeviceBuffer b, std::size_t offset = 0) {
    KernelArg a;
    a.is_buffer_ = true;
    a.buffer_ = b;
    a.offset_ = offset;
    a.size_ = sizeof(void*);
    return a;
  }
  template <class T>
  static KernelArg value(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>, "kernel arguments must be trivially copyable");
    constexpr std::size_t size = sizeof(T);  // NOLINT(bugprone-sizeof-expression): T may be a pointer
    static_assert(size <= kMaxValue, "kernel argument too large: pass a buffer");
    KernelArg a;
    std::memcpy(a.bytes_, &v, size);
    a.size_ = size;
    return a;
  }
  static constexpr std::size_t kMaxValue = 64;

  bool is_buffer() const { return is_buffer_; }
  DeviceBuffer buffer() const { return buffer_; }
  std::size_t offset() const { return offset_; }
  std::size_t size() const { return size_; }
  const void* data() const { return bytes_; }

 private:
  bool is_buffer_ = false;
  DeviceBuffer buffer_{};
  std::size_t offset_ = 0;
  std::size_t size_ = 0;
  alignas(16) unsigned char bytes_[kMaxValue] = {};
};

class Device;

/// An in-order stream of device work (CUDA stream, OpenCL in-order queue). Operations run in the
/// order enqueued; different queues run concurrently where engines allow. Memory passed to an
/// asynchronous copy must stay valid and unchanged until the copy has completed. Arguments are
/// validated when enqueued: a bad range or handle throws there, nothing is enqueued.
class Queue {
 public:
  virtual ~Queue() = default;
  virtual Device& device() = 0;

  virtual void copy_to_device(DeviceBuffer dst, std::size_t dst_offset, const void* src,
                              std::size_t bytes) = 0;
  virtual void copy_to_host(void* dst, DeviceBuffer src, std::size_t src_offset, std::size_t bytes) = 0;
  virtual void copy_on_device(DeviceBuffer dst, std::size_t dst_offset, DeviceBuffer src,
                              std::size_t src_offset, std::size_t bytes) = 0;
  /// Copy from a buffer of a peer device into this queue's device. Throws Unsupported when the
  /// devices cannot reach each other directly.
  virtual void copy_from_peer(DeviceBuffer dst, std::size_t dst_offset, Device& src_device, DeviceBuffer src,
                              std::size_t src_offset, std::size_t bytes) = 0;
  virtual void fill(DeviceBuffer dst, std::size_t offset, std::size_t bytes, std::uint8_t value) = 0;
  virtual void launch(const Kernel& kernel, const Launch& launch, std::span<const KernelArg> args) = 0;

  /// An event that completes when everything enqueued so far has completed.
  virtual Event record() = 0;
  /// Later work of this queue waits for `event` (which may come from any queue of any device).
  virtual void wait(const Event& event) = 0;
  /// Block the host until everything enqueued so far has completed; rethrows the first error.
  virtual void synchronize() = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceProperties& properties() const = 0;
  const std::string& name() const { return properties().name; }

  /// Allocate device memory; throws InvalidArgument for 0 bytes and OutOfDeviceMemory above the
  /// free capacity.
  virtual DeviceBuffer alloc(std::size_t bytes) = 0;
  /// Free an allocation of this device; throws InvalidPointer for a foreign or freed buffer.
  virtual void free(DeviceBuffer buffer) = 0;
  virtual std::size_t memory_used() const = 0;
  /// Declare a range's contents invalid (with poisoning on, it is overwritten with a pattern, at once
  /// and unordered with the queues: the caller has waited for the work that uses the range).
  virtual void discard(DeviceBuffer buffer, std::size_t offset, std::size_t bytes) = 0;
  /// The address a kernel of this device sees for byte `offset` of `buffer` (offset == bytes: one
  /// past the end), for storing device pointers inside device data that kernels follow (sim: the
  /// pointer kernel bodies receive; cuda: the CUdeviceptr). Throws InvalidPointer for a foreign or
  /// freed buffer, InvalidArgument for an offset past the end, and Unsupported on a backend whose
  /// buffers have no stable addresses.
  virtual std::uint64_t address(DeviceBuffer buffer, std::size_t offset) const = 0;

  /// Page-locked host memory that copies can use directly (no bounce buffer).
  virtual void* alloc_pinned(std::size_t bytes) = 0;
  virtual void free_pinned(void* pointer) = 0;
  virtual bool is_pinned(const void* pointer, std::size_t bytes) const = 0;

  virtual bool can_access_peer(const Device& other) const = 0;
  /// Remote access: the kernel argument by which kernels of this device reach byte
  /// `offset` of `buffer`, a buffer of the device `home`, when they can (sim: peers of one host;
  /// cuda: peer access, enabled here on first use); nullopt when they cannot (no peer access, or
  /// OpenCL, whose buffers name one device's allocation). Throws as address() for a bad buffer.
  virtual std::optional<KernelArg> peer_argument(const Device& home, DeviceBuffer buffer,
                                                 std::size_t offset) = 0;
  virtual std::unique_ptr<Queue> create_queue() = 0;
};

}  // namespace hdsm

HDSM_VISIBLE_END
