// Cooperative kernels: every thread of a block is a Boost.Context fiber on a pooled stack. The
// threads still running form a ring in rank order; ThreadCtx::sync() switches straight to the next
// thread of the ring, and a finishing thread leaves the ring and does the same. A round trip of
// the ring is therefore exactly one barrier phase: when thread i is resumed from its sync(), every
// other live thread has reached its own sync() or finished. The block's scheduler only starts the
// ring and gets control back from the last thread to finish. Fibers are created once per worker
// and parked between blocks, so a block costs no fiber creation.
//
// Boost 1.74's fcontext fibers know nothing of sanitizers, so every switch is announced to ASan
// (stack bounds, fake stacks) and TSan. For TSan all cooperative threads of a worker share one
// fiber context: they run one at a time on one OS thread and hand over to each other directly, so a
// context per thread would find nothing more while making every switch cost O(threads) in TSan's
// vector clocks; only switches between the scheduler and the threads change context. TSan keeps a
// shadow call stack per context: in TSan builds every switch goes through the one non-inlined
// switch_fiber(), so the frames a switch enters on one side are the frames it leaves on the other.
// Two switches happen inside Boost where they cannot be announced: creation jumps into the new
// stack and straight back (so it is done inside the announced first switch to the fiber; outside,
// ASan would give the new stack's first frame a fake frame of the creator's stack), and a fiber
// that ends jumps to its resumer after our function returned (the threads' context stays current
// until the resumer is back).
#include "exec/executor_impl.hpp"

#include "os/process.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <cxxabi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <exception>
#include <string>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define HDSM_FIBER_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define HDSM_FIBER_TSAN 1
#endif

