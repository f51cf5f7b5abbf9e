// CUDA-like kernels for hdsm devices. A Kernel is a named bundle of per-backend bodies; the host
// body runs on the CPU grid executor (the sim device, host skeletons, the cluster runtime).
//
// Three ways to write a host body:
//   per_thread(name, [](const Thread& t, float* a, int n) {...})   no barrier: each block runs as
//       a plain loop over its threads, which the compiler can vectorize;
//   per_block(name, [](Block& b, float* a) { b.threads(...); b.threads(...); })   phases: every
//       threads() call is one phase and the end of a phase is a block barrier; values that live
//       across barriers go in b.shared<T>() or b.local<T>() (one T per thread);
//   cooperative(name, [](ThreadCtx& t, float* a) { ...; t.sync(); ... })   each thread is a fiber
//       and t.sync() is __syncthreads(); t.shared<T>(n) is a __shared__ array.
#pragma once

#include <hdsm/export.h>
#include <hdsm/config.hpp>
#include <hdsm/error.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

HDSM_VISIBLE_BEGIN
namespace hdsm {

struct Dim3 {
  std::uint32_t x = 1, y = 1, z = 1;
  constexpr Dim3() = default;
  constexpr Dim3(std::uint32_t x_, std::uint32_t y_ = 1, std::uint32_t z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr std::uint64_t volume() const { return std::uint64_t{x} * y * z; }
  friend constexpr bool operator==(const Dim3&, const Dim3&) = default;
};

/// Grid and block shape of one launch, plus dynamic shared memory per block.
struct Launch {
  Dim3 grid;
  Dim3 block;
  std::size_t shared_bytes = 0;
};

/// CUDA's launch limits, which every backend keeps so that a launch that runs on one runs on all.
inline constexpr std::uint64_t kMaxGridX = (std::uint64_t{1} << 31) - 1;
inline constexpr std::uint64_t kMaxGridYZ = 65535;
inline constexpr std::uint64_t kMaxBlockZ = 64;

/// A 1-D launch with enough blocks of `block` threads to cover `n` threads (the last block may
/// be partial: kernels check their index against n, as in CUDA).
/// InvalidArgument for a block of 0 threads, or for more blocks than a grid's x dimension holds
/// (kMaxGridX): a count that does not fit is an error, never a grid silently cut short.
constexpr Launch cover(std::uint64_t n, std::uint32_t block = 256) {
  if (block == 0) throw InvalidArgument("cover(" + std::to_string(n) + ", 0): a block of 0 threads");
  const std::uint64_t blocks = n == 0 ? 1 : n / block + (n % block != 0 ? 1 : 0);
  if (blocks > kMaxGridX)
    throw InvalidArgument("cover(" + std::to_string(n) + ", " + std::to_string(block) +
                          "): " + std::to_string(blocks) + " blocks, more than a grid's x dimension holds (" +
                          std::to_string(kMaxGridX) + "); use larger blocks or a 2-D grid");
  return Launch{Dim3{static_cast<std::uint32_t>(blocks)}, Dim3{block}, 0};
}

/// The CUDA built-ins of one thread: threadIdx, blockIdx, blockDim, gridDim.
struct Thread {
  Dim3 idx, block, block_dim, grid_dim;
  constexpr std::uint64_t global_x() const { return std::uint64_t{block.x} * block_dim.x + idx.x; }
  constexpr std::uint64_t global_y() const { return std::uint64_t{block.y} * block_dim.y + idx.y; }
  constexpr std::uint64_t global_z() const { return std::uint64_t{block.z} * block_dim.z + idx.z; }
  /// Linear index of the thread within its block.
  constexpr std::uint32_t rank() const { return (idx.z * block_dim.y + idx.y) * block_dim.x + idx.x; }
};

namespace exec {
class Executor;
}

/// A non-owning reference to a callable (no allocation on the block path).
template <class Sig>
class FunctionRef;
template <class R, class... A>
class FunctionRef<R(A...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, FunctionRef>>>
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor)
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))), call_([](void* o, A... a) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<A>(a)...);
        }) {}
  R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

