// The ADSM memory model (HDSM_PROTOCOL batch, lazy, rolling): shared objects in hdsm's arena, kept
// coherent by a coherence::SharedSpace, with kernel calls planned as values (CallPlan) before they
// are enqueued, per-device call locks, and per-thread syncs.
#pragma once

#include <hdsm/export.h>

#include "coherence/shared_space.hpp"
#include "os/lock_rank.hpp"
#include "runtime/memory_model.hpp"

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <utility>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm::detail {

struct RuntimeImpl;

using Uses = std::vector<coherence::ObjectUse>;

/// An argument in an object of another device than the call's (remote access).
struct RemoteObject {
  const void* pointer;
  unsigned home;  // the device hosting the object: released and acquired there
  coherence::KernelUse use;
  std::optional<coherence::SharedSpace::Temporary> temporary;  // HDSM_REMOTE=copy: the copy passed
  bool operator==(const RemoteObject& o) const {
    return pointer == o.pointer && home == o.home && use == o.use &&
           temporary.has_value() == o.temporary.has_value();
  }
};

/// A kernel call as a value, before anything is enqueued: which device runs it, what the kernel
/// receives, which objects of other devices it reaches (and which of them are copied), which call
/// locks it takes and in what order, and what is released where. Made by AdsmModel::plan, run by
/// AdsmModel::enqueue; tests assert on plans without launching anything.
struct CallPlan {
  unsigned device = 0;  // the device of the first shared-pointer argument (else the default one)
  /// What the kernel receives, in order: shared pointers translated to the device's addresses,
  /// values as they are. The arguments in `copied` get their temporary's address when it exists.
  std::vector<KernelArg> arguments;
  bool every_object = true;          // an unannotated call: every object of `device` is released and acquired
  Uses uses;                         // otherwise: the objects of `device` the call names
  std::vector<RemoteObject> remote;  // objects of other devices
  /// Arguments passed as a copy of their object (HDSM_REMOTE=copy): the argument, its entry in
  /// `remote` and the pointer it was given (the kernel gets the same place in the copy).
  struct Copied {
    std::size_t argument;
    std::size_t remote;
    const void* pointer;
    bool operator==(const Copied&) const = default;
  };
  std::vector<Copied> copied;
  std::vector<unsigned> lock_order;  // call locks, taken in this order
  /// What is released before the launch, in order: each remote object's home, then `device` (the
  /// latter only when the call releases anything there).
  struct Release {
    unsigned device;
    Uses uses;  // empty on `device` with every_object: all of its objects
  };
  std::vector<Release> releases;
};

class AdsmModel final : public MemoryModel {
 public:
  explicit AdsmModel(RuntimeImpl& runtime);
  ~AdsmModel() override;
  AdsmModel(const AdsmModel&) = delete;
  AdsmModel& operator=(const AdsmModel&) = delete;

  void* alloc(std::size_t bytes, unsigned device) override;
  void free(void* p) override;
  void* device_address(const void* p) const override;
  void call(const Kernel& kernel, const Launch& launch, std::span<const CallArg> args) override;
  void sync() override;
  /// sync() for the calls the calling thread made on `devices` (sync() takes them from the thread's
  /// notes; a thread that ends passes what it noted and never synced).
  void sync_devices(const std::vector<unsigned>& devices);
  /// sync_devices for a thread that is ending, where the runtime may still be torn down (not in a
  /// child of fork(), nor in code on one of its own threads).
  void sync_at_thread_end(const std::vector<unsigned>& devices) override;
  bool mediates(const void* p) const override;
  void check(const void* p, std::size_t n, const char* call) const override;
  void copy(void* dst, const void* src, std::size_t n, std::vector<Event>* pending) override;
  void fill(void* dst, std::uint8_t value, std::size_t n) override;
  coherence::SharedSpace* space() noexcept override {
    return space_published_.load(std::memory_order_acquire);
  }
  AdsmModel* adsm() noexcept override { return this; }

  /// The call plan of kernel(args...), validated; nothing is enqueued or locked. Throws what the call
  /// would (an annotated range that leaves its object, an unreachable remote object...).
  CallPlan plan(const Kernel& kernel, std::span<const CallArg> args);
  /// Runs a plan: takes its locks, releases, copies remote objects in, launches, records the call.
  void enqueue(const Kernel& kernel, const Launch& launch, CallPlan plan);

  /// The shared space, made on first use with the configured protocol (rolling where HDSM_PROTOCOL
  /// names another model: the devices auto or um give this one).
  coherence::SharedSpace& shared_space();

  /// A kernel call in flight: what its sync waits for and acquires.
  struct Call {
    unsigned device;
    Uses uses;  // the objects of `device` it uses (annotated calls)
    std::vector<RemoteObject> remote;
    bool every_object;       // an unannotated call: every object of `device`
    Event done;              // completes with the kernel
    std::thread::id thread;  // the thread that made the call: its sync acquires it
    /// With every_object: the number of its release's walk over the objects of `device`; its sync
    /// acquires the objects that walk saw (an object allocated after the call is not the kernel's, and
    /// acquiring it would lose the host's writes).
    std::uint64_t walk = 0;
  };
  /// One per device: the short lock a call holds while it releases and launches (never while
  /// waiting for a device), and the calls in flight on the device.
  struct DeviceCalls {
    explicit DeviceCalls(unsigned device) : mutex(os::LockRank::call, device) {}
    os::RankedMutex<std::mutex> mutex;  // ranked call locks, taken in device order
    std::vector<Call> in_flight;
    /// The threads with calls in flight here, and how many of those are unannotated: what the
    /// shared-call warning asks at every call, in O(threads) rather than O(calls).
    struct Tally {
      std::thread::id thread;
      std::size_t calls = 0;
      std::size_t unannotated = 0;
    };
    std::vector<Tally> tallies;
    void count(std::thread::id thread, bool unannotated, std::ptrdiff_t delta);
  };
  /// The call lock of a device (tests hold it to show who waits on it).
  os::RankedMutex<std::mutex>& call_lock(unsigned device) { return device_calls_[device].mutex; }

 private:
  coherence::SharedSpace::CopySetup copy_setup();
  /// The space `p` is in: nullptr for host memory; InvalidArgument naming `call` for another runtime's.
  coherence::SharedSpace* space_of(const void* p, const char* call) const;

  /// Says once (on stderr) that a call on `device` and another thread's call in flight there share
  /// every object, as one of them is unannotated; the caller holds the device's call lock.
  void warn_shared_calls(const DeviceCalls& d, unsigned device, bool every_object, const Kernel& kernel);

  RuntimeImpl& rt_;
  std::atomic<bool> warned_shared_calls_{false};
  bool remote_copy_;  // HDSM_REMOTE=copy: objects of non-peer devices are copied to the call's device
  std::deque<DeviceCalls> device_calls_;  // by device index
  std::mutex space_mutex_;  // creation and destruction of the space; the accessors read space_published_
  std::unique_ptr<coherence::SharedSpace> space_;
  std::atomic<coherence::SharedSpace*> space_published_{nullptr};
};

/// Two uses of one object in the same call (or in calls merged at the sync).
coherence::KernelUse combine(coherence::KernelUse a, coherence::KernelUse b);
/// Adds `add` to `uses`: one entry per object, keyed by the object the pointer lies in; two ranges
/// of it become the range that covers both.
void add_use(Uses& uses, const coherence::Directory& directory, const coherence::ObjectUse& add);

}  // namespace hdsm::detail

HDSM_VISIBLE_END
