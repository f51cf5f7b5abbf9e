// The memory model behind a Runtime's shared objects (HDSM_PROTOCOL): what alloc hands out, and how
// call and sync keep it coherent. The ADSM model (batch, lazy, rolling; adsm_model.hpp) keeps objects
// in hdsm's arena coherent itself; the unified model (um; unified.hpp) hands out the devices' managed
// memory and leaves the migration to the platform; the host-mapped model (host_mapped.hpp) keeps
// objects in host memory that devices sharing it use in place; a routed model (routed_model.hpp)
// sends each device's objects to the model that device gets. The Runtime's public calls go through this
// interface only, and the I/O on shared objects (shared_io.cpp) through its bulk entry points.
#pragma once

#include <hdsm/export.h>
#include <hdsm/device.hpp>
#include <hdsm/error.hpp>
#include <hdsm/kernel.hpp>
#include <hdsm/runtime.hpp>

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hdsm::coherence {
class SharedSpace;
}

// Declared visible: the first declaration sets a class's visibility, and tests and tools reach
// AdsmModel (adsm_model.hpp) through dynamic_cast.
HDSM_VISIBLE_BEGIN
namespace hdsm::detail {
class AdsmModel;
}
HDSM_VISIBLE_END

namespace hdsm::detail {

/// A call's range annotation on argument `index`, which points `start` bytes into an object of
/// `object_bytes`, lies in that object and is not empty (InvalidArgument otherwise, naming the object
/// as `object()` says, formatted only then); whole-object annotations and plain pointers pass. Every
/// memory model checks ranges by this one rule.
template <class Name>
void check_annotated_range(const CallArg& a, std::size_t start, std::size_t object_bytes, Name&& object,
                           std::string_view kernel, std::size_t index) {
  if (a.kind != CallArg::Kind::annotated || a.bytes == CallArg::kWholeObject) return;
  if (a.bytes != 0 && a.offset <= object_bytes - start && a.bytes <= object_bytes - start - a.offset) return;
  throw InvalidArgument(fmt::format(
      "call({}): argument {} ({}) is annotated with bytes [{}, {}) from it, which {} {} ({} bytes, the "
      "argument at byte {})",
      kernel, index, a.pointer, a.offset,
      // A count too large for size_t saturates at kWholeObject - 1 (ranged()): its end is no number.
      a.bytes >= CallArg::kWholeObject - 1 || a.bytes > SIZE_MAX - a.offset
          ? std::string("SIZE_MAX or more")
          : std::to_string(a.offset + a.bytes),
      a.bytes == 0 ? "is an empty range of" : "leave", object(), object_bytes, start));
}

class MemoryModel {
 public:
  virtual ~MemoryModel() = default;

  /// A zero-filled object of `bytes` on `device`.
  virtual void* alloc(std::size_t bytes, unsigned device) = 0;
  /// Frees the object `p` starts (InvalidPointer otherwise), once the calls in flight that may use
  /// it are done.
  virtual void free(void* p) = 0;
  /// The address kernels of the object's device see for `p` (Runtime::safe).
  virtual void* device_address(const void* p) const = 0;

  /// Release, then launch (Runtime::call).
  virtual void call(const Kernel& kernel, const Launch& launch, std::span<const CallArg> args) = 0;
  /// Wait for the calling thread's calls, then acquire (Runtime::sync).
  virtual void sync() = 0;

  /// Whether the host reaches the memory at `p` only through this model (bulk memory and I/O then
  /// go through copy and fill; memory the host may touch directly is plain memory to them).
  virtual bool mediates(const void* p) const = 0;
  /// InvalidArgument naming `call` and the first bad byte unless [p, p + n) of mediated memory lies
  /// in live objects.
  virtual void check(const void* p, std::size_t n, const char* call) const = 0;
  /// memmove between any mix of host memory and this model's objects; with `pending`, the events to
  /// wait for are appended to it instead of waited for (memcpy_async, staged I/O).
  virtual void copy(void* dst, const void* src, std::size_t n, std::vector<Event>* pending) = 0;
  /// memset of host memory or of this model's objects.
  virtual void fill(void* dst, std::uint8_t value, std::size_t n) = 0;
  /// Before libc does I/O on memory the host touches directly (not mediated): check() it, and wait for
  /// the calls in flight that use it, as copy() would (the models of such objects); nothing otherwise.
  virtual void before_direct_io(const void* /*p*/, std::size_t /*n*/, const char* /*call*/) {}

  /// The ADSM shared space, for what works on it directly (MPI, tools); nullptr where the model has
  /// none (yet).
  virtual coherence::SharedSpace* space() noexcept { return nullptr; }
  /// The ADSM model among the runtime's models; nullptr where there is none.
  virtual AdsmModel* adsm() noexcept { return nullptr; }

  /// A thread ends with calls on `devices` that it never synced (note_call): whoever joins it reads
  /// their results. Errors are thrown, for the ending thread to print. (A routed model's own models
  /// note their calls.)
  virtual void sync_at_thread_end(const std::vector<unsigned>& /*devices*/) {}
};

/// Notes that the calling thread has a call in flight on `device` of `model`: a thread that ends with
/// calls it never synced syncs them as it ends (before, nobody acquired their results, and under
/// batch the host kept its old copy for good). Not in a child of fork().
void note_call(const MemoryModel& model, unsigned device);
/// The devices the calling thread has calls in flight on (noted since its last take), forgotten.
std::vector<unsigned> take_noted_calls(const MemoryModel& model);
/// A model made and one about to go: a thread that ends syncs the calls it left on live ones only,
/// and note_model_gone waits for the threads syncing on it now. Gone for a model not (or no longer)
/// alive does nothing.
void note_model_alive(const MemoryModel& model);
void note_model_gone(const MemoryModel& model);

}  // namespace hdsm::detail
