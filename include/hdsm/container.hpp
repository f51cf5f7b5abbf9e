// What vectors and matrices share: access modes, statistics, and the untyped core that keeps a
// container's main copy in host memory and its device copies coherent.
#pragma once

#include <hdsm/export.h>
#include <hdsm/device.hpp>

#include <hdsm/kernel.hpp>
#include <hdsm/runtime.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm {

/// How an access uses a range of a container.
enum class Access : std::uint8_t { read, write, read_write };

const char* to_string(Access access);

/// Which coherence rules a container follows. `improved` (the default) tracks which copies are current
/// and never uses a stale one. `initial` is the simpler scheme it replaced, kept for comparisons: it
/// can read stale data when device copies overlap. `none` keeps nothing between calls: each call
/// copies its operands to the device, waits, writes them back and frees the device copies (no
/// communication or memory optimization, the baseline the others are measured against).
/// HDSM_CONTAINER_MECHANISM sets the default.
enum class Mechanism : std::uint8_t { initial, improved, none };

/// What a container moved and allocated (one container's, or the sum over a runtime's containers).
struct ContainerStats {
  std::uint64_t host_to_device_bytes = 0;
  std::uint64_t device_to_host_bytes = 0;
  std::uint64_t on_device_bytes = 0;  // device to device on one device
  std::uint64_t peer_bytes = 0;       // device to device between peers
  std::uint64_t copies = 0;           // copy operations of all four kinds
  std::uint64_t device_allocations = 0;
  std::uint64_t device_allocated_bytes = 0;  // bytes of all device copies ever allocated
  std::uint64_t evictions = 0;
  std::uint64_t write_backs = 0;  // device copies written back to the main copy
  ContainerStats& operator+=(const ContainerStats& other);
};

/// `rows` runs of `cols` elements, `stride` elements apart, the first at element `offset`: a submatrix
/// of a matrix with rows `stride` long, or (rows == 1) a range of a vector. A device copy of an extent
/// holds its elements contiguously, run after run.
struct Extent {
  std::size_t offset = 0;
  std::size_t rows = 1;
  std::size_t cols = 0;
  std::size_t stride = 0;

  static Extent range(std::size_t first, std::size_t n) { return {first, 1, n, n}; }
  /// The same elements with whole rows joined into one run.
  Extent normalized() const;
  std::size_t count() const { return rows * cols; }
  /// Where element `i` (inside the extent) lies in the contiguous device copy.
  std::size_t local(std::size_t i) const;
  bool operator==(const Extent&) const = default;
};

/// How a container is made: its runtime (default: Runtime::instance()), a pinned main copy (faster
/// transfers), and its coherence rules (default: HDSM_CONTAINER_MECHANISM).
struct ContainerOptions {
  Runtime* runtime = nullptr;
  bool pinned = false;
  std::optional<Mechanism>
      mechanism{};  // (an initializer: ContainerOptions{&rt} then draws no -Wextra warning)
};

namespace detail {

/// The untyped part of a container: element bytes, the main copy, the device copies and their
/// coherence. Vector and Matrix are typed fronts over it. Not thread-safe for concurrent use of one
/// container, as std::vector; different containers may be used from different threads.
class ContainerCore {
 public:
  /// `elements` elements of `element_size` bytes in rows of `row_length`; the main copy's bytes are
  /// uninitialized (the typed front constructs them).
  ContainerCore(const ContainerOptions& options, std::size_t element_size, std::size_t elements,
                std::size_t row_length, const char* kind);
  ~ContainerCore();
  ContainerCore(const ContainerCore&) = delete;
  ContainerCore& operator=(const ContainerCore&) = delete;

  std::byte* host() const { return host_; }
  std::size_t size() const { return elements_; }
  std::size_t row_length() const { return row_length_; }
  std::size_t element_size() const { return element_size_; }
  std::size_t capacity() const { return capacity_; }
  /// hdsm::Unsupported where the runtime has ended (a skeleton or launch on the container then
  /// refuses it as any use does).
  Runtime& runtime() const;
  Mechanism mechanism() const;
  bool pinned() const { return pinned_; }
  /// "vector of 10 x 4 B" and the like, for messages.
  std::string name() const;

  /// One compare: whether a host access in `mode` may touch the main copy without any coherence work.
  bool host_access_is_free(Access mode) const {
    return (mode == Access::read ? read_free_ : write_free_).load(std::memory_order_acquire);
  }
  /// Makes elements [first, first + n) of the main copy current for the access (waits for the device
  /// work that conflicts, writes modified device copies back, invalidates device copies it writes).
  void host_access(std::size_t first, std::size_t n, Access mode);
  void host_access(const Extent& extent, Access mode);

