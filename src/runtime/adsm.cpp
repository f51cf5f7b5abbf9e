// The public ADSM calls of a Runtime (alloc, free, call, sync, bulk memory) over its memory model
// (memory_model.hpp): the ADSM model of HDSM_PROTOCOL batch, lazy and rolling, or unified memory.
#include <hdsm/adsm.hpp>
#include <hdsm/error.hpp>

#include "device/checks.hpp"
#include "runtime/memory_model.hpp"
#include "runtime/runtime_impl.hpp"
#include "transfer/copy_engine.hpp"

#include <fmt/format.h>

namespace hdsm {

void* Runtime::alloc(std::size_t bytes, int device) {
  const std::size_t index = device == -1 ? impl_->default_device : static_cast<std::size_t>(device);
  if (device < -1 || index >= impl_->devices.size())  // -1: the default device; -2 is no device
    throw InvalidArgument(fmt::format("alloc({}, device {}): this runtime has {} devices",
                                      format_bytes(bytes), device, impl_->devices.size()));
  return impl_->model->alloc(bytes, static_cast<unsigned>(index));
}

void Runtime::free(void* p) {
  if (p != nullptr) impl_->model->free(p);
}

namespace {

/// InvalidArgument for a null pointer where `call` moves n > 0 bytes (a crash inside hdsm otherwise,
/// as in libc; the C API promises an error code).
void require_pointers(const char* call, const void* dst, const void* src, std::size_t n) {
  if (dst == nullptr || src == nullptr)
    throw InvalidArgument(fmt::format("{}: the {} is a null pointer ({} bytes)", call,
                                      dst == nullptr ? "destination" : "source", n));
}

}  // namespace

void* Runtime::memmove(void* dst, const void* src, std::size_t n) {
  if (n == 0) return dst;
  require_pointers("memmove", dst, src, n);
  impl_->model->copy(dst, src, n, nullptr);
  return dst;
}

void* Runtime::memcpy(void* dst, const void* src, std::size_t n) {
  if (n != 0) require_pointers("memcpy", dst, src, n);
  return memmove(dst, src, n);
}

Event Runtime::memcpy_async(void* dst, const void* src, std::size_t n) {
  std::vector<Event> pending;
  if (n == 0) return {};
  require_pointers("memcpy_async", dst, src, n);
  impl_->model->copy(dst, src, n, &pending);
  return transfer::all_of(std::move(pending));
}

void* Runtime::memset(void* dst, int value, std::size_t n) {
  if (n == 0) return dst;
  require_pointers("memset", dst, dst, n);
  impl_->model->fill(dst, static_cast<std::uint8_t>(value), n);
  return dst;
}

void* Runtime::safe_alloc(std::size_t bytes, int device) { return alloc(bytes, device); }

void* Runtime::safe(const void* p) const { return impl_->model->device_address(p); }

void Runtime::call_args(const Kernel& kernel, const Launch& launch, std::span<const detail::CallArg> args) {
  require_launch(kernel, launch, "in a call");  // before any object moves
  impl_->model->call(kernel, launch, args);
}

void Runtime::sync() { impl_->model->sync(); }

}  // namespace hdsm
