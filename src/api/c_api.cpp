// The C API: thin wrappers that turn exceptions into hdsm_status codes and a per-thread message.
#include <hdsm/hdsm.h>
#include <hdsm/hdsm.hpp>

#include "api/guarded.hpp"
#include "runtime/runtime_impl.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>

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

namespace {

using hdsm::api::guarded;
using hdsm::api::io_guarded;

hdsm_status null_argument(const char* call, const char* what) {
  hdsm::api::last_error() = std::string(call) + ": " + what + " is NULL";
  return HDSM_ERROR_INVALID_ARGUMENT;
}

void copy_route(hdsm_route_stats& out, const hdsm::RouteStats& in) {
  out.bytes = in.bytes;
  out.transfers = in.transfers;
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
  return io_guarded<ssize_t>(-1, [&] { return hdsm::Runtime::instance().read(fd, buf, bytes); });
}

ssize_t hdsm_write(int fd, const void* buf, size_t bytes) {
  return io_guarded<ssize_t>(-1, [&] { return hdsm::Runtime::instance().write(fd, buf, bytes); });
}

ssize_t hdsm_pread(int fd, void* buf, size_t bytes, off_t offset) {
  return io_guarded<ssize_t>(-1, [&] { return hdsm::Runtime::instance().pread(fd, buf, bytes, offset); });
}

ssize_t hdsm_pwrite(int fd, const void* buf, size_t bytes, off_t offset) {
  return io_guarded<ssize_t>(-1, [&] { return hdsm::Runtime::instance().pwrite(fd, buf, bytes, offset); });
}

ssize_t hdsm_readv(int fd, const struct iovec* iov, int count) {
  return io_guarded<ssize_t>(-1, [&] { return hdsm::Runtime::instance().readv(fd, iov, count); });
}

ssize_t hdsm_writev(int fd, const struct iovec* iov, int count) {
  return io_guarded<ssize_t>(-1, [&] { return hdsm::Runtime::instance().writev(fd, iov, count); });
}

size_t hdsm_fread(void* buf, size_t size, size_t count, FILE* stream) {
  return io_guarded<size_t>(0, [&] { return hdsm::Runtime::instance().fread(buf, size, count, stream); });
}

size_t hdsm_fwrite(const void* buf, size_t size, size_t count, FILE* stream) {
  return io_guarded<size_t>(0, [&] { return hdsm::Runtime::instance().fwrite(buf, size, count, stream); });
}

}  // extern "C"
