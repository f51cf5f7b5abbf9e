// OpenCL discovery and devices: buffers, pinned memory, program builds.
#include "device/opencl/opencl.hpp"
#include "os/mapping.hpp"

#include "device/checks.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>

namespace hdsm {
namespace opencl {

const char* error_name(cl_int code) {
  switch (code) {
#define HDSM_CL_ERROR(name) \
  case name:                \
    return #name;
    HDSM_CL_ERROR(CL_DEVICE_NOT_FOUND)
    HDSM_CL_ERROR(CL_DEVICE_NOT_AVAILABLE)
    HDSM_CL_ERROR(CL_COMPILER_NOT_AVAILABLE)
    HDSM_CL_ERROR(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    HDSM_CL_ERROR(CL_OUT_OF_RESOURCES)
    HDSM_CL_ERROR(CL_OUT_OF_HOST_MEMORY)
    HDSM_CL_ERROR(CL_MEM_COPY_OVERLAP)
    HDSM_CL_ERROR(CL_BUILD_PROGRAM_FAILURE)
    HDSM_CL_ERROR(CL_MAP_FAILURE)
    HDSM_CL_ERROR(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    HDSM_CL_ERROR(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    HDSM_CL_ERROR(CL_INVALID_VALUE)
    HDSM_CL_ERROR(CL_INVALID_DEVICE)
    HDSM_CL_ERROR(CL_INVALID_CONTEXT)
    HDSM_CL_ERROR(CL_INVALID_COMMAND_QUEUE)
    HDSM_CL_ERROR(CL_INVALID_MEM_OBJECT)
    HDSM_CL_ERROR(CL_INVALID_BUFFER_SIZE)
    HDSM_CL_ERROR(CL_INVALID_PROGRAM)
    HDSM_CL_ERROR(CL_INVALID_PROGRAM_EXECUTABLE)
    HDSM_CL_ERROR(CL_INVALID_KERNEL_NAME)
    HDSM_CL_ERROR(CL_INVALID_KERNEL)
    HDSM_CL_ERROR(CL_INVALID_ARG_INDEX)
    HDSM_CL_ERROR(CL_INVALID_ARG_VALUE)
    HDSM_CL_ERROR(CL_INVALID_ARG_SIZE)
    HDSM_CL_ERROR(CL_INVALID_KERNEL_ARGS)
    HDSM_CL_ERROR(CL_INVALID_WORK_DIMENSION)
    HDSM_CL_ERROR(CL_INVALID_WORK_GROUP_SIZE)
    HDSM_CL_ERROR(CL_INVALID_WORK_ITEM_SIZE)
    HDSM_CL_ERROR(CL_INVALID_GLOBAL_OFFSET)
    HDSM_CL_ERROR(CL_INVALID_EVENT_WAIT_LIST)
    HDSM_CL_ERROR(CL_INVALID_EVENT)
    HDSM_CL_ERROR(CL_INVALID_OPERATION)
    HDSM_CL_ERROR(CL_INVALID_BUILD_OPTIONS)
    HDSM_CL_ERROR(CL_INVALID_GLOBAL_WORK_SIZE)
    HDSM_CL_ERROR(CL_INVALID_PLATFORM)
#undef HDSM_CL_ERROR
    case -1001:
      return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
      break;
  }
  return "unknown OpenCL error";
}

void check(cl_int code, const char* call, const std::string& object) {
  if (code == CL_SUCCESS) return;
  const std::string message = fmt::format("{} failed on {}: {} ({})", call, object, error_name(code), code);
  if (code == CL_MEM_OBJECT_ALLOCATION_FAILURE || code == CL_OUT_OF_RESOURCES)
    throw Error(Errc::out_of_device_memory, message);
  // The program's own mistakes (a __kernel name or an argument that does not match the source), not
  // a failed call of the platform's.
  if (code == CL_INVALID_KERNEL_NAME || code == CL_INVALID_ARG_SIZE || code == CL_INVALID_ARG_VALUE ||
      code == CL_INVALID_ARG_INDEX || code == CL_INVALID_KERNEL_ARGS)
    throw InvalidArgument(message);
  throw Error(Errc::system, message);
}

namespace {

template <class T>
T device_info(cl_device_id id, cl_device_info what, const char* name) {
  T value{};
  // NOLINTNEXTLINE(bugprone-sizeof-expression): T may be a handle (a pointer)
  check(clGetDeviceInfo(id, what, sizeof value, &value, nullptr), "clGetDeviceInfo", name);
  return value;
}

/// A string property through clGet*Info (size query, then the text without its terminator).
template <class Id, class Info>
std::string info_string(cl_int (*get)(Id, Info, std::size_t, void*, std::size_t*), Id id, Info what,
                        const char* call, const char* object) {
  std::size_t n = 0;
  check(get(id, what, 0, nullptr, &n), call, object);
  std::string s(n, '\0');
  check(get(id, what, n, s.data(), nullptr), call, object);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}
std::string device_string(cl_device_id id, cl_device_info what) {
  return info_string(clGetDeviceInfo, id, what, "clGetDeviceInfo", "an OpenCL device");
}
std::string platform_string(cl_platform_id id, cl_platform_info what) {
  return info_string(clGetPlatformInfo, id, what, "clGetPlatformInfo", "an OpenCL platform");
}

class OpenclBackend final : public BackendOf<OpenclDevice> {
 public:
  OpenclBackend(DeviceServices services, const OpenclOptions& options) {
    cl_uint count = 0;
    const cl_int found = clGetPlatformIDs(0, nullptr, &count);
    if (found == -1001 /* CL_PLATFORM_NOT_FOUND_KHR: the ICD loader found no platform */ || count == 0)
      return;
    check(found, "clGetPlatformIDs", "the OpenCL ICD loader");
    const auto cache = std::make_shared<const ProgramCache>(options.cache_dir);
    std::vector<cl_platform_id> platforms(count);
    check(clGetPlatformIDs(count, platforms.data(), nullptr), "clGetPlatformIDs", "the OpenCL ICD loader");
    for (cl_platform_id platform : platforms) {
      cl_uint n = 0;
      const cl_int listed = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &n);
      if (listed == CL_DEVICE_NOT_FOUND || n == 0) continue;
      check(listed, "clGetDeviceIDs", "an OpenCL platform");
      std::vector<cl_device_id> ids(n);
      check(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, n, ids.data(), nullptr), "clGetDeviceIDs",
            "an OpenCL platform");
      cl_int err = CL_SUCCESS;
      const cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                             reinterpret_cast<cl_context_properties>(platform), 0};
      cl_context context = clCreateContext(props, n, ids.data(), nullptr, nullptr, &err);
      check(err, "clCreateContext", "an OpenCL platform");
      auto shared = std::make_shared<Context>(context);
      for (cl_device_id id : ids) {
        const auto ordinal = static_cast<unsigned>(devices_.size());
        devices_.push_back(std::make_unique<OpenclDevice>(options.first_index + ordinal, ordinal, id, shared,
                                                          cache, services, options));
      }
    }
  }
};

}  // namespace

OpenclDevice::OpenclDevice(unsigned index, unsigned ordinal, cl_device_id id,
                           std::shared_ptr<Context> context, std::shared_ptr<const ProgramCache> cache,
                           DeviceServices services, const OpenclOptions& options)
    : id_(id),
      context_(std::move(context)),
      counters_(services.counters.add_device(fmt::format("opencl{}", ordinal))),
      poison_(options.poison),
      cache_(std::move(cache)) {
  const auto platform = device_info<cl_platform_id>(id, CL_DEVICE_PLATFORM, "an OpenCL device");
  cache_identity_ =
      fmt::format("hdsm OpenCL program v1\nplatform: {} {}\ndevice: {} {}\ndriver: {}\n",
                  platform_string(platform, CL_PLATFORM_NAME), platform_string(platform, CL_PLATFORM_VERSION),
                  device_string(id, CL_DEVICE_NAME), device_string(id, CL_DEVICE_VERSION),
                  device_string(id, CL_DRIVER_VERSION));
  props_.name = fmt::format("opencl{}", ordinal);
  props_.description = device_string(id, CL_DEVICE_NAME) + " (" + device_string(id, CL_DEVICE_VERSION) + ")";
  props_.backend = Backend::opencl;
  props_.index = index;
  props_.memory_bytes = device_info<cl_ulong>(id, CL_DEVICE_GLOBAL_MEM_SIZE, props_.name.c_str());
  if (options.memory_bytes != 0)
    props_.memory_bytes = std::min<std::size_t>(props_.memory_bytes, options.memory_bytes);
  props_.copy_engines = 1;  // OpenCL does not say; one in-order queue per copy direction is what hdsm uses
  props_.zeroed_alloc = !poison_;
  if (device_info<cl_device_type>(id, CL_DEVICE_TYPE, props_.name.c_str()) & CL_DEVICE_TYPE_CPU) {
    props_.shares_host_memory = true;
    props_.host_memory_source = "CL_DEVICE_TYPE_CPU";
  } else if (device_info<cl_bool>(id, CL_DEVICE_HOST_UNIFIED_MEMORY, props_.name.c_str()) == CL_TRUE) {
    props_.shares_host_memory = true;
    props_.host_memory_source = "CL_DEVICE_HOST_UNIFIED_MEMORY";
  }
  max_alloc_ = device_info<cl_ulong>(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, props_.name.c_str());
  buffers_.emplace(props_.name, props_.memory_bytes, max_alloc_, false, "CL_DEVICE_MAX_MEM_ALLOC_SIZE");
  base_align_ = std::max<std::size_t>(
      1, device_info<cl_uint>(id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, props_.name.c_str()) / 8);
  internal_ = std::make_unique<OpenclQueue>(*this);
}

OpenclDevice::~OpenclDevice() {
  if (internal_) clFinish(internal_->get());
  std::lock_guard lock(mutex_);
  pinned_.for_each([&](void* address, const RangeTable<Mem>::Range& p) {
    clEnqueueUnmapMemObject(internal_->get(), p.value.get(), address, 0, nullptr, nullptr);
  });
  for (auto& [handle, m] : host_mapped_)
    if (!m.on_device) clEnqueueUnmapMemObject(internal_->get(), m.mem.get(), m.host, 0, nullptr, nullptr);
  if (internal_) clFinish(internal_->get());
}

DeviceBuffer OpenclDevice::alloc(std::size_t bytes) {
  if (bytes == 0)
    throw InvalidArgument(fmt::format("alloc(0) on {}: a buffer needs at least one byte", name()));
  buffers_->reserve(bytes);
  cl_int err = CL_SUCCESS;
  Mem mem(clCreateBuffer(context(), CL_MEM_READ_WRITE, bytes, nullptr, &err));
  if (err != CL_SUCCESS) {
    buffers_->unreserve(bytes);
    check(err, "clCreateBuffer", fmt::format("{} bytes on {}", bytes, name()));
  }
  const std::uint64_t handle = next_id_.fetch_add(1, std::memory_order_relaxed);
  const cl_mem m = mem.get();
  buffers_->insert(handle, bytes, std::move(mem));
  // Place the buffer on this device now (OpenCL allocates on first use), poisoned when asked.
  static constexpr unsigned char dead[4] = {0xDE, 0xAD, 0xBE, 0xEF};
  const unsigned char zero = 0;
  cl_int filled = poison_ && bytes % 4 == 0
                      ? clEnqueueFillBuffer(internal_->get(), m, dead, 4, 0, bytes, 0, nullptr, nullptr)
                      : clEnqueueFillBuffer(internal_->get(), m, poison_ ? dead : &zero, 1, 0, bytes, 0,
                                            nullptr, nullptr);
  if (filled == CL_SUCCESS) filled = clFinish(internal_->get());
  if (filled != CL_SUCCESS) {
    free({handle, bytes});
    if (filled == CL_MEM_OBJECT_ALLOCATION_FAILURE || filled == CL_OUT_OF_RESOURCES)
      throw OutOfDeviceMemory(name(), bytes, memory_used(), props_.memory_bytes);
    check(filled, "clEnqueueFillBuffer", fmt::format("a new buffer of {} bytes on {}", bytes, name()));
  }
  return {handle, bytes};
}

// Commands already enqueued keep their own reference to the cl_mem.
void OpenclDevice::free(DeviceBuffer buffer) { (void)buffers_->take(buffer); }

std::size_t OpenclDevice::memory_used() const { return buffers_->used(); }

cl_mem OpenclDevice::resolve(DeviceBuffer buffer, std::size_t offset, std::size_t bytes,
                             const std::string& what) const {
  if ((buffer.handle & kHostMapped) != 0) {
    std::lock_guard lock(mutex_);
    const auto it = host_mapped_.find(buffer.handle);
    if (it == host_mapped_.end())
      throw InvalidPointer(fmt::format("{} on {}: no such host mapping (unmapped already?)", what, name()));
    if (offset > it->second.bytes || bytes > it->second.bytes - offset)
      throw InvalidArgument(fmt::format("{} on {}: bytes [{}, {}) run past a host mapping of {} bytes", what,
                                        name(), offset, offset + bytes, it->second.bytes));
    return it->second.mem.get();
  }
  return buffers_->with(buffer, offset, bytes, what, [](const Mem& m) { return m.get(); });
}

void OpenclDevice::discard(DeviceBuffer buffer, std::size_t offset, std::size_t bytes) {
  const cl_mem m = resolve(buffer, offset, bytes, "discard");
  if (!poison_ || bytes == 0) return;
  static constexpr unsigned char dead = 0xDE;
  check(clEnqueueFillBuffer(internal_->get(), m, &dead, 1, offset, bytes, 0, nullptr, nullptr),
        "clEnqueueFillBuffer", fmt::format("a discarded range on {}", name()));
  check(clFinish(internal_->get()), "clFinish", name());
}

std::uint64_t OpenclDevice::address(DeviceBuffer buffer, std::size_t offset) const {
  resolve(buffer, offset, 0, "address");
  throw Unsupported(
      fmt::format("address on {}: OpenCL 1.2 buffers have no stable device addresses; pass "
                  "buffers as kernel arguments instead of storing pointers in device data",
                  name()));
}

void* OpenclDevice::alloc_pinned(std::size_t bytes) {
  if (bytes == 0) throw InvalidArgument(fmt::format("alloc_pinned(0) on {}", name()));
  cl_int err = CL_SUCCESS;
  Mem mem(clCreateBuffer(context(), CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, nullptr, &err));
  check(err, "clCreateBuffer(CL_MEM_ALLOC_HOST_PTR)", fmt::format("{} pinned bytes for {}", bytes, name()));
  void* p = clEnqueueMapBuffer(internal_->get(), mem.get(), CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0,
                               nullptr, nullptr, &err);
  check(err, "clEnqueueMapBuffer", fmt::format("{} pinned bytes for {}", bytes, name()));
  std::lock_guard lock(mutex_);
  pinned_.insert(p, bytes, std::move(mem));
  return p;
}

void OpenclDevice::free_pinned(void* pointer) {
  if (pointer == nullptr) return;
  std::unique_lock lock(mutex_);
  auto p = pinned_.take(pointer);
  if (!p)
    throw InvalidPointer(
        fmt::format("free_pinned({}) on {}: not pinned memory of this device", pointer, name()));
  lock.unlock();
  check(clEnqueueUnmapMemObject(internal_->get(), p->value.get(), pointer, 0, nullptr, nullptr),
        "clEnqueueUnmapMemObject", fmt::format("pinned memory of {}", name()));
  check(clFinish(internal_->get()), "clFinish", name());
}

bool OpenclDevice::is_pinned(const void* pointer, std::size_t bytes) const {
  std::lock_guard lock(mutex_);
  return pinned_.contains(pointer, bytes);
}

std::uint64_t OpenclDevice::map_host(void* pointer, std::size_t bytes) {
  if (bytes == 0)
    throw InvalidArgument(fmt::format("map_host({}, 0) on {}: nothing to map", pointer, name()));
  // Larger than one buffer may be (CL_DEVICE_MAX_MEM_ALLOC_SIZE): the size's fault, not a platform
  // that will not map (whose refusal makes the auto model copy from then on).
  if (bytes > max_alloc_)
    throw OutOfDeviceMemory(fmt::format("{} (one buffer holds at most {}, CL_DEVICE_MAX_MEM_ALLOC_SIZE)",
                                        name(), format_bytes(max_alloc_)),
                            bytes, memory_used(), props_.memory_bytes);
  const std::string what = fmt::format("{} bytes of host memory at {} for {}", bytes, pointer, name());
  const bool in_place = host_memory_in_place();
  cl_int err = CL_SUCCESS;
  Mem mem(clCreateBuffer(context(), CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, pointer, &err));
  check(err, "clCreateBuffer(CL_MEM_USE_HOST_PTR)", what);
  if (in_place) {  // never mapped: recorded as the device's, so that nothing unmaps it
    std::lock_guard lock(mutex_);
    const std::uint64_t handle = next_host_mapping_++;
    host_mapped_.emplace(handle, HostMapped{std::move(mem), pointer, bytes, true});
    return handle;
  }
  // The host owns a new mapping: mapped, as OpenCL requires for host access to its memory.
  void* mapped = clEnqueueMapBuffer(internal_->get(), mem.get(), CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                    bytes, 0, nullptr, nullptr, &err);
  check(err, "clEnqueueMapBuffer", what);
  if (mapped != pointer) {
    clEnqueueUnmapMemObject(internal_->get(), mem.get(), mapped, 0, nullptr, nullptr);
    clFinish(internal_->get());
    throw Unsupported(
        fmt::format("map_host on {}: clEnqueueMapBuffer of a CL_MEM_USE_HOST_PTR buffer "
                    "returned {} instead of the host memory at {}: the platform copies",
                    name(), mapped, pointer));
  }
  std::lock_guard lock(mutex_);
  const std::uint64_t handle = next_host_mapping_++;
  host_mapped_.emplace(handle, HostMapped{std::move(mem), pointer, bytes, false});
  return handle;
}

void OpenclDevice::unmap_host(std::uint64_t mapping) {
  std::unique_lock lock(mutex_);
  const auto it = host_mapped_.find(mapping);
  if (it == host_mapped_.end())
    throw InvalidPointer(fmt::format("unmap_host({:#x}) on {}: no such host mapping", mapping, name()));
  HostMapped m = std::move(it->second);
  host_mapped_.erase(it);
  lock.unlock();
  if (!m.on_device) {
    check(clEnqueueUnmapMemObject(internal_->get(), m.mem.get(), m.host, 0, nullptr, nullptr),
          "clEnqueueUnmapMemObject", fmt::format("host memory at {} on {}", m.host, name()));
    check(clFinish(internal_->get()), "clFinish", name());
  }
}

KernelArg OpenclDevice::host_argument(std::uint64_t mapping, std::size_t offset) {
  std::lock_guard lock(mutex_);
  const auto& m = host_mapping_at(host_mapped_, mapping, offset, name());
  return KernelArg::buffer(DeviceBuffer{mapping, m.bytes}, offset);
}

void OpenclDevice::hand_over(std::uint64_t mapping, bool to_device, Queue& queue) {
  auto* q = dynamic_cast<OpenclQueue*>(&queue);
  if (q == nullptr || &q->device() != this)
    throw InvalidArgument(fmt::format("hand_over on {}: the queue is not one of this device", name()));
  if (in_place_) return;  // set before any mapping existed (host_memory_in_place)
  std::lock_guard lock(mutex_);
  const auto it = host_mapped_.find(mapping);
  if (it == host_mapped_.end())
    throw InvalidPointer(fmt::format("hand_over({:#x}) on {}: no such host mapping", mapping, name()));
  HostMapped& m = it->second;
  if (m.on_device == to_device) return;
  const std::string what = fmt::format("host memory at {} on {}", m.host, name());
  if (to_device) {
    check(clEnqueueUnmapMemObject(q->get(), m.mem.get(), m.host, 0, nullptr, nullptr),
          "clEnqueueUnmapMemObject", what);
  } else {
    cl_int err = CL_SUCCESS;
    void* mapped = clEnqueueMapBuffer(q->get(), m.mem.get(), CL_FALSE, CL_MAP_READ | CL_MAP_WRITE, 0, m.bytes,
                                      0, nullptr, nullptr, &err);
    check(err, "clEnqueueMapBuffer", what);
    if (mapped != m.host)
      throw Error(Errc::system,
                  fmt::format("clEnqueueMapBuffer of {} returned {}: a CL_MEM_USE_HOST_PTR buffer must map "
                              "at its host memory",
                              what, mapped));
  }
  m.on_device = to_device;
}

bool OpenclDevice::host_memory_in_place() {
  std::call_once(in_place_once_, [&] {
    if ((device_info<cl_device_type>(id_, CL_DEVICE_TYPE, props_.name.c_str()) & CL_DEVICE_TYPE_CPU) == 0)
      return;
    const std::size_t page = os::page_size();
    const os::Mapping probe(page, fmt::format("the host-mapping probe of {}", name()));
    std::memset(probe.data(), 1, page);
    cl_int err = CL_SUCCESS;
    const Mem m(clCreateBuffer(context(), CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, page, probe.data(), &err));
    if (err != CL_SUCCESS) return;
    static constexpr unsigned char kPattern = 0x5A;
    if (clEnqueueFillBuffer(internal_->get(), m.get(), &kPattern, 1, 0, page, 0, nullptr, nullptr) !=
            CL_SUCCESS ||
        clFinish(internal_->get()) != CL_SUCCESS)
      return;
    const auto* bytes = reinterpret_cast<const unsigned char*>(probe.data());
    if (bytes[0] != kPattern || bytes[page - 1] != kPattern) return;  // the fill went to a copy
    probe.data()[7] = std::byte{0x33};
    unsigned char back = 0;
    if (clEnqueueReadBuffer(internal_->get(), m.get(), CL_TRUE, 7, 1, &back, 0, nullptr, nullptr) !=
        CL_SUCCESS)
      return;
    in_place_ = back == 0x33;
  });
  return in_place_;
}

bool OpenclDevice::can_access_peer(const Device& other) const {
  const auto* o = dynamic_cast<const OpenclDevice*>(&other);
  return o != nullptr && o != this && o->context() == context();
}

std::optional<KernelArg> OpenclDevice::peer_argument(const Device&, DeviceBuffer, std::size_t) {
  // A cl_mem of one context is valid on every device of it, but hdsm's buffers name one device's
  // allocations (queues resolve them against their own device), so kernels never take another
  // device's buffer: OpenCL devices are never remote-access peers.
  return std::nullopt;
}

std::unique_ptr<Queue> OpenclDevice::create_queue() { return std::make_unique<OpenclQueue>(*this); }

namespace {

std::string build_log(cl_program program, cl_device_id id) {
  std::size_t n = 0;
  clGetProgramBuildInfo(program, id, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
  std::string log(n, '\0');
  clGetProgramBuildInfo(program, id, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

/// The binary `program` holds for device `id` (a program of a context lists every device of it).
std::vector<unsigned char> program_binary(cl_program program, cl_device_id id, const std::string& kernel) {
  const std::string what = fmt::format("the program of kernel '{}'", kernel);
  cl_uint count = 0;
  check(clGetProgramInfo(program, CL_PROGRAM_NUM_DEVICES, sizeof count, &count, nullptr), "clGetProgramInfo",
        what);
  std::vector<cl_device_id> ids(count);
  std::vector<std::size_t> sizes(count);
  check(clGetProgramInfo(program, CL_PROGRAM_DEVICES, count * sizeof(cl_device_id), ids.data(), nullptr),
        "clGetProgramInfo", what);
  check(
      clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, count * sizeof(std::size_t), sizes.data(), nullptr),
      "clGetProgramInfo", what);
  const auto at = static_cast<std::size_t>(std::find(ids.begin(), ids.end(), id) - ids.begin());
  if (at == count || sizes[at] == 0) return {};
  std::vector<unsigned char> binary(sizes[at]);
  std::vector<unsigned char*> pointers(count, nullptr);  // null entries: devices skipped
  pointers[at] = binary.data();
  check(clGetProgramInfo(program, CL_PROGRAM_BINARIES, count * sizeof(unsigned char*), pointers.data(),
                         nullptr),
        "clGetProgramInfo", what);
  return binary;
}

}  // namespace

// What every program is built with: the arguments' address qualifiers, which a launch checks a
// host pointer against (a raw pointer where the kernel takes a __global one).
constexpr const char* kBuildOptions = "-cl-kernel-arg-info";

Program OpenclDevice::load_cached(const std::string& key) {
  const auto binary = cache_->load(key);
  if (!binary) return {};
  const unsigned char* data = binary->data();
  const std::size_t size = binary->size();
  cl_int status = CL_SUCCESS, err = CL_SUCCESS;
  Program program(clCreateProgramWithBinary(context(), 1, &id_, &size, &data, &status, &err));
  // A binary the driver no longer accepts is rebuilt from source (and the entry replaced).
  if (err != CL_SUCCESS || status != CL_SUCCESS) return {};
  if (clBuildProgram(program.get(), 1, &id_, kBuildOptions, nullptr, nullptr) != CL_SUCCESS) return {};
  return program;
}

cl_program OpenclDevice::program(const std::string& kernel, const std::string& source) {
  std::lock_guard lock(programs_mutex_);
  if (const auto it = programs_.find(source); it != programs_.end()) return it->second.get();
  const std::string key = cache_->enabled()
                              ? cache_identity_ + "options: " + kBuildOptions + "\nsource:\n" + source
                              : std::string();
  if (Program cached = cache_->enabled() ? load_cached(key) : Program(); cached.get() != nullptr) {
    counters_.program_cache_loads.fetch_add(1, std::memory_order_relaxed);
    return programs_.emplace(source, std::move(cached)).first->second.get();
  }
  const char* text = source.c_str();
  const std::size_t length = source.size();
  cl_int err = CL_SUCCESS;
  Program program(clCreateProgramWithSource(context(), 1, &text, &length, &err));
  check(err, "clCreateProgramWithSource", fmt::format("kernel '{}'", kernel));
  const cl_int built = clBuildProgram(program.get(), 1, &id_, kBuildOptions, nullptr, nullptr);
  if (built != CL_SUCCESS)
    throw KernelFailure(fmt::format("kernel '{}': the OpenCL C source does not build for {} ({}):\n{}",
                                    kernel, name(), error_name(built), build_log(program.get(), id_)));
  counters_.program_builds.fetch_add(1, std::memory_order_relaxed);
  if (cache_->enabled()) cache_->store(key, program_binary(program.get(), id_, kernel));
  return programs_.emplace(source, std::move(program)).first->second.get();
}

}  // namespace opencl

namespace {

// Every device of every OpenCL platform (ICD) on this machine; none is not an error (an empty
// backend), a missing ICD loader or a failing platform is NoDevice with the OpenCL error.
std::unique_ptr<DeviceBackend> open_opencl(DeviceServices services, const Config& config,
                                           unsigned first_index) {
  // One discovery at a time in the process: two runtimes made at once in two threads crashed in
  // PoCL's first clGetPlatformIDs/clGetDeviceInfo (its initialization is not thread-safe), or one
  // of them found no device. Later calls are thread-safe as OpenCL says.
  static std::mutex discovery;
  std::lock_guard lock(discovery);
  return std::make_unique<opencl::OpenclBackend>(
      services, opencl::OpenclOptions{first_index, config.boolean("HDSM_OPENCL_POISON"),
                                      config.size("HDSM_OPENCL_MEMORY"), config.get("HDSM_CACHE_DIR")});
}

const bool registered = register_backend(
    {"opencl", 1, [](const Config& c) { return switched_on(c, "HDSM_OPENCL", "opencl"); }, open_opencl});

}  // namespace

}  // namespace hdsm