  /// Device access, in three steps so that a launch of several operands changes nothing until its
  /// kernel is enqueued. reserve: a pinned copy of the extent on `device` (allocated, evicting other
  /// copies if needed), not evicted or freed until finish or cancel. prepare: makes it current for a
  /// read or read-write (copies enqueued on the device's queue) and returns what the kernel takes.
  /// finish: the work that uses it was enqueued and completes with `done`; a write or read-write then
  /// makes it the one modified copy of its elements.
  struct View {
    Device* device = nullptr;
    Queue* queue = nullptr;
    DeviceBuffer buffer;
    std::size_t offset = 0;  // bytes
    std::uint32_t copy = 0;
    KernelArg argument() const { return KernelArg::buffer(buffer, offset); }
  };
  std::uint32_t reserve(unsigned device, const Extent& extent);
  View prepare(std::uint32_t copy, Access mode);
  void finish(const View& view, Access mode, const Event& done);
  void cancel(std::uint32_t copy);
  /// A copy as reserve makes it, held for a call's later launches until release (DeviceHolds): it is
  /// not evicted or freed, but it is no open view (a host write under the initial mechanism may
  /// invalidate it).
  std::uint32_t hold(unsigned device, const Extent& extent);
  void release(std::uint32_t copy);
  /// A view for writing left without done() while an exception unwinds: unpinned, its copy's contents
  /// unknown (the main copy stays current; work enqueued on it by then is waited for before the copy
  /// is reused or freed), and nothing committed.
  void abandon(const View& view);
  /// Mechanism::none after a call: the results go back to the main copy and the device copies go,
  /// but a copy another access holds (another thread's launch that reads the container too), which
  /// goes when that access ends.
  void flush_after_call();
  /// InvalidArgument naming `what` when a device view of the container is open.
  void check_no_views(const char* what) const;

  void update_host();
  void invalidate_device_copies();
  void flush();
  void discard(std::size_t first, std::size_t n);
  /// New size (elements, row length): modified device copies are written back, every device copy is
  /// freed, and the main copy keeps the first min(old, new) elements' bytes. InvalidArgument while
  /// device work on the container is in flight.
  void resize(std::size_t elements, std::size_t row_length);
  /// Waits for every device work on the container.
  void wait();

  ContainerStats stats() const;
  std::size_t device_copies() const;

  /// Checks [first, first + n) against the size (InvalidArgument naming the container).
  void check_range(std::size_t first, std::size_t n, const char* what) const;
  void check_extent(const Extent& extent, const char* what) const;

  struct State;

 private:
  void refresh_flags();
  std::uint32_t reserve_copy(unsigned device, const Extent& extent, bool held);
  /// hdsm::Unsupported naming `what` and the container when its runtime has ended.
  void check_alive(const char* what) const;
  Runtime* runtime_;
  std::size_t element_size_;
  std::size_t elements_;
  std::size_t row_length_;
  std::size_t capacity_ = 0;
  bool pinned_;
  const char* kind_;
  std::byte* host_ = nullptr;
  std::atomic<bool> read_free_{true};
  std::atomic<bool> write_free_{true};
  std::unique_ptr<State> state_;
};

/// One kernel argument of a container launch: a container's extent with its access, or a value.
struct ContainerLaunchArg {
  ContainerCore* core = nullptr;  // nullptr: `value`
  Extent extent;
  Access access = Access::read;
  KernelArg value;
};

/// Makes every container argument current on `device`, launches on the device's container queue and
/// returns at once; host accesses of the containers wait for it where they conflict.
Event launch_containers(Runtime& runtime, unsigned device, const Kernel& kernel, const Launch& launch,
                        std::span<const ContainerLaunchArg> args);

[[noreturn]] void moved_from(const char* kind);

}  // namespace detail

/// What a process's containers moved and allocated on `runtime`.
ContainerStats container_stats(const Runtime& runtime);
void reset_container_stats(const Runtime& runtime);

namespace detail {

/// What Vector<T> and Matrix<T> share: the core, checked element access through proxies that tell
/// reads from writes, unchecked access, and the coherence calls.
template <class T>
class TypedContainer {
  static_assert(std::is_trivially_copyable_v<T>, "container elements must be trivially copyable");

 public:
  using value_type = T;
  using size_type = std::size_t;