/// What the executor hands to the body of one block.
struct BlockRun {
  Dim3 block;            // blockIdx
  const Launch* launch;  // grid and block shape
  std::byte* shared;     // this block's shared memory (dynamic part first)
  std::size_t shared_capacity;
  std::byte* scratch;  // per-worker scratch for Block::local
  std::size_t scratch_capacity;
  unsigned worker;  // index of the executing worker thread
  exec::Executor* executor;
};

class ThreadCtx;

namespace detail {
/// Run `fn` once for every block of `launch`, in parallel on the executor; rethrows the first
/// exception a block threw after all blocks have stopped.
void for_each_block(exec::Executor& executor, const Launch& launch, FunctionRef<void(const BlockRun&)> fn);
/// Run every thread of one block as a fiber; ThreadCtx::sync() switches to the next fiber.
void run_cooperative(const BlockRun& run, FunctionRef<void(ThreadCtx&)> thread_fn);
/// Block-shared allocation for cooperative threads: the k-th call of every thread of a block
/// returns the same memory.
void* cooperative_shared(ThreadCtx& ctx, std::size_t bytes, std::size_t align);
void* cooperative_dynamic_shared(const ThreadCtx& ctx);
void cooperative_sync(ThreadCtx& ctx);
[[noreturn]] void throw_shared_overflow(const BlockRun& run, std::size_t bytes, const char* what);
}  // namespace detail

/// The block of a per_block (phases) kernel.
class Block {
 public:
  explicit Block(const BlockRun& run) : run_(run), shared_used_(run.launch->shared_bytes) {}

  const Dim3& index() const { return run_.block; }
  const Dim3& dim() const { return run_.launch->block; }
  const Dim3& grid_dim() const { return run_.launch->grid; }
  std::uint32_t size() const { return static_cast<std::uint32_t>(run_.launch->block.volume()); }

  /// One phase: f(const Thread&) for every thread of the block. Consecutive phases are separated
  /// by a block barrier.
  template <class F>
  void threads(F&& f) const {
    const Dim3 bd = run_.launch->block, gd = run_.launch->grid, b = run_.block;
    for (std::uint32_t z = 0; z < bd.z; ++z)
      for (std::uint32_t y = 0; y < bd.y; ++y)
        for (std::uint32_t x = 0; x < bd.x; ++x) f(Thread{Dim3{x, y, z}, b, bd, gd});
  }

  /// A block-shared array of n T. The memory is raw (nothing is constructed) and its contents are
  /// undefined at block start, as with __shared__.
  template <class T>
  T* shared(std::size_t n = 1) {
    return static_cast<T*>(
        bump(run_.shared, run_.shared_capacity, shared_used_, detail::bytes_of<T>(n), alignof(T), "shared"));
  }
  /// One T per thread, value-initialised, for thread-private values that live across phases.
  template <class T>
  std::span<T> local() {
    static_assert(std::is_trivially_destructible_v<T>, "Block::local needs a trivially destructible T");
    T* p = static_cast<T*>(bump(run_.scratch, run_.scratch_capacity, local_used_, detail::bytes_of<T>(size()),
                                alignof(T), "local"));
    for (std::uint32_t i = 0; i < size(); ++i) new (p + i) T();
    return {p, size()};
  }
  /// The dynamic shared memory of the launch (Launch::shared_bytes); null when it has none (the
  /// address would be that of the first shared<T>() array).
  void* dynamic_shared() const { return run_.launch->shared_bytes != 0 ? run_.shared : nullptr; }

 private:
  void* bump(std::byte* base, std::size_t cap, std::size_t& used, std::size_t bytes, std::size_t align,
             const char* what) const {
    const std::size_t at = (used + align - 1) / align * align;
    // `bytes` is SIZE_MAX for a size that overflows: compared without adding, so nothing wraps.
    if (at > cap || bytes > cap - at)
      detail::throw_shared_overflow(run_, bytes > SIZE_MAX - at ? SIZE_MAX : at + bytes, what);
    used = at + bytes;
    return base + at;
  }
  const BlockRun& run_;
  std::size_t shared_used_;
  std::size_t local_used_ = 0;
};

