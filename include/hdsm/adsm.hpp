// Shared memory between the CPU and accelerators: alloc gives one pointer that both
// the CPU and kernels use; call releases (the CPU's newer data goes to the device) and launches
// asynchronously; sync waits and acquires (the kernels' results become visible to the CPU, fetched
// on access by lazy and rolling update). HDSM_PROTOCOL, HDSM_BLOCK_SIZE and HDSM_ROLLING_STEP choose
// the coherence protocol.
//
// Annotations say how a call uses an object: in(p) (only read: the host copy stays valid), out(p)
// (only written: nothing is uploaded) and inout(p). In a call with at least one annotation only the
// named objects are released and acquired (a raw shared pointer counts as inout); a call without any
// releases and acquires every object of its device.
//
// A range annotation, in(p, first, count) and so on, also says that the kernel touches only elements
// [first, first + count) from p (it still receives p). The call then runs alongside asynchronous
// copies (memcpy_async) of other bytes of the object, where it would otherwise wait for them; release
// and acquire still cover the whole object. A kernel that strays outside its range races with those
// copies.
//
// A call runs on the device of its first shared-pointer argument; objects of other devices are
// released and acquired on their own devices (remote access: peers, or copies with HDSM_REMOTE=copy).
// Any thread may call on any device; sync acquires the calling thread's calls.
#pragma once

#include <hdsm/export.h>

#include <hdsm/container.hpp>
#include <hdsm/kernel.hpp>
#include <hdsm/runtime.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