  /// `c[i]`: a read where converted to T, a write where assigned, a read-write for +=, ++ (either) and
  /// the other compound assignments.
  class reference {
   public:
    reference(TypedContainer* c, std::size_t i) : c_(c), i_(i) {}
    reference(const reference&) = default;
    operator T() const { return c_->read(i_); }  // NOLINT(google-explicit-constructor)
    reference& operator=(const T& x) {
      c_->writable(i_, Access::write) = x;
      return *this;
    }
    // Assigns the element's value (a read of r, then a write): self-assignment is harmless.
    reference& operator=(const reference& r) {  // NOLINT(bugprone-unhandled-self-assignment)
      return *this = static_cast<T>(r);
    }
    // The same on a const proxy (it writes the element, not the proxy), as std::indirectly_writable
    // asks of an iterator's reference: std::ranges::fill, copy and sort take a Vector's iterators.
    const reference& operator=(const T& x) const {
      c_->writable(i_, Access::write) = x;
      return *this;
    }
    const reference& operator=(const reference& r) const {  // NOLINT(bugprone-unhandled-self-assignment)
      return *this = static_cast<T>(r);
    }
    template <class U>
    reference& operator+=(const U& x) {
      c_->writable(i_, Access::read_write) += x;
      return *this;
    }
    template <class U>
    reference& operator-=(const U& x) {
      c_->writable(i_, Access::read_write) -= x;
      return *this;
    }
    template <class U>
    reference& operator*=(const U& x) {
      c_->writable(i_, Access::read_write) *= x;
      return *this;
    }
    template <class U>
    reference& operator/=(const U& x) {
      c_->writable(i_, Access::read_write) /= x;
      return *this;
    }
    reference& operator++() {
      ++c_->writable(i_, Access::read_write);
      return *this;
    }
    reference& operator--() {
      --c_->writable(i_, Access::read_write);
      return *this;
    }
    T operator++(int) { return c_->writable(i_, Access::read_write)++; }
    T operator--(int) { return c_->writable(i_, Access::read_write)--; }
    template <class U>
    reference& operator%=(const U& x) {
      c_->writable(i_, Access::read_write) %= x;
      return *this;
    }
    template <class U>
    reference& operator&=(const U& x) {
      c_->writable(i_, Access::read_write) &= x;
      return *this;
    }
    template <class U>
    reference& operator|=(const U& x) {
      c_->writable(i_, Access::read_write) |= x;
      return *this;
    }
    template <class U>
    reference& operator^=(const U& x) {
      c_->writable(i_, Access::read_write) ^= x;
      return *this;
    }
    template <class U>
    reference& operator<<=(const U& x) {
      c_->writable(i_, Access::read_write) <<= x;
      return *this;
    }
    template <class U>
    reference& operator>>=(const U& x) {
      c_->writable(i_, Access::read_write) >>= x;
      return *this;
    }
    friend void swap(reference a, reference b) {
      const T t = a;
      a = static_cast<T>(b);
      b = t;
    }

   private:
    TypedContainer* c_;
    std::size_t i_;
  };

  std::size_t size() const { return core_ ? core_->size() : 0; }
  bool empty() const { return size() == 0; }
  /// The container's untyped core, for hdsm's own calls (InvalidArgument on a moved-from container).
  ContainerCore& core() const {
    if (!core_) [[unlikely]]
      moved_from(kind_);
    return *core_;
  }

  /// The main copy, current for a read of every element.
  const T* data() const {
    host_range(0, size(), Access::read);
    return host();
  }
  /// The main copy, current and the only valid copy (the caller may read and write every element).
  T* data() { return host_range(0, size(), Access::read_write); }
  /// Elements [first, first + n) of the main copy, made current for the access; valid until the next
  /// device access of the container.
  T* host_range(std::size_t first, std::size_t n, Access mode) const {
    // One compare where no coherence work is due, as for a checked element (a loop over a const
    // vector asks for its end() each time round).
    if (first > size() || n > size() - first || !core().host_access_is_free(mode))
      core().host_access(first, n, mode);
    return host() + first;
  }

