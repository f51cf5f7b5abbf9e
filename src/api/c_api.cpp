// The C API: thin wrappers that turn exceptions into hdsm_status codes and a per-thread message.
#include <hdsm/hdsm.h>
#include <hdsm/hdsm.hpp>

#include "api/guarded.hpp"
#include "runtime/direct_objects.hpp"
#include "runtime/runtime_impl.hpp"

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

namespace hdsm::api {

std::string& last_error() {
  thread_local std::string message;
  return message;
}

hdsm_status status_of(Errc code) {
  switch (code) {
    case Errc::invalid_argument:
      return HDSM_ERROR_INVALID_ARGUMENT;
    case Errc::invalid_pointer:
      return HDSM_ERROR_INVALID_POINTER;
    case Errc::out_of_device_memory:
      return HDSM_ERROR_OUT_OF_DEVICE_MEMORY;
    case Errc::config:
      return HDSM_ERROR_CONFIG;
    case Errc::unsupported:
      return HDSM_ERROR_UNSUPPORTED;
    case Errc::no_device:
      return HDSM_ERROR_NO_DEVICE;
    case Errc::kernel_failure:
      return HDSM_ERROR_KERNEL_FAILURE;
    case Errc::system:
      return HDSM_ERROR_SYSTEM;
  }
  return HDSM_ERROR_UNKNOWN;
}

}  // namespace hdsm::api

/// What an hdsm_event handle points to.
struct hdsm_event_s {
  hdsm::Event event;
};

/// What an hdsm_kernel handle points to.
struct hdsm_kernel_s {
  hdsm::Kernel kernel;
};

namespace {

using hdsm::api::guarded;
using hdsm::api::io_guarded;

hdsm_status null_argument(const char* call, const char* what) {
  hdsm::api::last_error() = std::string(call) + ": " + what + " is NULL";
  return HDSM_ERROR_INVALID_ARGUMENT;
}

/// A C value argument as a KernelArg: KernelArg::value of an array of its size (1 to 64 bytes).
template <std::size_t N>
struct Bytes {
  unsigned char b[N];
};
template <std::size_t... N>
hdsm::KernelArg value_of(const void* data, std::size_t size, std::index_sequence<N...>) {
  hdsm::KernelArg arg;
  (void)((size == N + 1 ? (arg = hdsm::KernelArg::value(*static_cast<const Bytes<N + 1>*>(data)), true)
                        : false) ||
         ...);
  return arg;
}

hdsm::detail::CallArg call_arg_of(const hdsm_arg& a, std::size_t i) {
  hdsm::detail::CallArg c;
  // The kind as the C program stored it: a value none of the enumerators is no hdsm_arg_kind C++ may
  // read (undefined behaviour), but an int.
  int kind = 0;
  static_assert(sizeof kind == sizeof a.kind);
  std::memcpy(&kind, &a.kind, sizeof kind);
  switch (kind) {
    case HDSM_ARG_VALUE:
      if (a.data == nullptr || a.size == 0 || a.size > hdsm::KernelArg::kMaxValue)
        throw hdsm::InvalidArgument("hdsm_call: argument " + std::to_string(i) + " is a value of " +
                                    std::to_string(a.size) + " bytes at " +
                                    (a.data == nullptr ? std::string("NULL") : std::string("its address")) +
                                    "; a value has 1 to 64 bytes (pass larger data in a shared object)");
      c.kind = hdsm::detail::CallArg::Kind::value;
      c.value = value_of(a.data, a.size, std::make_index_sequence<hdsm::KernelArg::kMaxValue>{});
      return c;
    case HDSM_ARG_POINTER:
      c.kind = hdsm::detail::CallArg::Kind::pointer;
      c.pointer = a.data;
      c.value = hdsm::KernelArg::value(a.data);
      return c;
    case HDSM_ARG_IN:
    case HDSM_ARG_OUT:
    case HDSM_ARG_INOUT:
      c.kind = hdsm::detail::CallArg::Kind::annotated;
      c.use = kind == HDSM_ARG_IN ? hdsm::Use::in : kind == HDSM_ARG_OUT ? hdsm::Use::out : hdsm::Use::inout;
      c.pointer = a.data;
      return c;
    default:
      throw hdsm::InvalidArgument("hdsm_call: argument " + std::to_string(i) + " has kind " +
                                  std::to_string(kind) + ", which is none of HDSM_ARG_*");
  }
}

void copy_route(hdsm_route_stats& out, const hdsm::RouteStats& in) {
  out.bytes = in.bytes;
  out.transfers = in.transfers;
}

// Whether a buffer is host memory, in no runtime's shared memory: the I/O calls then go straight to
// libc, as hdsm.h says, without the default runtime, which such a buffer does not need and which may
// not be there to make (a bad setting, no device, a child of fork()): they failed with EIO.
bool host_memory(const void* p, std::size_t n) {
  return hdsm::detail::foreign_owner(p, n, nullptr) == nullptr;
}

bool host_vectors(const struct iovec* iov, int count) {
  if (iov == nullptr || count <= 0 || count > IOV_MAX) return true;  // libc's answer to give
  for (int i = 0; i < count; ++i)
    if (!host_memory(iov[i].iov_base, iov[i].iov_len)) return false;
  return true;
}

// fread's and fwrite's bytes; 0 when size * count does not fit (the first byte is then what tells).
std::size_t item_bytes(std::size_t size, std::size_t count) {
  return size != 0 && count > SIZE_MAX / size ? 0 : size * count;
}

}  // namespace

