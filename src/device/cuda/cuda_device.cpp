// CUDA discovery and devices: buffers, pinned memory, peer access, kernel parameter layouts.
#include "device/cuda/cuda.hpp"

#include "device/checks.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>

namespace hdsm {
namespace cuda {

const char* kernel_fault_name(cudaError_t code) {
  switch (code) {
#define HDSM_CUDA_FAULT(name) \
  case name:                  \
    return #name;
    HDSM_CUDA_FAULT(cudaErrorIllegalAddress)
    HDSM_CUDA_FAULT(cudaErrorLaunchFailure)
    HDSM_CUDA_FAULT(cudaErrorAssert)
    HDSM_CUDA_FAULT(cudaErrorIllegalInstruction)
    HDSM_CUDA_FAULT(cudaErrorMisalignedAddress)
    HDSM_CUDA_FAULT(cudaErrorInvalidAddressSpace)
    HDSM_CUDA_FAULT(cudaErrorInvalidPc)
    HDSM_CUDA_FAULT(cudaErrorHardwareStackError)
    HDSM_CUDA_FAULT(cudaErrorLaunchTimeout)
    HDSM_CUDA_FAULT(cudaErrorLaunchOutOfResources)
#undef HDSM_CUDA_FAULT
    default:
      return nullptr;
  }
}

void check(cudaError_t code, const char* call, const std::string& object) {
  if (code == cudaSuccess) return;
  (void)cudart().cudaGetLastError();  // a non-sticky error must not show up again at the next launch
  const std::string message = fmt::format("{} failed on {}: {} ({})", call, object,
                                          cudart().cudaGetErrorString(code), cudart().cudaGetErrorName(code));
  if (kernel_fault_name(code) != nullptr) throw KernelFailure(message);
  if (code == cudaErrorMemoryAllocation) throw Error(Errc::out_of_device_memory, message);
  throw Error(Errc::system, message);
}

EventPool::~EventPool() {
  for (cudaEvent_t e : free_)
    cudart().cudaEventDestroy(e);  // errors ignored: the runtime may be shutting down
}

cudaEvent_t EventPool::take() {
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  // Blocking sync: EventWatcher sleeps in cudaEventSynchronize once it has spun for a while.
  check(cudart().cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync),
        "cudaEventCreateWithFlags", device_);
  return e;
}

void EventPool::give(cudaEvent_t event) noexcept {
  std::lock_guard lock(mutex_);
  free_.push_back(event);
}

namespace {

class CudaBackend final : public BackendOf<CudaDevice> {
 public:
  CudaBackend(DeviceServices services, const CudaOptions& options) {
    load_cudart();  // NoDevice where there is no CUDA runtime to load
    int count = 0;
    const cudaError_t found = cudart().cudaGetDeviceCount(&count);
    if (found != cudaSuccess) {
      (void)cudart().cudaGetLastError();
      throw NoDevice(
          fmt::format("no CUDA device: cudaGetDeviceCount failed: {} ({}){}",
                      cudart().cudaGetErrorString(found), cudart().cudaGetErrorName(found),
                      found == cudaErrorInsufficientDriver
                          ? "; no NVIDIA driver is loaded, or it is older than the CUDA runtime libhdsm "
                            "was built with"
                          : ""));
    }
    if (count == 0) throw NoDevice("no CUDA device: cudaGetDeviceCount reports none");

    // Peer access both ways; peer groups are the connected sets of such pairs.
    const auto n = static_cast<std::size_t>(count);
    std::vector<std::vector<bool>> peers(n, std::vector<bool>(n, false));
    for (int i = 0; i < count; ++i)
      for (int j = 0; j < count; ++j) {
        if (i == j) continue;
        int can = 0;
        check(cudart().cudaDeviceCanAccessPeer(&can, i, j), "cudaDeviceCanAccessPeer",
              fmt::format("cuda{} and cuda{}", i, j));
        peers[i][j] = can != 0;
      }
    std::vector<std::size_t> root(n);
    std::iota(root.begin(), root.end(), std::size_t{0});
    auto find = [&](std::size_t i) {
      while (root[i] != i) i = root[i] = root[root[i]];
      return i;
    };
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = i + 1; j < n; ++j) {
        peers[i][j] = peers[j][i] = peers[i][j] && peers[j][i];
        if (peers[i][j]) {
          const std::size_t a = find(i), b = find(j);
          root[std::max(a, b)] = std::min(a, b);
        }
      }
    for (std::size_t i = 0; i < n; ++i) {
      const bool alone = std::none_of(peers[i].begin(), peers[i].end(), [](bool b) { return b; });
      devices_.push_back(
          std::make_unique<CudaDevice>(options.first_index + static_cast<unsigned>(i), static_cast<int>(i),
                                       alone ? -1 : static_cast<int>(find(i)), peers[i], services, options));
    }
  }
};

}  // namespace