  /// Writes back every modified device copy (the main copy is then current; the copies stay valid).
  void update_host() { core().update_host(); }
  /// update_host(), then every device copy is invalid (they stay allocated).
  void invalidate_device_copies() { core().invalidate_device_copies(); }
  /// update_host(), then every device copy is freed.
  void flush() { core().flush(); }
  /// Elements [first, first + n) have undefined contents from now on, as after a host write of the
  /// range that wrote nothing: no modified device copy writes them back, and device copies that
  /// overlap them are invalid (kept allocated).
  void discard(std::size_t first, std::size_t n) { core().discard(first, n); }
  /// Waits for the device work on the container.
  void wait() { core().wait(); }
  ContainerStats stats() const { return core().stats(); }
  Mechanism mechanism() const { return core().mechanism(); }

 protected:
  /// What a copy of `other` is made with: the same runtime, pinning and mechanism.
  static ContainerOptions options_of(const TypedContainer& other) {
    return {&other.core().runtime(), other.core().pinned(), other.core().mechanism()};
  }
  /// What the copy that an assignment of `other` puts in place is made with: this container's runtime,
  /// pinning and mechanism, as std::vector keeps its allocator (a moved-from one, which has none,
  /// takes `other`'s).
  ContainerOptions assigned_options(const TypedContainer& other) const {
    return core_ ? options_of(*this) : options_of(other);
  }
  /// A deep copy's contents: `other`'s current elements into this main copy (of the same size).
  void copy_contents(const TypedContainer& other) {
    if (other.size() != 0) std::memcpy(host(), other.data(), other.size() * sizeof(T));
  }
  TypedContainer(const char* kind, const ContainerOptions& options, std::size_t elements,
                 std::size_t row_length)
      : core_(std::make_unique<ContainerCore>(options, sizeof(T), elements, row_length, kind)),
        host_(reinterpret_cast<T*>(core_->host())),
        kind_(kind) {}
  explicit TypedContainer(const char* kind) : kind_(kind) {}
  // A moved-from container has no core (checked access throws) and no main copy.
  TypedContainer(TypedContainer&& other) noexcept
      : core_(std::move(other.core_)), host_(std::exchange(other.host_, nullptr)), kind_(other.kind_) {}
  TypedContainer& operator=(TypedContainer&& other) noexcept {
    core_ = std::move(other.core_);
    host_ = std::exchange(other.host_, nullptr);
    return *this;
  }
  ~TypedContainer() = default;
  void swap_with(TypedContainer& other) noexcept {
    std::swap(core_, other.core_);
    std::swap(host_, other.host_);
  }

  /// The main copy (after core(): throws on a moved-from container).
  T* host() const {
    (void)core();
    return host_;
  }
  /// A new size; the main copy may move.
  void resize_core(std::size_t elements, std::size_t row_length) {
    core().resize(elements, row_length);
    host_ = reinterpret_cast<T*>(core_->host());
  }
  // The fast paths are one test each of the pointer, the index and the cached validity; the rest is
  // out of line.
  T read(std::size_t i) const {
    const ContainerCore* c = core_.get();
    if (c == nullptr || i >= c->size() || !c->host_access_is_free(Access::read)) [[unlikely]]
      prepare(i, Access::read);
    return host_[i];
  }
  T& writable(std::size_t i, Access mode) {
    const ContainerCore* c = core_.get();
    if (c == nullptr || i >= c->size() || !c->host_access_is_free(mode)) [[unlikely]]
      prepare(i, mode);
    return host_[i];
  }
  /// The slow path: errors, or the coherence work that makes element i current for the access.
  [[gnu::noinline, gnu::cold]] void prepare(std::size_t i, Access mode) const {
    ContainerCore& c = core();
    c.check_range(i, 1, mode == Access::read ? "element read" : "element write");
    c.host_access(i, 1, mode);
  }
  /// Value-initializes elements [first, last) of the main copy.
  void construct(std::size_t first, std::size_t last) {
    T* p = host();
    for (std::size_t i = first; i < last; ++i) new (p + i) T();
  }

  std::unique_ptr<ContainerCore> core_;
  T* host_ = nullptr;  // the main copy, cached for unchecked access
  const char* kind_;
};

}  // namespace detail