HDSM_VISIBLE_BEGIN
namespace hdsm {

template <class T>
struct Annotated {
  T* pointer;
  Use use;
  std::size_t offset = 0;                             // range annotations: the first byte from pointer
  std::size_t bytes = detail::CallArg::kWholeObject;  // and how many; kWholeObject: all of the object
};

template <class T>
Annotated<T> in(T* p) {
  return {p, Use::in};
}
template <class T>
Annotated<T> out(T* p) {
  return {p, Use::out};
}
template <class T>
Annotated<T> inout(T* p) {
  return {p, Use::inout};
}

namespace detail {
// Bytes from elements; a product that overflows becomes a range no object holds (the call says so).
template <class T>
Annotated<T> ranged(T* p, Use use, std::size_t first, std::size_t count) {
  constexpr std::size_t size = sizeof(std::conditional_t<std::is_void_v<T>, char, T>);
  constexpr std::size_t most = CallArg::kWholeObject - 1;
  const auto bytes = [](std::size_t n) { return n > most / size ? most : n * size; };
  return {p, use, bytes(first), bytes(count)};
}
}  // namespace detail

/// The call touches only elements [first, first + count) from p (bytes, for void pointers).
template <class T>
Annotated<T> in(T* p, std::size_t first, std::size_t count) {
  return detail::ranged(p, Use::in, first, count);
}
template <class T>
Annotated<T> out(T* p, std::size_t first, std::size_t count) {
  return detail::ranged(p, Use::out, first, count);
}
template <class T>
Annotated<T> inout(T* p, std::size_t first, std::size_t count) {
  return detail::ranged(p, Use::inout, first, count);
}

/// A launch of `blocks` blocks of `threads` threads each.
constexpr Launch grid(Dim3 blocks, Dim3 threads, std::size_t shared_bytes = 0) {
  return {blocks, threads, shared_bytes};
}

namespace detail {

template <class T>
struct is_annotated : std::false_type {};
template <class T>
struct is_annotated<Annotated<T>> : std::true_type {};

template <class A>
CallArg call_arg(const A& a) {
  if constexpr (is_annotated<A>::value) {
    return {CallArg::Kind::annotated, a.use, a.pointer, {}, a.offset, a.bytes};
  } else if constexpr (std::is_pointer_v<A> && !std::is_function_v<std::remove_pointer_t<A>>) {
    return {CallArg::Kind::pointer, Use::inout, a, KernelArg::value(a)};
  } else {
    return {CallArg::Kind::value, Use::inout, nullptr, KernelArg::value(a)};
  }
}

template <class>
inline constexpr bool always_false = false;

/// The CallArg of argument `a` for the typed kernel parameter P, checked at compile time.
template <class P, class A>
CallArg typed_call_arg(const A& a) {
  if constexpr (std::is_pointer_v<P> && !std::is_function_v<std::remove_pointer_t<P>>) {
    if constexpr (is_annotated<A>::value) {
      static_assert(std::is_convertible_v<decltype(a.pointer), P>,
                    "hdsm::call: the annotated pointer does not convert to the kernel's pointer parameter "
                    "(see the parameter and argument types in the instantiation above)");
      return call_arg(a);
    } else if constexpr (std::is_null_pointer_v<A>) {
      return {CallArg::Kind::value, Use::inout, nullptr, KernelArg::value(P{nullptr})};
    } else {
      static_assert(std::is_pointer_v<A> && std::is_convertible_v<A, P>,
                    "hdsm::call: the argument is not a pointer that converts to the kernel's pointer "
                    "parameter (see the parameter and argument types in the instantiation above)");
      const P p = a;
      const Use use = std::is_const_v<std::remove_pointer_t<P>> ? Use::in : Use::inout;
      return {CallArg::Kind::pointer, use, p, KernelArg::value(p)};
    }
  } else {
    static_assert(!is_annotated<A>::value,
                  "hdsm::call: in/out/inout annotate pointer arguments; this kernel parameter is a value");
    static_assert(std::is_convertible_v<A, P>,
                  "hdsm::call: the argument does not convert to the kernel's parameter type (see the "
                  "parameter and argument types in the instantiation above)");
    static_assert(std::is_trivially_copyable_v<P>, "kernel parameters must be trivially copyable");
    const P v = static_cast<P>(a);
    return {CallArg::Kind::value, Use::inout, nullptr, KernelArg::value(v)};
  }
}

}  // namespace detail

template <class... P, class... A>
void Runtime::call(const KernelOf<P...>& kernel, const Launch& launch, A&&... args) {
  if constexpr (sizeof...(P) != sizeof...(A)) {
    static_assert(detail::always_false<KernelOf<P...>>,
                  "hdsm::call: the number of arguments differs from the kernel's parameters");
  } else if constexpr ((detail::is_container_ref<std::decay_t<A>> || ...)) {
    // Containers: on the default device, synchronized at host accesses of the containers.
    const auto packed = detail::pack_typed_launch<P...>(static_cast<const std::decay_t<A>&>(args)...);
    detail::launch_containers(*this, static_cast<unsigned>(default_device().properties().index), kernel,
                              launch, packed);
  } else {
    const std::array<detail::CallArg, sizeof...(A)> packed{
        detail::typed_call_arg<P>(static_cast<const std::decay_t<A>&>(args))...};
    call_args(kernel, launch, packed);
  }
}

template <class T>
T* Runtime::alloc(std::size_t n, int device) {
  static_assert(std::is_trivially_copyable_v<T>, "shared objects hold trivially copyable elements");
  return static_cast<T*>(alloc(detail::bytes_of<T>(n), device));
}

template <class T>
T* Runtime::safe_alloc(std::size_t n, int device) {
  return alloc<T>(n, device);
}

template <class T>
T* Runtime::safe(T* p) const {
  return static_cast<T*>(safe(static_cast<const void*>(p)));
}

template <class... A>
void Runtime::call(const Kernel& kernel, const Launch& launch, A&&... args) {
  if constexpr ((detail::is_container_ref<std::decay_t<A>> || ...)) {
    const auto packed = detail::pack_launch(static_cast<const std::decay_t<A>&>(args)...);
    detail::launch_containers(*this, static_cast<unsigned>(default_device().properties().index), kernel,
                              launch, packed);
  } else {
    const std::array<detail::CallArg, sizeof...(A)> packed{detail::call_arg(std::decay_t<A>(args))...};
    call_args(kernel, launch, packed);
  }
}

/// The same calls on the default runtime (Runtime::instance()).
inline void* alloc(std::size_t bytes, int device = -1) { return Runtime::instance().alloc(bytes, device); }
template <class T>
T* alloc(std::size_t n, int device = -1) {
  return Runtime::instance().alloc<T>(n, device);
}
inline void free(void* p) { detail::free_in_default_runtime(p); }
inline void* safe_alloc(std::size_t bytes, int device = -1) {
  return Runtime::instance().safe_alloc(bytes, device);
}
template <class T>
T* safe_alloc(std::size_t n, int device = -1) {
  return Runtime::instance().safe_alloc<T>(n, device);
}
/// The device address of `p` (Runtime::safe), typed: `node->next = hdsm::safe(next_node)`.
template <class T>
T* safe(T* p) {
  return Runtime::instance().safe(p);
}
template <class... A>
void call(const Kernel& kernel, const Launch& launch, A&&... args) {
  Runtime::instance().call(kernel, launch, std::forward<A>(args)...);
}
template <class... P, class... A>
void call(const KernelOf<P...>& kernel, const Launch& launch, A&&... args) {
  Runtime::instance().call(kernel, launch, std::forward<A>(args)...);
}
inline void sync() { Runtime::instance().sync(); }
inline void* memcpy(void* dst, const void* src, std::size_t n) {
  return Runtime::instance().memcpy(dst, src, n);
}
inline void* memmove(void* dst, const void* src, std::size_t n) {
  return Runtime::instance().memmove(dst, src, n);
}
inline Event memcpy_async(void* dst, const void* src, std::size_t n) {
  return Runtime::instance().memcpy_async(dst, src, n);
}
inline void* memset(void* dst, int value, std::size_t n) { return Runtime::instance().memset(dst, value, n); }

/// Frees a shared object of its runtime (nullptr: the default one).
struct SharedDeleter {
  Runtime* runtime = nullptr;
  void operator()(const void* p) const {
    if (runtime != nullptr)
      runtime->free(const_cast<void*>(p));
    else
      detail::free_in_default_runtime(const_cast<void*>(p));
  }
};

template <class T>
using unique_ptr = std::unique_ptr<T[], SharedDeleter>;

template <class T>
unique_ptr<T> make_unique(Runtime& runtime, std::size_t n, int device = -1) {
  return unique_ptr<T>(runtime.alloc<T>(n, device), SharedDeleter{&runtime});
}
template <class T>
unique_ptr<T> make_unique(std::size_t n, int device = -1) {
  return unique_ptr<T>(alloc<T>(n, device), SharedDeleter{});
}
template <class T>
std::shared_ptr<T[]> make_shared(Runtime& runtime, std::size_t n, int device = -1) {
  return std::shared_ptr<T[]>(runtime.alloc<T>(n, device), SharedDeleter{&runtime});
}
template <class T>
std::shared_ptr<T[]> make_shared(std::size_t n, int device = -1) {
  return std::shared_ptr<T[]>(alloc<T>(n, device), SharedDeleter{});
}

}  // namespace hdsm

HDSM_VISIBLE_END
