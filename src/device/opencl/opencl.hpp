// The OpenCL backend: one context per platform holding all its devices (so buffers of one platform
// can be copied between its devices directly), in-order command queues, cl_mem buffers addressed
// by an id, pinned host memory from CL_MEM_ALLOC_HOST_PTR buffers kept mapped, and kernels compiled
// at run time from a Kernel's OpenCL C source. A pointer argument is the buffer itself or, for an
// offset inside it, a sub-buffer; OpenCL requires its origin to be a multiple of the device's
// CL_DEVICE_MEM_BASE_ADDR_ALIGN.
#pragma once

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include "device/backends.hpp"
#include "device/buffer_table.hpp"
#include "device/host_mapping.hpp"
#include "device/program_cache.hpp"
#include "device/range_table.hpp"
#include "obs/counters.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hdsm::opencl {

struct OpenclOptions {
  unsigned first_index = 0;      // DeviceProperties::index of the first device
  bool poison = false;           // discarded and new buffers are filled with DE AD BE EF
  std::size_t memory_bytes = 0;  // capacity offered per device; 0: the device's global memory
  std::string cache_dir;  // compiled programs (HDSM_CACHE_DIR): "off", empty for the default, or a path
};

/// Throws hdsm::Error (system; OutOfDeviceMemory for allocation failures) naming the call, what
/// it was applied to and the OpenCL error, unless code is CL_SUCCESS.
void check(cl_int code, const char* call, const std::string& object);
const char* error_name(cl_int code);

/// A retained OpenCL object released on destruction.
template <class T, cl_int (*Release)(T)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(T h) : h_(h) {}
  ~Handle() {
    if (h_ != nullptr) Release(h_);
  }
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Handle& operator=(Handle&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  T get() const { return h_; }

 private:
  T h_ = nullptr;
};
using Context = Handle<cl_context, clReleaseContext>;
using CommandQueue = Handle<cl_command_queue, clReleaseCommandQueue>;
using Mem = Handle<cl_mem, clReleaseMemObject>;
using Program = Handle<cl_program, clReleaseProgram>;
using ClKernel = Handle<cl_kernel, clReleaseKernel>;

class OpenclQueue;

class OpenclDevice final : public Device, public HostMapping {
 public:
  OpenclDevice(unsigned index, unsigned ordinal, cl_device_id id, std::shared_ptr<Context> context,
               std::shared_ptr<const ProgramCache> cache, DeviceServices services,
               const OpenclOptions& options);
  ~OpenclDevice() override;

  const DeviceProperties& properties() const override { return props_; }
  DeviceBuffer alloc(std::size_t bytes) override;
  void free(DeviceBuffer buffer) override;
  std::size_t memory_used() const override;
  void discard(DeviceBuffer buffer, std::size_t offset, std::size_t bytes) override;
  std::uint64_t address(DeviceBuffer buffer, std::size_t offset) const override;
  void* alloc_pinned(std::size_t bytes) override;
  void free_pinned(void* pointer) override;
  bool is_pinned(const void* pointer, std::size_t bytes) const override;
  bool can_access_peer(const Device& other) const override;
  std::optional<KernelArg> peer_argument(const Device& home, DeviceBuffer buffer,
                                         std::size_t offset) override;
  std::unique_ptr<Queue> create_queue() override;

  // Host mapping: a CL_MEM_USE_HOST_PTR buffer over the host memory, kept mapped while the host owns
  // it; its handles have kHostMapped set, so resolve() and kernel arguments take them as buffers.
  std::uint64_t map_host(void* pointer, std::size_t bytes) override;
  void unmap_host(std::uint64_t mapping) override;
  KernelArg host_argument(std::uint64_t mapping, std::size_t offset) override;
  void hand_over(std::uint64_t mapping, bool to_device, Queue& queue) override;
  static constexpr std::uint64_t kHostMapped = std::uint64_t{1} << 63;
  /// Whether this device's CL_MEM_USE_HOST_PTR buffers are the host memory itself, seen by kernels
  /// and host alike without map and unmap: a CPU device (one cache-coherent memory) on which a fill
  /// without a map shows on the host and a host write without an unmap shows in a read (PoCL). Such
  /// mappings are never mapped, and their hand-overs do nothing: the sync's wait for the kernels
  /// orders their writes before the host's reads. Probed once.
  bool host_memory_in_place();

