// libhdsm_preload.so: `LD_PRELOAD=libhdsm_preload.so ./app` routes libc's memcpy, memmove and memset
// on shared memory through hdsm (seed 000 §4.4: a device fill or copy for blocks whose host copy is
// invalid, no fault), for programs that use hdsm only through its C API, or find it at run time. It
// defines libhdsm.so's I/O calls again (interposed_symbols.inc), for a program that does not link
// libhdsm.so: there it comes after libc. A call on host memory pays one range check against the
// arenas (SharedRanges::Bounds::holds) and goes to libc's function, found with dlsym(RTLD_NEXT).
#undef _FORTIFY_SOURCE  // the fortified headers define the functions below inline

#include <hdsm/export.h>

#include "api/interpose.hpp"
#include "os/signal_safe_io.hpp"
#include "runtime/shared_ranges.hpp"

#include <atomic>
#include <cstddef>
#include <cstdlib>

#include <dlfcn.h>

namespace {

using CopyFn = void* (*)(void*, const void*, std::size_t) noexcept;
using SetFn = void* (*)(void*, int, std::size_t) noexcept;

// For calls made while dlsym finds libc's functions (dlsym copies memory itself) and by another
// thread meanwhile. Through volatile, so the compiler cannot turn the loops back into memcpy calls.
void* bootstrap_move(void* dst, const void* src, std::size_t n) noexcept {
  auto* d = static_cast<volatile unsigned char*>(dst);
  const auto* s = static_cast<const volatile unsigned char*>(src);
  if (d < s) {
    for (std::size_t i = 0; i < n; ++i) d[i] = s[i];
  } else {
    for (std::size_t i = n; i-- > 0;) d[i] = s[i];
  }
  return dst;
}

void* bootstrap_set(void* dst, int value, std::size_t n) noexcept {
  auto* d = static_cast<volatile unsigned char*>(dst);
  for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<unsigned char>(value);
  return dst;
}

// libc's functions once resolved; until then the first call resolves them.
void* first_memcpy(void* dst, const void* src, std::size_t n) noexcept;
void* first_memmove(void* dst, const void* src, std::size_t n) noexcept;
void* first_memset(void* dst, int value, std::size_t n) noexcept;
constinit std::atomic<CopyFn> libc_memcpy{first_memcpy}, libc_memmove{first_memmove};
constinit std::atomic<SetFn> libc_memset{first_memset};
constinit std::atomic<bool> resolving{false};

void* next_symbol(const char* name) noexcept {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    hdsm::os::signal_safe::Line()
        .str("hdsm preload: dlsym(RTLD_NEXT, ")
        .str(name)
        .str(") found no definition after libhdsm_preload.so\n")
        .write();
    std::abort();
  }
  return f;
}

void resolve() noexcept {
  bool idle = false;
  if (!resolving.compare_exchange_strong(idle, true)) return;  // under way: the loops serve meanwhile
  libc_memmove.store(reinterpret_cast<CopyFn>(next_symbol("memmove")), std::memory_order_release);
  libc_memset.store(reinterpret_cast<SetFn>(next_symbol("memset")), std::memory_order_release);
  libc_memcpy.store(reinterpret_cast<CopyFn>(next_symbol("memcpy")), std::memory_order_release);
}

[[gnu::constructor]] void resolve_at_start() { resolve(); }

void* first_memcpy(void* dst, const void* src, std::size_t n) noexcept {
  resolve();
  const CopyFn f = libc_memcpy.load(std::memory_order_acquire);
  return f != first_memcpy ? f(dst, src, n) : bootstrap_move(dst, src, n);
}

void* first_memmove(void* dst, const void* src, std::size_t n) noexcept {
  resolve();
  const CopyFn f = libc_memmove.load(std::memory_order_acquire);
  return f != first_memmove ? f(dst, src, n) : bootstrap_move(dst, src, n);
}

void* first_memset(void* dst, int value, std::size_t n) noexcept {
  resolve();
  const SetFn f = libc_memset.load(std::memory_order_acquire);
  return f != first_memset ? f(dst, value, n) : bootstrap_set(dst, value, n);
}

// A range that starts in host memory and runs into an arena is libc's: its access faults there
// and the fault handler serves it, as for any other access.
hdsm::detail::SharedRanges::Bounds bounds() noexcept { return hdsm::detail::shared_ranges.bounds(); }

// The slow paths stay out of line, so the fast path needs no saved register and ends in a jump to
// libc's function.
[[gnu::noinline, gnu::cold]] void* move_slow(void* dst, const void* src, std::size_t n,
                                             std::atomic<CopyFn>& slot) noexcept {
  if (hdsm::api::shared_memmove(dst, src, n)) return dst;
  return slot.load(std::memory_order_acquire)(dst, src, n);
}

[[gnu::noinline, gnu::cold]] void* set_slow(void* dst, int value, std::size_t n) noexcept {
  if (hdsm::api::shared_memset(dst, value, n)) return dst;
  return libc_memset.load(std::memory_order_acquire)(dst, value, n);
}

}  // namespace

extern "C" {
HDSM_VISIBLE_BEGIN

// Tells libhdsm.so which definitions of its interposed calls are this library's (they forward to
// it): when this library comes after libhdsm.so in the lookup order, libhdsm.so takes libc's instead.
// A function, not a variable, which AddressSanitizer would give a symbol of its own.
void hdsm_preload_library() noexcept {}

[[noreturn]] void __chk_fail(void);

void* memcpy(void* __restrict dst, const void* __restrict src, std::size_t n) noexcept {
  const auto b = bounds();
  if (b.holds(dst) || b.holds(src)) [[unlikely]]
    return move_slow(dst, src, n, libc_memcpy);
  return libc_memcpy.load(std::memory_order_relaxed)(dst, src, n);
}

void* memmove(void* dst, const void* src, std::size_t n) noexcept {
  const auto b = bounds();
  if (b.holds(dst) || b.holds(src)) [[unlikely]]
    return move_slow(dst, src, n, libc_memmove);
  return libc_memmove.load(std::memory_order_relaxed)(dst, src, n);
}

void* memset(void* dst, int value, std::size_t n) noexcept {
  if (bounds().holds(dst)) [[unlikely]]
    return set_slow(dst, value, n);
  return libc_memset.load(std::memory_order_relaxed)(dst, value, n);
}

// What _FORTIFY_SOURCE builds call when the compiler knows the destination's size.
void* __memcpy_chk(void* dst, const void* src, std::size_t n, std::size_t dst_bytes) noexcept {
  if (n > dst_bytes) __chk_fail();
  return memcpy(dst, src, n);
}

void* __memmove_chk(void* dst, const void* src, std::size_t n, std::size_t dst_bytes) noexcept {
  if (n > dst_bytes) __chk_fail();
  return memmove(dst, src, n);
}

void* __memset_chk(void* dst, int value, std::size_t n, std::size_t dst_bytes) noexcept {
  if (n > dst_bytes) __chk_fail();
  return memset(dst, value, n);
}

HDSM_VISIBLE_END
}  // extern "C"

#include "api/interposed_symbols.inc"
#if !defined(__SANITIZE_THREAD__)
#include "api/interposed_signals.inc"
#endif