/// One thread of a cooperative kernel: the CUDA built-ins plus __syncthreads and __shared__.
class ThreadCtx : public Thread {
 public:
  ThreadCtx(const Thread& t, void* block_state) : Thread(t), block_state_(block_state) {}
  /// Block barrier: returns when every thread of the block has called it.
  void sync() { detail::cooperative_sync(*this); }
  /// A block-shared array of n T; every thread's k-th call returns the same array.
  template <class T>
  T* shared(std::size_t n = 1) {
    return static_cast<T*>(detail::cooperative_shared(*this, detail::bytes_of<T>(n), alignof(T)));
  }
  /// The dynamic shared memory of the launch (Launch::shared_bytes), as CUDA's extern __shared__;
  /// null when the launch has none.
  void* dynamic_shared() const { return detail::cooperative_dynamic_shared(*this); }
  void* block_state() const { return block_state_; }
  unsigned next_shared_call() { return shared_calls_++; }

 private:
  void* block_state_;
  unsigned shared_calls_ = 0;
};

/// Arguments of one launch as the host body receives them: pointers to the argument values (like
/// cudaLaunchKernel's void** args) and their sizes, so a body can check what it was given.
struct ArgPack {
  void* const* values;
  const std::size_t* sizes;
  std::size_t count;
};

using HostBody = std::function<void(exec::Executor&, const Launch&, const ArgPack&)>;

/// A named bundle of per-backend bodies. A backend without a body for a kernel refuses to launch
/// it with an error naming the kernel and the backend.
struct Kernel {
  std::string name;
  HostBody host;              // sim and host execution
  std::string opencl_source;  // OpenCL C (opencl backend)
  const void* cuda_function =
      nullptr;  // a __global__ function's cudaKernel_t (cuda backend; <hdsm/cuda.hpp>)
  /// The CUDA body found late: where cuda_function is null, the cuda backend calls this at every
  /// launch and uses the cudaKernel_t it returns (nullptr: no CUDA body). Getting a cudaKernel_t
  /// needs a CUDA driver, so a kernel that also runs where there is none (sim, OpenCL) names its
  /// __global__ function here instead: hdsm::cuda_lookup<f> in <hdsm/cuda.hpp> resolves it on the
  /// first call and keeps it.
  const void* (*cuda_lookup)() = nullptr;
};

/// A kernel that knows the types of its parameters (what per_thread, per_block and cooperative
/// return): hdsm::call checks and converts its arguments against them at compile time. It is a
/// Kernel, so whatever takes a Kernel (queues, the untyped call) takes it too; a plain Kernel is the
/// untyped form, for kernels composed at run time.
template <class... Params>
struct KernelOf : Kernel {
  using Parameters = std::tuple<Params...>;
};

/// `kernel` with `source` as its body on OpenCL devices: OpenCL C that defines a __kernel function
/// named as the kernel, taking the same arguments in order (pointers as __global pointers, values by
/// value with the same layout).
template <class K>
requires std::derived_from<K, Kernel> K with_opencl(std::string_view source, K kernel) {
  kernel.opencl_source = std::string(source);
  return kernel;
}

/// `kernel` with its body on CUDA devices given by `lookup` (hdsm::cuda_lookup<f> in <hdsm/cuda.hpp>),
/// resolved at its first launch on a CUDA device. A kernel needs none where its __global__ function
/// is registered under the kernel's name (HDSM_CUDA_KERNEL in <hdsm/cuda.hpp>).
template <class K>
requires std::derived_from<K, Kernel> K with_cuda(const void* (*lookup)(), K kernel) {
  kernel.cuda_lookup = lookup;
  return kernel;
}