  // Used by OpenclQueue.
  cl_device_id id() const { return id_; }
  cl_context context() const { return context_->get(); }
  /// The cl_mem of [offset, offset + bytes) of a live buffer; InvalidPointer for a foreign or freed
  /// buffer, InvalidArgument for a range past its end.
  cl_mem resolve(DeviceBuffer buffer, std::size_t offset, std::size_t bytes, const std::string& what) const;
  /// The program built from `source` for this device: built once per device, and its binary kept in
  /// the program cache so later processes load it instead (the compiler log is in the error).
  cl_program program(const std::string& kernel, const std::string& source);
  std::size_t base_align() const { return base_align_; }
  obs::DeviceCounters& counters() { return counters_; }

 private:
  DeviceProperties props_;
  cl_device_id id_;
  std::shared_ptr<Context> context_;
  obs::DeviceCounters& counters_;
  bool poison_;
  std::size_t max_alloc_;
  std::size_t base_align_;  // bytes

  std::optional<BufferTable<Mem>> buffers_;  // made once the capacity is known
  std::atomic<std::uint64_t> next_id_{1};    // buffer handles
  mutable std::mutex mutex_;                 // the table below
  RangeTable<Mem> pinned_;                   // mapped CL_MEM_ALLOC_HOST_PTR buffers by host address
  struct HostMapped {
    Mem mem;  // CL_MEM_USE_HOST_PTR over [host, host + bytes)
    void* host;
    std::size_t bytes;
    bool on_device;  // unmapped: kernels own it
  };
  std::unordered_map<std::uint64_t, HostMapped> host_mapped_;  // by handle
  std::once_flag in_place_once_;
  std::atomic<bool> in_place_{false};
  std::uint64_t next_host_mapping_ = kHostMapped | 1;
  std::unique_ptr<OpenclQueue> internal_;  // discard fills and pinned maps

  // Builds take seconds, so they hold their own lock rather than mutex_.
  std::mutex programs_mutex_;
  std::unordered_map<std::string, Program> programs_;  // by source
  std::shared_ptr<const ProgramCache> cache_;
  std::string cache_identity_;  // platform, device and driver: what a binary is valid for

  /// The program from the cache entry for `key`, or an empty Program when there is none or the
  /// binary no longer builds.
  Program load_cached(const std::string& key);
};

class OpenclQueue final : public Queue {
 public:
  explicit OpenclQueue(OpenclDevice& device);
  ~OpenclQueue() override;

  Device& device() override { return device_; }
  void copy_to_device(DeviceBuffer dst, std::size_t dst_offset, const void* src, std::size_t bytes) override;
  void copy_to_host(void* dst, DeviceBuffer src, std::size_t src_offset, std::size_t bytes) override;
  void copy_on_device(DeviceBuffer dst, std::size_t dst_offset, DeviceBuffer src, std::size_t src_offset,
                      std::size_t bytes) override;
  void copy_from_peer(DeviceBuffer dst, std::size_t dst_offset, Device& src_device, DeviceBuffer src,
                      std::size_t src_offset, std::size_t bytes) override;
  void fill(DeviceBuffer dst, std::size_t offset, std::size_t bytes, std::uint8_t value) override;
  void launch(const Kernel& kernel, const Launch& launch, std::span<const KernelArg> args) override;
  Event record() override;
  void wait(const Event& event) override;
  void synchronize() override;

  cl_command_queue get() const { return queue_.get(); }

 private:
  OpenclDevice& device_;
  CommandQueue queue_;
};

}  // namespace hdsm::opencl