/// The device side of a container range for code outside hdsm's launches: the buffer and byte offset
/// a kernel takes, and the queue to enqueue on (work on the copy is ordered there). Call done() with
/// the event of the last work that uses it. Until then the copy is neither evicted nor freed (flush,
/// resize and host writes that would free it fail), and a view for writing becomes the container's
/// modified copy of the range at done(). Open the views of one kernel's reads before its writes.
class DeviceView {
 public:
  DeviceView(detail::ContainerCore& core, unsigned device, const Extent& extent, Access access)
      : core_(&core), access_(access) {
    const std::uint32_t copy = core.reserve(device, extent);
    try {
      view_ = core.prepare(copy, access);
    } catch (...) {
      core.cancel(copy);
      throw;
    }
  }
  DeviceView(const DeviceView&) = delete;
  DeviceView& operator=(const DeviceView&) = delete;
  /// Without done(), whatever was enqueued on queue() by then is taken to use the view; but a view
  /// for writing that an exception unwinds commits nothing (the main copy stays current).
  ~DeviceView() {
    if (core_ == nullptr) return;
    if (access_ != Access::read && std::uncaught_exceptions() > exceptions_) {
      try {
        core_->abandon(view_);
      } catch (...) {  // NOLINT(bugprone-empty-catch): unwinding already; the unpin cannot fail
      }
      return;
    }
    try {
      done(view_.queue->record());
    } catch (...) {
      // Not finished (no event could be recorded): unpinned. Finished already (the none mechanism's
      // write-back failed): the error is the container's to report.
      if (core_ != nullptr) core_->cancel(view_.copy);
    }
  }
  KernelArg argument() const { return view_.argument(); }
  DeviceBuffer buffer() const { return view_.buffer; }
  std::size_t offset() const { return view_.offset; }
  Queue& queue() const { return *view_.queue; }
  Device& device() const { return *view_.device; }
  /// The last work that uses the view was enqueued and completes with `event`. Under
  /// Mechanism::none, which keeps nothing on the devices between uses, it waits for that work and the
  /// copy goes back to the main copy and is freed, as after a launch (a view's copy left modified on
  /// the device was written back over a later call's results).
  void done(const Event& event) {
    detail::ContainerCore* core = std::exchange(core_, nullptr);
    if (core == nullptr) return;
    core->finish(view_, access_, event);
    if (core->mechanism() == Mechanism::none) {
      try {
        event.wait();
      } catch (...) {
        // The work failed: reported once, by the container's next access of the range (finish
        // recorded it), as under the other mechanisms; thrown here too, it was reported twice.
        return;
      }
      core->flush_after_call();
    }
  }

 private:
  detail::ContainerCore* core_;
  Access access_;
  int exceptions_ = std::uncaught_exceptions();  // in flight when the view was made
  detail::ContainerCore::View view_;
};

/// A container's extent with the access a kernel makes (built by in(), out(), inout()).
template <class T>
struct ContainerRef {
  detail::ContainerCore* core;
  Extent extent;
  Access access;
  using element_type = T;
};

/// A part of a container (a range of a vector, a row, column or submatrix of a matrix). A part of a
/// const container is not `Writable`: only in() and a skeleton's inputs take it.
template <class T, bool Writable = true>
struct ContainerPart {
  detail::ContainerCore* core;
  Extent extent;
  using element_type = T;
};

template <class C>
concept WholeContainer = requires(const C& c) {
  typename C::value_type;
  c.core();
  c.whole();
};

template <WholeContainer C>
ContainerRef<typename C::value_type> in(const C& c) {
  return {&c.core(), c.whole(), Access::read};
}
template <WholeContainer C>
requires(!std::is_const_v<C>) ContainerRef<typename C::value_type> out(C& c) {
  return {&c.core(), c.whole(), Access::write};
}
template <WholeContainer C>
requires(!std::is_const_v<C>) ContainerRef<typename C::value_type> inout(C& c) {
  return {&c.core(), c.whole(), Access::read_write};
}
template <class T, bool Writable>
ContainerRef<T> in(const ContainerPart<T, Writable>& p) {
  return {p.core, p.extent, Access::read};
}
template <class T, bool Writable>
ContainerRef<T> out(const ContainerPart<T, Writable>& p) {
  static_assert(Writable, "hdsm: out() of a part of a const container");
  return {p.core, p.extent, Access::write};
}
template <class T, bool Writable>
ContainerRef<T> inout(const ContainerPart<T, Writable>& p) {
  static_assert(Writable, "hdsm: inout() of a part of a const container");
  return {p.core, p.extent, Access::read_write};
}