namespace hdsm::exec {

StackPool::StackPool(unsigned worker, std::size_t stack_bytes)
    : worker_(worker), page_(static_cast<std::size_t>(::sysconf(_SC_PAGESIZE))) {
  stack_bytes_ = (stack_bytes + page_ - 1) / page_ * page_;
  // The guard below each stack is as large as the stack (64 KiB to 1 MiB): a frame larger than a page
  // (a local array; GCC probes frames only with -fstack-clash-protection) would step over a one-page
  // guard into the stack of the fiber below and overwrite its frames without a fault. Address space
  // only.
  guard_ = std::clamp(stack_bytes_, std::size_t{64} << 10, std::size_t{1} << 20) / page_ * page_;
  // With an odd page count consecutive stacks also differ in the address bits above the page.
  std::size_t pages = guard_ / page_ + stack_bytes_ / page_ + 1;
  if (pages % 2 == 0) ++pages;
  stride_ = pages * page_;
}

StackPool::~StackPool() {
  for (const Region& r : regions_) {
#if defined(HDSM_FIBER_ASAN)
    // Frames that never returned (Boost's fiber entry) leave poisoned shadow behind; a later
    // mapping at the same address must not inherit it.
    ASAN_UNPOISON_MEMORY_REGION(r.base, r.bytes);
#endif
    ::munmap(r.base, r.bytes);
  }
}

void StackPool::reserve(std::size_t count) {
  if (count <= bottoms_.size()) return;
  const std::size_t add = count - bottoms_.size();
  bottoms_.reserve(count);
  regions_.reserve(regions_.size() + 1);
  const std::string object = fmt::format("fiber stacks of worker {}", worker_);
  // Inaccessible first, then each stack opened: the guards are never writable, so they are not
  // charged as committed memory where the kernel ignores MAP_NORESERVE (vm.overcommit_memory=2).
  void* base = ::mmap(nullptr, add * stride_, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (base == MAP_FAILED) throw SystemError("mmap", object, errno);
  auto* bytes = static_cast<std::byte*>(base);
  for (std::size_t i = 0; i < add; ++i) {
    if (::mprotect(bytes + i * stride_ + guard_, stride_ - guard_, PROT_READ | PROT_WRITE) != 0) {
      const int err = errno;
      ::munmap(base, add * stride_);
      throw SystemError("mprotect", object, err);
    }
  }
  regions_.push_back(Region{base, add * stride_});
  for (std::size_t i = 0; i < add; ++i) bottoms_.push_back(bytes + i * stride_ + guard_);
}

namespace {

using Fiber = boost::context::fiber;
constexpr std::uint32_t kScheduler = FiberWorker::kScheduler;

// Thrown by sync() in the other threads of a block whose thread threw, so they unwind cleanly.
// Deliberately not a std::exception: kernels catching std::exception must not swallow it.
struct BlockAbort {};

// The pool owns the stacks; a finished fiber gives its stack back by doing nothing.
struct BorrowedStack {
  void deallocate(boost::context::stack_context&) noexcept {}
};

struct CoopBlock {
  const BlockRun& run;
  FunctionRef<void(ThreadCtx&)> fn;
  FiberWorker& worker;
  std::size_t shared_used;
  bool aborting = false;  // a thread threw: the others unwind, unstarted ones do not run
  std::exception_ptr error;
};

CoopBlock& block_of(ThreadCtx& ctx) { return *static_cast<CoopBlock*>(ctx.block_state()); }

std::string thread_name(const ThreadCtx& t) {
  return fmt::format("thread ({}, {}, {}) of block ({}, {}, {})", t.idx.x, t.idx.y, t.idx.z, t.block.x,
                     t.block.y, t.block.z);
}

void* current_tsan_fiber() {
#if defined(HDSM_FIBER_TSAN)
  return __tsan_get_current_fiber();
#else
  return nullptr;
#endif
}

// Boost resumes a fiber with an indirect jump rather than a return, so every function return
// between the switch and the code that called sync() is mispredicted once per switch: the
// switch path is kept inline. Only TSan builds need switch_fiber out of line (see the top).
#if defined(HDSM_FIBER_TSAN)
#define HDSM_SWITCH_PATH [[gnu::noinline]]
#else
#define HDSM_SWITCH_PATH [[gnu::always_inline]] inline
#endif

HDSM_SWITCH_PATH Fiber switch_fiber(Fiber&& to) { return std::move(to).resume(); }

// Keeps the continuation of whoever switched to us (worker.from) where its resumer will look.
[[gnu::always_inline]] inline void adopt(FiberWorker& w, Fiber&& from) {
  if (w.from == kScheduler)
    w.sched = std::move(from);
  else
    w.fibers[w.from] = std::move(from);
}

struct FiberMain {
  FiberWorker* worker;
  std::uint32_t index;
  Fiber operator()(Fiber&& from) const;
};

// Creates the fiber of thread `to` on its pooled stack (it starts running at the next switch).
[[gnu::noinline]] void create_fiber(FiberWorker& w, std::uint32_t to) {
  std::byte* const bottom = w.stacks.bottom(to);
  const std::size_t size = w.stacks.size(to);
#if defined(HDSM_FIBER_ASAN)
  ASAN_UNPOISON_MEMORY_REGION(bottom, size);
#endif
  boost::context::stack_context sctx;
  sctx.sp = bottom + size;
  sctx.size = size;
  w.fibers[to] = Fiber(std::allocator_arg, boost::context::preallocated(sctx.sp, size, sctx), BorrowedStack{},
                       FiberMain{&w, to});
}

// Switches from `self` (a thread or the scheduler) to `to`; returns when some thread or the
// scheduler switches back to `self`. The first switch to a thread also creates its fiber.
[[gnu::always_inline]] inline void switch_to(FiberWorker& w, std::uint32_t self, std::uint32_t to) {
  Fiber& target = to == kScheduler ? w.sched : w.fibers[to];
#if defined(HDSM_FIBER_ASAN)
  void* fake_stack = nullptr;
  if (to == kScheduler)
    __sanitizer_start_switch_fiber(&fake_stack, w.sched_stack_bottom, w.sched_stack_size);
  else
    __sanitizer_start_switch_fiber(&fake_stack, w.stacks.bottom(to), w.stacks.size(to));
#endif
#if defined(HDSM_FIBER_TSAN)
  if (self == kScheduler) {
    if (w.tsan_threads == nullptr) w.tsan_threads = __tsan_create_fiber(0);
    __tsan_switch_to_fiber(w.tsan_threads, 0);
  } else if (to == kScheduler) {
    __tsan_switch_to_fiber(w.tsan_resumer, 0);
  }
#endif
  if (!target) create_fiber(w, to);
  w.from = self;
  Fiber back = switch_fiber(std::move(target));
#if defined(HDSM_FIBER_ASAN)
  const void* from_bottom = nullptr;
  std::size_t from_size = 0;
  __sanitizer_finish_switch_fiber(fake_stack, &from_bottom, &from_size);
  if (self != kScheduler && w.from == kScheduler) {
    w.sched_stack_bottom = from_bottom;
    w.sched_stack_size = from_size;
  }
#endif
  if (!back) {
    // Only ~FiberWorker resumes a fiber that then ends.
#if defined(HDSM_FIBER_TSAN)
    __tsan_switch_to_fiber(w.tsan_resumer, 0);
#endif
    return;
  }
  adopt(w, std::move(back));
}

void run_thread(CoopBlock& b, std::uint32_t index) noexcept {
  const Launch& launch = *b.run.launch;
  const Dim3 bd = launch.block;
  const Dim3 idx{index % bd.x, index / bd.x % bd.y, index / bd.x / bd.y};
  ThreadCtx ctx(Thread{idx, b.run.block, bd, launch.grid}, &b);
  try {
    b.fn(ctx);
  } catch (const BlockAbort&) {
  } catch (abi::__forced_unwind&) {
    os::user_code_ended_its_thread("a cooperative kernel's thread");
  } catch (...) {
    if (!b.error) b.error = std::current_exception();
    b.aborting = true;
  }
}

// Takes thread i out of the ring; returns who runs next (the scheduler once the ring is empty).
std::uint32_t leave_ring(FiberWorker& w, std::uint32_t i) {
  const std::uint32_t n = w.next[i], p = w.prev[i];
  if (n == i) return kScheduler;
  w.next[p] = n;
  w.prev[n] = p;
  return n;
}

Fiber FiberMain::operator()(Fiber&& from) const {
  FiberWorker& w = *worker;
#if defined(HDSM_FIBER_ASAN)
  const void* from_bottom = nullptr;
  std::size_t from_size = 0;
  __sanitizer_finish_switch_fiber(nullptr, &from_bottom, &from_size);
  if (w.from == kScheduler) {
    w.sched_stack_bottom = from_bottom;
    w.sched_stack_size = from_size;
  }
#endif
  adopt(w, std::move(from));
  while (w.block != nullptr) {
    CoopBlock& b = *static_cast<CoopBlock*>(w.block);
    if (!b.aborting) run_thread(b, index);
    switch_to(w, index, leave_ring(w, index));
  }
#if defined(HDSM_FIBER_ASAN)
  __sanitizer_start_switch_fiber(nullptr, w.sched_stack_bottom, w.sched_stack_size);
#endif
  return std::move(w.sched);
}

}  // namespace

FiberWorker::~FiberWorker() {
  block = nullptr;
  tsan_resumer = current_tsan_fiber();
  for (std::uint32_t i = 0; i < fibers.size(); ++i)
    if (fibers[i]) switch_to(*this, kScheduler, i);
#if defined(HDSM_FIBER_TSAN)
  if (tsan_threads != nullptr) __tsan_destroy_fiber(tsan_threads);
#endif
}

}  // namespace hdsm::exec

namespace hdsm::detail {

void run_cooperative(const BlockRun& run, FunctionRef<void(ThreadCtx&)> thread_fn) {
  exec::FiberWorker& worker = run.executor->impl().fibers(run.worker);
  worker.prepare(static_cast<std::uint32_t>(run.launch->block.volume()));
  exec::CoopBlock b{run, thread_fn, worker, run.launch->shared_bytes};
  worker.block = &b;
  worker.tsan_resumer = exec::current_tsan_fiber();
  exec::switch_to(worker, exec::kScheduler, 0);  // back when the last thread has finished
  worker.block = nullptr;
  if (b.error) std::rethrow_exception(b.error);
}

void cooperative_sync(ThreadCtx& ctx) {
  exec::CoopBlock& b = exec::block_of(ctx);
  if (b.aborting) throw exec::BlockAbort{};
  const std::uint32_t self = ctx.rank();
  const std::uint32_t next = b.worker.next[self];
  if (next != self) exec::switch_to(b.worker, self, next);
  if (b.aborting) throw exec::BlockAbort{};
}

void* cooperative_dynamic_shared(const ThreadCtx& ctx) {
  const exec::CoopBlock& b = *static_cast<const exec::CoopBlock*>(ctx.block_state());
  return b.run.launch->shared_bytes != 0 ? b.run.shared : nullptr;  // none: not the first shared<T>()
}

void* cooperative_shared(ThreadCtx& ctx, std::size_t bytes, std::size_t align) {
  exec::CoopBlock& b = exec::block_of(ctx);
  if (b.aborting) throw exec::BlockAbort{};
  const unsigned k = ctx.next_shared_call();
  auto& allocs = b.worker.shared_allocs;
  if (k < allocs.size()) {
    const exec::SharedAlloc& a = allocs[k];
    if (a.bytes != bytes || a.align != align)
      throw KernelFailure(
          fmt::format("{} asks {} bytes aligned to {} in its shared allocation #{}, but the "
                      "block's first thread to get there asked {} bytes aligned to {}; every "
                      "thread's k-th t.shared<T>(n) must ask the same T and n",
                      exec::thread_name(ctx), bytes, align, k, a.bytes, a.align));
    return b.run.shared + a.offset;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(b.run.shared);
  const std::uintptr_t at = (base + b.shared_used + align - 1) / align * align - base;
  if (at > b.run.shared_capacity || bytes > b.run.shared_capacity - at)
    throw_shared_overflow(b.run, bytes > SIZE_MAX - at ? SIZE_MAX : at + bytes, "shared");
  b.shared_used = at + bytes;
  allocs.push_back(exec::SharedAlloc{at, bytes, align});
  return b.run.shared + at;
}

}  // namespace hdsm::detail