CudaDevice::CudaDevice(unsigned index, int ordinal, int peer_group, std::vector<bool> peers,
                       DeviceServices services, const CudaOptions& options)
    : ordinal_(ordinal),
      peers_(std::move(peers)),
      counters_(services.counters.add_device(fmt::format("cuda{}", ordinal))),
      poison_(options.poison),
      events_(std::make_shared<EventPool>(fmt::format("cuda{}", ordinal))),
      peer_enabled_(peers_.size(), false) {
  props_.name = fmt::format("cuda{}", ordinal);
  cudaDeviceProp prop{};
  check(cudart().cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties", props_.name);
  props_.description = fmt::format("{} (compute capability {}.{})", prop.name, prop.major, prop.minor);
  props_.backend = Backend::cuda;
  props_.index = index;
  props_.memory_bytes = prop.totalGlobalMem;
  if (options.memory_bytes != 0)
    props_.memory_bytes = std::min<std::size_t>(props_.memory_bytes, options.memory_bytes);
  props_.copy_engines = static_cast<unsigned>(std::max(1, prop.asyncEngineCount));
  buffers_.emplace(props_.name, props_.memory_bytes, std::numeric_limits<std::size_t>::max(),
                   /*hex_handles=*/true);
  shared_per_block_ = prop.sharedMemPerBlock;
  shared_per_block_optin_ = std::max(prop.sharedMemPerBlockOptin, prop.sharedMemPerBlock);
  props_.peer_group = peer_group;
  props_.link_gbps = 0;  // nominal: CUDA does not report the link's rate
  props_.zeroed_alloc = !poison_;
  int host_tables = 0;
  check(cudart().cudaDeviceGetAttribute(&host_tables, cudaDevAttrPageableMemoryAccessUsesHostPageTables,
                                        ordinal),
        "cudart().cudaDeviceGetAttribute(cudaDevAttrPageableMemoryAccessUsesHostPageTables)", props_.name);
  pageable_access_ = host_tables != 0;
  if (pageable_access_) {
    props_.shares_host_memory = true;
    props_.host_memory_source = "cudaDevAttrPageableMemoryAccessUsesHostPageTables";
  } else if (prop.integrated != 0) {
    props_.shares_host_memory = true;
    props_.host_memory_source = "cudaDeviceProp::integrated";
  }
  activate();
  check(cudart().cudaStreamCreateWithFlags(&internal_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags",
        props_.name);
}

CudaDevice::~CudaDevice() {
  // Errors are ignored: at exit the CUDA runtime may already have shut down.
  if (cudart().cudaSetDevice(ordinal_) != cudaSuccess) return;
  cudart().cudaStreamSynchronize(internal_);
  cudart().cudaStreamDestroy(internal_);
  std::lock_guard lock(mutex_);
  buffers_->for_each([](std::uint64_t address, std::size_t, std::monostate) {
    cudart().cudaFree(reinterpret_cast<void*>(address));
  });
  pinned_.for_each([](void* p, const auto&) { cudart().cudaFreeHost(p); });
  for (const auto& [handle, m] : host_mapped_)
    if (m.registered) cudart().cudaHostUnregister(m.host);
  (void)cudart().cudaGetLastError();
}

void CudaDevice::activate() const { check(cudart().cudaSetDevice(ordinal_), "cudaSetDevice", props_.name); }

cudaError_t CudaDevice::fill_now(void* p, std::size_t bytes, unsigned char value) {
  cudaError_t e = cudart().cudaMemsetAsync(p, value, bytes, internal_);
  if (e == cudaSuccess) e = cudart().cudaStreamSynchronize(internal_);
  return e;
}

DeviceBuffer CudaDevice::alloc(std::size_t bytes) {
  if (bytes == 0)
    throw InvalidArgument(fmt::format("alloc(0) on {}: a buffer needs at least one byte", name()));
  buffers_->reserve(bytes);  // while cudaMalloc runs
  activate();
  void* p = nullptr;
  const cudaError_t allocated = cudart().cudaMalloc(&p, bytes);
  if (allocated != cudaSuccess) {
    buffers_->unreserve(bytes);
    if (allocated == cudaErrorMemoryAllocation) {
      (void)cudart().cudaGetLastError();
      throw OutOfDeviceMemory(name(), bytes, memory_used(), props_.memory_bytes);
    }
    check(allocated, "cudaMalloc", fmt::format("{} bytes on {}", bytes, name()));
  }
  // New buffers hold zeros (or the poison byte), as on the other backends.
  const cudaError_t filled = fill_now(p, bytes, poison_ ? 0xDE : 0);
  if (filled != cudaSuccess) {
    cudart().cudaFree(p);
    buffers_->unreserve(bytes);
    check(filled, "cudaMemsetAsync", fmt::format("a new buffer of {} bytes on {}", bytes, name()));
  }
  const auto handle = reinterpret_cast<std::uint64_t>(p);
  buffers_->insert(handle, bytes, std::monostate{});
  return {handle, bytes};
}

void CudaDevice::free(DeviceBuffer buffer) {
  buffers_->take(buffer);
  activate();
  check(cudart().cudaFree(reinterpret_cast<void*>(buffer.handle)), "cudaFree",
        fmt::format("a buffer of {}", name()));
}

std::size_t CudaDevice::memory_used() const { return buffers_->used(); }

std::byte* CudaDevice::resolve(DeviceBuffer buffer, std::size_t offset, std::size_t bytes,
                               const std::string& what) const {
  return buffers_->with(buffer, offset, bytes, what,
                        [&](std::monostate) { return reinterpret_cast<std::byte*>(buffer.handle) + offset; });
}

void CudaDevice::discard(DeviceBuffer buffer, std::size_t offset, std::size_t bytes) {
  std::byte* p = resolve(buffer, offset, bytes, "discard");
  if (!poison_ || bytes == 0) return;
  activate();
  check(fill_now(p, bytes, 0xDE), "cudaMemsetAsync", fmt::format("a discarded range on {}", name()));
}

std::uint64_t CudaDevice::address(DeviceBuffer buffer, std::size_t offset) const {
  return reinterpret_cast<std::uint64_t>(resolve(buffer, offset, 0, "address"));
}

void* CudaDevice::alloc_pinned(std::size_t bytes) {
  if (bytes == 0) throw InvalidArgument(fmt::format("alloc_pinned(0) on {}", name()));
  activate();
  void* p = nullptr;
  // Portable: pinned for every device's copies, as the memory of the other backends is.
  check(cudart().cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc",
        fmt::format("{} pinned bytes for {}", bytes, name()));
  std::lock_guard lock(mutex_);
  pinned_.insert(p, bytes);
  return p;
}

void CudaDevice::free_pinned(void* pointer) {
  if (pointer == nullptr) return;
  std::unique_lock lock(mutex_);
  if (!pinned_.take(pointer))
    throw InvalidPointer(
        fmt::format("free_pinned({}) on {}: not pinned memory of this device", pointer, name()));
  lock.unlock();
  activate();
  check(cudart().cudaFreeHost(pointer), "cudaFreeHost", fmt::format("pinned memory of {}", name()));
}

bool CudaDevice::is_pinned(const void* pointer, std::size_t bytes) const {
  std::lock_guard lock(mutex_);
  return pinned_.contains(pointer, bytes);
}

void* CudaDevice::alloc_managed(std::size_t bytes) {
  if (bytes == 0) throw InvalidArgument(fmt::format("alloc_managed(0) on {}", name()));
  activate();
  void* p = nullptr;
  const cudaError_t e = cudart().cudaMallocManaged(&p, bytes, cudaMemAttachGlobal);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudart().cudaGetLastError();
    throw OutOfDeviceMemory(name(), bytes, memory_used(), props_.memory_bytes);
  }
  check(e, "cudaMallocManaged", fmt::format("{} managed bytes for {}", bytes, name()));
  // Managed memory starts undefined; shared objects start zero-filled on every protocol.
  const cudaError_t filled = fill_now(p, bytes, 0);
  if (filled != cudaSuccess) {
    cudart().cudaFree(p);
    check(filled, "cudaMemsetAsync", fmt::format("{} new managed bytes on {}", bytes, name()));
  }
  std::lock_guard lock(mutex_);
  managed_.insert(p, bytes);
  return p;
}

void CudaDevice::free_managed(void* pointer) {
  std::unique_lock lock(mutex_);
  if (!managed_.take(pointer))
    throw InvalidPointer(
        fmt::format("free_managed({}) on {}: not managed memory of this device", pointer, name()));
  lock.unlock();
  activate();
  check(cudart().cudaFree(pointer), "cudaFree", fmt::format("managed memory of {}", name()));
}

void CudaDevice::prefetch(const void* pointer, std::size_t bytes, bool to_device, Queue& queue) {
  auto* q = dynamic_cast<CudaQueue*>(&queue);
  if (q == nullptr || &q->device() != this)
    throw InvalidArgument(fmt::format("prefetch on {}: the queue is not one of this device", name()));
  cudaMemLocation where{};
  where.type = to_device ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
  where.id = to_device ? ordinal_ : 0;
  activate();
  check(cudart().cudaMemPrefetchAsync(pointer, bytes, where, 0, q->stream()), "cudaMemPrefetchAsync",
        fmt::format("{} managed bytes at {} {} {}", bytes, pointer, to_device ? "to" : "from", name()));
}

void CudaDevice::advise(const void* pointer, std::size_t bytes, UmAdvice advice) {
  if (advice == UmAdvice::none) return;
  cudaMemLocation where{};
  where.type = advice == UmAdvice::device ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
  where.id = advice == UmAdvice::device ? ordinal_ : 0;
  activate();
  check(cudart().cudaMemAdvise(pointer, bytes, cudaMemAdviseSetPreferredLocation, where), "cudaMemAdvise",
        fmt::format("{} managed bytes at {} on {}", bytes, pointer, name()));
  // The device maps the pages wherever they live, so its first touch does not fault.
  where.type = cudaMemLocationTypeDevice;
  where.id = ordinal_;
  check(cudart().cudaMemAdvise(pointer, bytes, cudaMemAdviseSetAccessedBy, where), "cudaMemAdvise",
        fmt::format("{} managed bytes at {} on {}", bytes, pointer, name()));
}

bool CudaDevice::can_access_peer(const Device& other) const {
  const auto* o = dynamic_cast<const CudaDevice*>(&other);
  return o != nullptr && o != this && static_cast<std::size_t>(o->ordinal_) < peers_.size() &&
         peers_[o->ordinal_];
}

std::optional<KernelArg> CudaDevice::peer_argument(const Device& home, DeviceBuffer buffer,
                                                   std::size_t offset) {
  if (!can_access_peer(home)) return std::nullopt;
  const std::uint64_t address = home.address(buffer, offset);
  // Kernels of this device dereference home's device pointer over peer access (unified addressing).
  enable_peer_access(static_cast<const CudaDevice&>(home));
  return KernelArg::value(address);
}

void CudaDevice::enable_peer_access(const CudaDevice& peer) {
  std::lock_guard lock(mutex_);
  if (peer_enabled_[peer.ordinal_]) return;
  activate();
  const cudaError_t e = cudart().cudaDeviceEnablePeerAccess(peer.ordinal_, 0);
  // Another runtime of this process may have enabled it in the (shared) primary context already.
  if (e == cudaErrorPeerAccessAlreadyEnabled)
    (void)cudart().cudaGetLastError();
  else
    check(e, "cudaDeviceEnablePeerAccess", fmt::format("{} to {}", name(), peer.name()));
  peer_enabled_[peer.ordinal_] = true;
}

std::optional<std::vector<std::size_t>> CudaDevice::parameters(const Kernel& kernel, const void* function) {
  std::lock_guard lock(mutex_);
  if (const auto it = parameters_.find(function); it != parameters_.end()) return it->second;
  std::optional<std::vector<std::size_t>> sizes(std::in_place);
  for (std::size_t i = 0;; ++i) {
    std::size_t offset = 0, size = 0;
    const cudaError_t e = cudart().cudaFuncGetParamInfo(function, i, &offset, &size);
    if (e == cudaSuccess) {
      sizes->push_back(size);
      continue;
    }
    (void)cudart().cudaGetLastError();
    if (e == cudaErrorInvalidValue) break;  // past the last parameter
    if (e == cudaErrorNotSupported || e == cudaErrorCallRequiresNewerDriver) {
      sizes.reset();  // the driver cannot say; the launch goes ahead unchecked
      break;
    }
    throw KernelFailure(
        fmt::format("kernel '{}' on {}: cudaFuncGetParamInfo failed: {} ({}); its CUDA body must be "
                    "the kernel's cudaKernel_t (hdsm::cuda_kernel in <hdsm/cuda.hpp>)",
                    kernel.name, name(), cudart().cudaGetErrorString(e), cudart().cudaGetErrorName(e)));
  }
  return parameters_.emplace(function, sizes).first->second;
}

void CudaDevice::allow_dynamic_shared(const Kernel& kernel, const void* function, std::size_t bytes) {
  if (bytes <= shared_per_block_) return;
  std::lock_guard lock(mutex_);
  std::size_t& allowed = dynamic_shared_[function];
  if (bytes <= allowed) return;
  if (bytes > shared_per_block_optin_)
    throw InvalidArgument(
        fmt::format("kernel '{}' asks for {} of dynamic shared memory a block; {} allows {} by "
                    "default and at most {} to a kernel that opts in (sharedMemPerBlockOptin, "
                    "less the kernel's static __shared__ memory)",
                    kernel.name, format_bytes(bytes), name(), format_bytes(shared_per_block_),
                    format_bytes(shared_per_block_optin_)));
  // The attribute belongs to the kernel on this device, so other devices' launches keep their own.
  const cudaError_t e = cudart().cudaKernelSetAttributeForDevice(
      static_cast<cudaKernel_t>(const_cast<void*>(function)), cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(bytes), ordinal_);
  if (e != cudaSuccess) {
    (void)cudart().cudaGetLastError();
    throw KernelFailure(fmt::format(
        "kernel '{}' on {}: cudart().cudaKernelSetAttributeForDevice(MaxDynamicSharedMemorySize, "
        "{}) failed: {} ({})",
        kernel.name, name(), bytes, cudart().cudaGetErrorString(e), cudart().cudaGetErrorName(e)));
  }
  allowed = bytes;
}

std::unique_ptr<Queue> CudaDevice::create_queue() { return std::make_unique<CudaQueue>(*this); }

}  // namespace cuda