namespace detail {

template <class T>
struct callable_args : callable_args<decltype(&T::operator())> {};
template <class C, class R, class First, class... A>
struct callable_args<R (C::*)(First, A...) const> {
  using args = std::tuple<std::decay_t<A>...>;
};
template <class C, class R, class First, class... A>
struct callable_args<R (C::*)(First, A...)> {
  using args = std::tuple<std::decay_t<A>...>;
};
template <class R, class First, class... A>
struct callable_args<R (*)(First, A...)> {
  using args = std::tuple<std::decay_t<A>...>;
};

[[noreturn]] void throw_arg_mismatch(const std::string& kernel, std::size_t index, std::size_t got,
                                     std::size_t expected, bool count);

template <class Tuple, std::size_t... I>
Tuple unpack(const std::string& kernel, const ArgPack& pack, std::index_sequence<I...>) {
  if (pack.count != sizeof...(I)) throw_arg_mismatch(kernel, 0, pack.count, sizeof...(I), true);
  Tuple out;
  (
      [&] {
        using T = std::tuple_element_t<I, Tuple>;
        static_assert(std::is_trivially_copyable_v<T>, "kernel arguments must be trivially copyable");
        constexpr std::size_t size = sizeof(T);  // NOLINT(bugprone-sizeof-expression): T may be a pointer
        if (pack.sizes[I] != size) throw_arg_mismatch(kernel, I, pack.sizes[I], size, false);
        std::memcpy(&std::get<I>(out), pack.values[I], size);
      }(),
      ...);
  return out;
}

template <class Tuple>
struct kernel_of;
template <class... P>
struct kernel_of<std::tuple<P...>> {
  using type = KernelOf<P...>;
};
/// The typed kernel of a body F(first, params...).
template <class F>
using kernel_for = typename kernel_of<typename callable_args<F>::args>::type;

template <class F>
auto unpack_for(const std::string& kernel, const ArgPack& pack) {
  using Tuple = typename callable_args<F>::args;
  return unpack<Tuple>(kernel, pack, std::make_index_sequence<std::tuple_size_v<Tuple>>{});
}

}  // namespace detail

/// A kernel whose threads never wait for each other: f(const Thread&, args...).
template <class F>
detail::kernel_for<F> per_thread(std::string name, F f) {
  detail::kernel_for<F> k;
  k.name = name;
  k.host = [f, name = std::move(name)](exec::Executor& ex, const Launch& launch, const ArgPack& pack) {
    auto args = detail::unpack_for<F>(name, pack);
    detail::for_each_block(ex, launch, [&](const BlockRun& run) {
      const Dim3 bd = launch.block, gd = launch.grid, b = run.block;
      std::apply(
          [&](const auto&... a) {
            for (std::uint32_t z = 0; z < bd.z; ++z)
              for (std::uint32_t y = 0; y < bd.y; ++y)
                for (std::uint32_t x = 0; x < bd.x; ++x) f(Thread{Dim3{x, y, z}, b, bd, gd}, a...);
          },
          args);
    });
  };
  return k;
}

/// A kernel written block by block in phases: f(Block&, args...).
template <class F>
detail::kernel_for<F> per_block(std::string name, F f) {
  detail::kernel_for<F> k;
  k.name = name;
  k.host = [f, name = std::move(name)](exec::Executor& ex, const Launch& launch, const ArgPack& pack) {
    auto args = detail::unpack_for<F>(name, pack);
    detail::for_each_block(ex, launch, [&](const BlockRun& run) {
      Block block(run);
      std::apply([&](const auto&... a) { f(block, a...); }, args);
    });
  };
  return k;
}

/// A kernel with CUDA's thread model: f(ThreadCtx&, args...) with t.sync() barriers.
template <class F>
detail::kernel_for<F> cooperative(std::string name, F f) {
  detail::kernel_for<F> k;
  k.name = name;
  k.host = [f, name = std::move(name)](exec::Executor& ex, const Launch& launch, const ArgPack& pack) {
    auto args = detail::unpack_for<F>(name, pack);
    detail::for_each_block(ex, launch, [&](const BlockRun& run) {
      detail::run_cooperative(run,
                              [&](ThreadCtx& t) { std::apply([&](const auto&... a) { f(t, a...); }, args); });
    });
  };
  return k;
}

/// Argument values packed for a direct host launch (tests, host skeletons).
template <class... A>
class HostArgs {
 public:
  explicit HostArgs(const A&... a) : values_(a...) {
    std::size_t i = 0;
    // NOLINTNEXTLINE(bugprone-sizeof-expression): an argument may be a pointer
    std::apply([&](auto&... v) { ((ptrs_[i] = &v, sizes_[i] = sizeof(v), ++i), ...); }, values_);
  }
  ArgPack pack() const { return ArgPack{ptrs_, sizes_, sizeof...(A)}; }

 private:
  std::tuple<A...> values_;
  void* ptrs_[sizeof...(A) + 1] = {};
  std::size_t sizes_[sizeof...(A) + 1] = {};
};

}  // namespace hdsm

HDSM_VISIBLE_END