namespace detail {

template <class A>
inline constexpr bool is_container_ref = requires(const A& a) {
  typename A::element_type;
  a.core;
  a.access;
};

template <class A>
ContainerLaunchArg launch_arg(const A& a) {
  if constexpr (is_container_ref<A>) {
    return {a.core, a.extent, a.access, {}};
  } else if constexpr (
      requires {
        typename A::element_type;
        a.core;
      } ||
      requires { a.whole(); }) {
    static_assert(sizeof(A) == 0,
                  "hdsm::launch: say how the kernel uses a container: in(), out() or inout()");
    return {};
  } else if constexpr (std::is_pointer_v<A> || requires {
                         a.pointer;
                         a.use;
                       }) {
    static_assert(sizeof(A) == 0,
                  "hdsm::launch: a kernel on containers takes containers, not pointers (shared objects and "
                  "containers do not mix in one call)");
    return {};
  } else {
    return {nullptr, {}, Access::read, KernelArg::value(a)};
  }
}

/// The launch argument of `a` for the typed kernel parameter P, checked at compile time.
template <class P, class A>
ContainerLaunchArg typed_launch_arg(const A& a) {
  if constexpr (is_container_ref<A>) {
    static_assert(
        std::is_pointer_v<P> && std::is_convertible_v<typename A::element_type*, P>,
        "hdsm::launch: the container's elements do not match the kernel's pointer parameter (see the "
        "parameter and argument types in the instantiation above)");
    return launch_arg(a);
  } else {
    static_assert(!std::is_pointer_v<P>,
                  "hdsm::launch: a kernel's pointer parameter takes a container: in(v), out(v) or inout(v)");
    static_assert(std::is_convertible_v<A, P>,
                  "hdsm::launch: the argument does not convert to the kernel's parameter type (see the "
                  "parameter and argument types in the instantiation above)");
    return {nullptr, {}, Access::read, KernelArg::value(static_cast<P>(a))};
  }
}

template <class... A>
std::array<ContainerLaunchArg, sizeof...(A)> pack_launch(const A&... args) {
  return {launch_arg(args)...};
}
template <class... P, class... A>
std::array<ContainerLaunchArg, sizeof...(A)> pack_typed_launch(const A&... args) {
  return {typed_launch_arg<P>(args)...};
}

inline Runtime& runtime_of(std::span<const ContainerLaunchArg> args) {
  for (const auto& a : args)
    if (a.core != nullptr) return a.core->runtime();
  return Runtime::instance();
}

/// Device copies of container operands, allocated and pinned from add() until it goes. A call of
/// several launches (a skeleton's parts on several devices, or two kernels on one) adds the operands
/// of all of them before the first: one that does not fit then fails the call before any kernel wrote
/// an output, so every container keeps its contents, as after one launch that does not fit. The
/// launches find the held copies. Declared after the containers it holds, so that it goes first.
class DeviceHolds {
 public:
  DeviceHolds() = default;
  DeviceHolds(const DeviceHolds&) = delete;
  DeviceHolds& operator=(const DeviceHolds&) = delete;
  ~DeviceHolds();
  /// Holds each container operand of `args` on `device` (values are passed over; an operand of no
  /// elements needs no copy). hdsm::OutOfDeviceMemory where one does not fit beside the others held.
  void add(unsigned device, std::span<const ContainerLaunchArg> args);
  template <class... A>
  void add(unsigned device, const A&... args) {
    const auto packed = pack_launch(args...);
    add(device, std::span<const ContainerLaunchArg>(packed));
  }

 private:
  std::vector<std::pair<ContainerCore*, std::uint32_t>> held_;
};

}  // namespace detail

/// Launches `kernel` on `device` with containers (in(v), out(v.range(first, n)), inout(m.row(i)), ...)
/// and values as its arguments. It returns once the work is enqueued; host accesses of the containers
/// wait for it where they conflict with it. The kernel receives each container part as a pointer to
/// its elements, stored contiguously.
template <class... A>
Event launch(unsigned device, const Kernel& kernel, const Launch& launch, A&&... args) {
  const auto packed = detail::pack_launch(static_cast<const std::decay_t<A>&>(args)...);
  return detail::launch_containers(detail::runtime_of(packed), device, kernel, launch, packed);
}
/// The same for a typed kernel: arguments are checked and converted at compile time.
template <class... P, class... A>
Event launch(unsigned device, const KernelOf<P...>& kernel, const Launch& launch, A&&... args) {
  if constexpr (sizeof...(P) != sizeof...(A)) {
    static_assert(sizeof...(P) == sizeof...(A),
                  "hdsm::launch: the number of arguments differs from the kernel's");
    return {};
  } else {
    const auto packed = detail::pack_typed_launch<P...>(static_cast<const std::decay_t<A>&>(args)...);
    return detail::launch_containers(detail::runtime_of(packed), device, kernel, launch, packed);
  }
}

}  // namespace hdsm
HDSM_VISIBLE_END