namespace {

// Every device the CUDA runtime reports. No driver, or no device, is NoDevice saying "no CUDA
// device" with cudaGetDeviceCount's error.
std::unique_ptr<DeviceBackend> open_cuda(DeviceServices services, const Config& config,
                                         unsigned first_index) {
  return std::make_unique<cuda::CudaBackend>(
      services,
      cuda::CudaOptions{first_index, config.boolean("HDSM_CUDA_POISON"), config.size("HDSM_CUDA_MEMORY")});
}

const bool registered = register_backend(
    {"cuda", 2, [](const Config& c) { return switched_on(c, "HDSM_CUDA", "cuda"); }, open_cuda});

}  // namespace

}  // namespace hdsm

namespace hdsm::cuda {

std::uint64_t CudaDevice::map_host(void* pointer, std::size_t bytes) {
  if (bytes == 0)
    throw InvalidArgument(fmt::format("map_host({}, 0) on {}: nothing to map", pointer, name()));
  HostMapped m{static_cast<std::byte*>(pointer), static_cast<std::byte*>(pointer), bytes, false};
  if (!pageable_access_) {
    const std::string what = fmt::format("{} bytes of host memory at {} for {}", bytes, pointer, name());
    activate();
    check(cudart().cudaHostRegister(pointer, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable),
          "cudaHostRegister", what);
    void* device = nullptr;
    const cudaError_t e = cudart().cudaHostGetDevicePointer(&device, pointer, 0);
    if (e != cudaSuccess) cudart().cudaHostUnregister(pointer);
    check(e, "cudaHostGetDevicePointer", what);
    m.device = static_cast<std::byte*>(device);
    m.registered = true;
  }
  std::lock_guard lock(mutex_);
  const std::uint64_t handle = next_host_mapping_++;
  host_mapped_.emplace(handle, m);
  return handle;
}

void CudaDevice::unmap_host(std::uint64_t mapping) {
  std::unique_lock lock(mutex_);
  const auto it = host_mapped_.find(mapping);
  if (it == host_mapped_.end())
    throw InvalidPointer(fmt::format("unmap_host({}) on {}: no such host mapping", mapping, name()));
  const HostMapped m = it->second;
  host_mapped_.erase(it);
  lock.unlock();
  if (m.registered)
    check(cudart().cudaHostUnregister(m.host), "cudaHostUnregister",
          fmt::format("host memory at {} on {}", static_cast<void*>(m.host), name()));
}

KernelArg CudaDevice::host_argument(std::uint64_t mapping, std::size_t offset) {
  std::lock_guard lock(mutex_);
  const auto& m = host_mapping_at(host_mapped_, mapping, offset, name());
  return KernelArg::value(static_cast<void*>(m.device + offset));
}

void CudaDevice::hand_over(std::uint64_t, bool, Queue& queue) {
  if (&queue.device() != this)
    throw InvalidArgument(fmt::format("hand_over on {}: the queue is not one of this device", name()));
}

}  // namespace hdsm::cuda