extern "C" {

const char* hdsm_last_error(void) { return hdsm::api::last_error().c_str(); }
const char* hdsm_version(void) { return hdsm::version(); }

hdsm_status hdsm_config_set(const char* name, const char* value) {
  if (name == nullptr) return null_argument("hdsm_config_set", "name");
  if (value == nullptr) return null_argument("hdsm_config_set", "value");
  return guarded([&] { hdsm::detail::set_default_knob(name, value); });
}

hdsm_status hdsm_device_count(size_t* count) {
  if (count == nullptr) return null_argument("hdsm_device_count", "count");
  return guarded([&] { *count = hdsm::Runtime::instance().devices().size(); });
}

hdsm_status hdsm_device_get_info(size_t index, hdsm_device_info* info) {
  if (info == nullptr) return null_argument("hdsm_device_get_info", "info");
  return guarded([&] {
    const auto& p = hdsm::Runtime::instance().device(index).properties();
    std::memset(info, 0, sizeof *info);
    std::snprintf(info->name, sizeof info->name, "%s", p.name.c_str());
    std::snprintf(info->backend, sizeof info->backend, "%s", std::string(hdsm::to_string(p.backend)).c_str());
    info->memory_bytes = p.memory_bytes;
    info->copy_engines = p.copy_engines;
    info->peer_group = p.peer_group;
    info->link_gbps = p.link_gbps;
  });
}

hdsm_status hdsm_stats_get(hdsm_stats* stats) {
  if (stats == nullptr) return null_argument("hdsm_stats_get", "stats");
  return guarded([&] {
    const hdsm::Stats s = hdsm::Runtime::instance().stats();
    copy_route(stats->h2d, s.route(hdsm::Route::h2d));
    copy_route(stats->d2h, s.route(hdsm::Route::d2h));
    copy_route(stats->d2d, s.route(hdsm::Route::d2d));
    copy_route(stats->peer, s.route(hdsm::Route::peer));
    stats->kernel_launches = s.kernel_launches;
    stats->read_faults = s.read_faults;
    stats->write_faults = s.write_faults;
    stats->lock_waits = s.lock_waits;
    stats->lock_wait_ns = s.lock_wait_ns;
  });
}

hdsm_status hdsm_stats_reset(void) {
  return guarded([] { hdsm::Runtime::instance().reset_stats(); });
}

hdsm_status hdsm_alloc(size_t bytes, int device, void** out) {
  if (out == nullptr) return null_argument("hdsm_alloc", "out");
  return guarded([&] { *out = hdsm::Runtime::instance().alloc(bytes, device); });
}

hdsm_status hdsm_free(void* pointer) {
  return guarded([&] { hdsm::Runtime::instance().free(pointer); });
}

hdsm_status hdsm_kernel_create(const char* name, hdsm_thread_fn body, const char* opencl_source,
                               hdsm_kernel* out) {
  if (out == nullptr) return null_argument("hdsm_kernel_create", "out");
  if (name == nullptr) return null_argument("hdsm_kernel_create", "name");
  if (*name == '\0') {
    hdsm::api::last_error() = "hdsm_kernel_create: name is empty";
    return HDSM_ERROR_INVALID_ARGUMENT;
  }
  if (body == nullptr && (opencl_source == nullptr || *opencl_source == '\0'))
    return null_argument("hdsm_kernel_create", "both the host body and the OpenCL source");
  return guarded([&] {
    auto k = std::make_unique<hdsm_kernel_s>();
    k->kernel.name = name;
    if (opencl_source != nullptr) k->kernel.opencl_source = opencl_source;
    if (body != nullptr)
      k->kernel.host = [body](hdsm::exec::Executor& ex, const hdsm::Launch& launch,
                              const hdsm::ArgPack& pack) {
        hdsm::detail::for_each_block(ex, launch, [&](const hdsm::BlockRun& run) {
          const auto dim = [](const hdsm::Dim3& d) { return hdsm_dim3{d.x, d.y, d.z}; };
          hdsm_thread t{{0, 0, 0}, dim(run.block), dim(launch.block), dim(launch.grid)};
          for (std::uint32_t z = 0; z < launch.block.z; ++z)
            for (std::uint32_t y = 0; y < launch.block.y; ++y)
              for (std::uint32_t x = 0; x < launch.block.x; ++x) {
                t.idx = hdsm_dim3{x, y, z};
                body(&t, pack.values);
              }
        });
      };
    *out = k.release();
  });
}

hdsm_status hdsm_kernel_destroy(hdsm_kernel kernel) {
  delete kernel;  // NOLINT(cppcoreguidelines-owning-memory): the handle came from hdsm_kernel_create
  return HDSM_SUCCESS;
}

hdsm_status hdsm_call(hdsm_kernel kernel, hdsm_dim3 grid, hdsm_dim3 block, size_t shared_bytes,
                      const hdsm_arg* args, size_t count) {
  if (kernel == nullptr) return null_argument("hdsm_call", "kernel");
  if (args == nullptr && count != 0) return null_argument("hdsm_call", "args");
  return guarded([&] {
    // A count no kernel has (CUDA's parameters take at most 32 KiB, 4 bytes and more each) is a wrong
    // count, not an allocation to attempt.
    constexpr std::size_t kMaxArgs = 8192;
    if (count > kMaxArgs)
      throw hdsm::InvalidArgument("hdsm_call: " + std::to_string(count) +
                                  " arguments; a kernel takes at most " + std::to_string(kMaxArgs) +
                                  " (CUDA's 32 KiB of parameters)");
    std::vector<hdsm::detail::CallArg> call(count);
    for (std::size_t i = 0; i < count; ++i) call[i] = call_arg_of(args[i], i);
    const hdsm::Launch launch{hdsm::Dim3{grid.x, grid.y, grid.z}, hdsm::Dim3{block.x, block.y, block.z},
                              shared_bytes};
    hdsm::Runtime::instance().call_args(kernel->kernel, launch, call);
  });
}

hdsm_status hdsm_safe_alloc(size_t bytes, int device, void** out) {
  if (out == nullptr) return null_argument("hdsm_safe_alloc", "out");
  return guarded([&] { *out = hdsm::Runtime::instance().safe_alloc(bytes, device); });
}

hdsm_status hdsm_safe(const void* pointer, void** out) {
  if (out == nullptr) return null_argument("hdsm_safe", "out");
  return guarded([&] { *out = hdsm::Runtime::instance().safe(pointer); });
}

hdsm_status hdsm_sync(void) {
  return guarded([] { hdsm::Runtime::instance().sync(); });
}

hdsm_status hdsm_memcpy(void* dst, const void* src, size_t bytes) {
  return guarded([&] { hdsm::Runtime::instance().memcpy(dst, src, bytes); });
}

hdsm_status hdsm_memmove(void* dst, const void* src, size_t bytes) {
  return guarded([&] { hdsm::Runtime::instance().memmove(dst, src, bytes); });
}

hdsm_status hdsm_memset(void* dst, int value, size_t bytes) {
  return guarded([&] { hdsm::Runtime::instance().memset(dst, value, bytes); });
}

hdsm_status hdsm_memcpy_async(void* dst, const void* src, size_t bytes, hdsm_event* out) {
  if (out == nullptr) return null_argument("hdsm_memcpy_async", "out");
  *out = nullptr;
  return guarded([&] {
    auto event =
        std::make_unique<hdsm_event_s>(hdsm_event_s{hdsm::Runtime::instance().memcpy_async(dst, src, bytes)});
    *out = event.release();
  });
}

hdsm_status hdsm_event_query(hdsm_event event, int* done) {
  if (event == nullptr) return null_argument("hdsm_event_query", "event");
  if (done == nullptr) return null_argument("hdsm_event_query", "done");
  return guarded([&] { *done = event->event.query() ? 1 : 0; });
}

hdsm_status hdsm_event_wait(hdsm_event event) {
  if (event == nullptr) return null_argument("hdsm_event_wait", "event");
  return guarded([&] { event->event.wait(); });
}

hdsm_status hdsm_event_destroy(hdsm_event event) {
  delete event;
  return HDSM_SUCCESS;
}

ssize_t hdsm_read(int fd, void* buf, size_t bytes) {
  if (host_memory(buf, bytes)) return ::read(fd, buf, bytes);
  return io_guarded<ssize_t>(-1, [&] { return hdsm::Runtime::instance().read(fd, buf, bytes); });
}

ssize_t hdsm_write(int fd, const void* buf, size_t bytes) {
  if (host_memory(buf, bytes)) return ::write(fd, buf, bytes);
  return io_guarded<ssize_t>(-1, [&] { return hdsm::Runtime::instance().write(fd, buf, bytes); });
}

ssize_t hdsm_pread(int fd, void* buf, size_t bytes, off_t offset) {
  if (host_memory(buf, bytes)) return ::pread(fd, buf, bytes, offset);
  return io_guarded<ssize_t>(-1, [&] { return hdsm::Runtime::instance().pread(fd, buf, bytes, offset); });
}

ssize_t hdsm_pwrite(int fd, const void* buf, size_t bytes, off_t offset) {
  if (host_memory(buf, bytes)) return ::pwrite(fd, buf, bytes, offset);
  return io_guarded<ssize_t>(-1, [&] { return hdsm::Runtime::instance().pwrite(fd, buf, bytes, offset); });
}

ssize_t hdsm_readv(int fd, const struct iovec* iov, int count) {
  if (host_vectors(iov, count)) return ::readv(fd, iov, count);
  return io_guarded<ssize_t>(-1, [&] { return hdsm::Runtime::instance().readv(fd, iov, count); });
}

ssize_t hdsm_writev(int fd, const struct iovec* iov, int count) {
  if (host_vectors(iov, count)) return ::writev(fd, iov, count);
  return io_guarded<ssize_t>(-1, [&] { return hdsm::Runtime::instance().writev(fd, iov, count); });
}

ssize_t hdsm_preadv(int fd, const struct iovec* iov, int count, off_t offset) {
  if (host_vectors(iov, count)) return ::preadv(fd, iov, count, offset);
  return io_guarded<ssize_t>(-1, [&] { return hdsm::Runtime::instance().preadv(fd, iov, count, offset); });
}

ssize_t hdsm_pwritev(int fd, const struct iovec* iov, int count, off_t offset) {
  if (host_vectors(iov, count)) return ::pwritev(fd, iov, count, offset);
  return io_guarded<ssize_t>(-1, [&] { return hdsm::Runtime::instance().pwritev(fd, iov, count, offset); });
}

size_t hdsm_fread(void* buf, size_t size, size_t count, FILE* stream) {
  if (host_memory(buf, item_bytes(size, count))) return std::fread(buf, size, count, stream);
  return io_guarded<size_t>(0, [&] { return hdsm::Runtime::instance().fread(buf, size, count, stream); });
}

size_t hdsm_fwrite(const void* buf, size_t size, size_t count, FILE* stream) {
  if (host_memory(buf, item_bytes(size, count))) return std::fwrite(buf, size, count, stream);
  return io_guarded<size_t>(0, [&] { return hdsm::Runtime::instance().fwrite(buf, size, count, stream); });
}

}  // extern "C"
