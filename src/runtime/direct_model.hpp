// The memory models whose objects the host touches directly, with no arena and no faults: um (the
// devices' managed memory, unified.hpp) and host-mapped (host memory the devices use in place,
// host_mapped.hpp). Both keep a table of objects, launch with each object's argument for the call's
// device, and at the sync wait for every call; what differs is where an object lives and what a
// call and a sync must do for it first (the hooks below). Bulk memory and I/O on their objects are
// plain libc calls.
#pragma once

#include <hdsm/device.hpp>

#include "os/mapping.hpp"
#include "os/process.hpp"
#include "runtime/memory_model.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace hdsm::detail {

class DirectModel : public MemoryModel {
 public:
  DirectModel(const DirectModel&) = delete;
  DirectModel& operator=(const DirectModel&) = delete;

  /// An object of `bytes` for `device`; InvalidArgument for 0 bytes or a device index out of range.
  void* alloc(std::size_t bytes, unsigned device) final;
  /// Frees an object once the calls in flight that use it are done (on any device); InvalidPointer
  /// unless p starts one.
  void free(void* p) final;
  /// Launches on the device of the first object argument (the default device without one), each
  /// object passed as the argument by which that device reaches it.
  void call(const Kernel& kernel, const Launch& launch, std::span<const CallArg> args) final;
  /// Waits for every call, rethrowing the first error.
  void sync() final;
  /// Waits for the calls on `devices` (every call on them, as sync() does).
  void sync_at_thread_end(const std::vector<unsigned>& devices) final;
  bool mediates(const void*) const final { return false; }
  /// InvalidArgument, naming `call` and the first byte out, when [p, p + n) reaches into an object and
  /// out of it (past its end into a neighbour, or from host memory into it); nothing for host memory.
  void check(const void* p, std::size_t n, const char* call) const final;
  /// memmove and memset, once the calls in flight that use the memory are done (`pending` is
  /// left alone: the copy is complete when this returns).
  void copy(void* dst, const void* src, std::size_t n, std::vector<Event>* pending) final;
  void fill(void* dst, std::uint8_t value, std::size_t n) final;
  /// check() and settle(): host memory passes both at once, whatever other threads sync.
  void before_direct_io(const void* p, std::size_t n, const char* call) final {
    check(p, n, call);
    settle({{p, n}});
  }

  /// The object holding p, or ending at p (one past its last byte): its start, size and device.
  struct Found {
    std::byte* start;
    std::size_t bytes;
    unsigned device;
  };
  std::optional<Found> find(const void* p) const;
  /// Waits for the calls in flight on one device; a failure of theirs is thrown (`report`) or kept for
  /// the next sync() (a free, a copy: their caller did not make the call that failed, and a free may
  /// run in a destructor).
  void sync_device(unsigned device, bool report = true);
  /// Waits for the calls in flight on every device whose calls use an object overlapping one of
  /// `ranges` (address, bytes); ranges of host memory only return at once.
  void settle(std::initializer_list<std::pair<const void*, std::size_t>> ranges);

  /// Bulk memory on objects is ordered as the ADSM model orders it: a copy or fill that writes an
  /// object excludes every other copy that touches it, copies that only read it share it. Held for
  /// one memmove or memset.
  class BulkGuard {
   public:
    BulkGuard() = default;

   private:
    friend class DirectModel;
    std::vector<std::shared_ptr<std::shared_mutex>> held_;  // kept alive while locked
    std::vector<std::unique_lock<std::shared_mutex>> writes_;
    std::vector<std::shared_lock<std::shared_mutex>> reads_;
  };
  /// Locks the objects [dst, dst + n) writes (exclusively) and [src, src + n) reads (shared; src may
  /// be null), in address order, so two guards never wait for each other in a cycle.
  BulkGuard guard_bulk(const void* dst, const void* src, std::size_t n);
  /// An asynchronous copy (memcpy_async between these objects and another model's) that writes
  /// [dst, dst + n) and reads [src, src + n), and completes with `done`: a later call whose range of
  /// such an object overlaps those bytes waits for it on its queue; free, bulk memory and I/O on
  /// them wait for it first.
  void note_copy(const void* dst, const void* src, std::size_t n, const Event& done);

 protected:
  struct Object {
    std::byte* start = nullptr;
    std::size_t bytes = 0;
    unsigned device = 0;   // the device it was allocated for
    int last_device = -1;  // the device of the last call that used it
    std::shared_ptr<std::shared_mutex> bulk = std::make_shared<std::shared_mutex>();  // guard_bulk's lock
    os::Mapping host;                    // host-mapped: the memory itself
    std::vector<std::uint64_t> mapping;  // host-mapped, by device: the device's mapping, 0 where none
    struct Copy {
      Event done;
      std::size_t first, last;  // its bytes of the object
    };
    std::vector<Copy> copies;  // note_copy()'s copies that may be in flight
  };

  /// `protocol` names the model in messages ("HDSM_PROTOCOL=um"); `owner` is the runtime whose
  /// objects these are (direct_objects() tells other runtimes' apart).
  DirectModel(std::vector<Device*> devices, std::size_t default_device, std::string protocol,
              const Runtime* owner);
  ~DirectModel() override;
  /// For the derived destructor: waits for the calls (errors dropped) and releases every object,
  /// after the threads that end meanwhile have synced on it.
  void release_all() noexcept;

  /// The memory of a new zero-filled object for `device` (start and bytes set, and what the model
  /// keeps with it). It reserves address space for one byte more (`bytes` < SIZE_MAX), so that no
  /// other object starts at its end: a range's end, passed to a kernel, names this object alone.
  virtual Object place(std::size_t bytes, unsigned device) = 0;
  /// Frees an object's memory; no call uses it any more.
  virtual void release(Object& object) = 0;
  /// The argument by which kernels of `device` reach byte `offset` of `object`; mutex_ is held.
  virtual KernelArg argument(unsigned device, Object& object, std::size_t offset) = 0;
  /// Enqueued on `queue` (of `device`) before a launch that uses `object`; mutex_ is held.
  virtual void before_launch(unsigned device, Object& object, Queue& queue) = 0;
  /// Enqueued on `queue` at the sync, for each object the device's calls since the last one used,
  /// before the sync waits for the queue; mutex_ is held.
  virtual void after_calls(unsigned device, Object& object, Queue& queue) = 0;

  /// "call(p): not in a shared object of this runtime", saying so when p is another runtime's.
  std::string not_found(const void* p, const char* call) const;

  std::vector<Device*> devices_;
  std::size_t default_device_;
  std::string protocol_;
  const Runtime* owner_;

 private:
  Queue& queue(unsigned device);  // caller holds mutex_
  /// The object holding p, or also (`or_end`) the one p is the end of; caller holds mutex_.
  Object* object_at(const void* p, bool or_end = false);
  /// f(start, object) for each object overlapping [p, p + n), in address order; caller holds mutex_.
  template <class F>
  void for_each_overlapping(const void* p, std::size_t n, F&& f) const;
  /// InvalidArgument naming `call` when [p, p + n), in none of this runtime's objects, lies in
  /// another runtime's shared memory.
  void refuse_foreign(const void* p, std::size_t n, const char* call) const;
  /// The event of a device's last sync, and whether a waiter has claimed its failure to report.
  struct Settled {
    Event event;
    std::shared_ptr<std::atomic<bool>> claimed = std::make_shared<std::atomic<bool>>(false);
    unsigned device = 0;
  };
  /// Waits for `settled`; its failure, if no other waiter claimed it, is thrown (`report`) or kept
  /// for the next sync().
  void wait_settled(const Settled& settled, bool report);
  /// A failure of `settled`'s work: thrown or kept as wait_settled says, unless another waiter claimed it.
  void claim(const Settled& settled, std::exception_ptr failure, bool report);

  mutable std::mutex mutex_;
  std::map<std::uintptr_t, Object> objects_;        // by start address
  std::vector<std::unique_ptr<Queue>> queues_;      // by device, created on first call
  std::vector<std::vector<std::byte*>> in_flight_;  // by device: objects of calls since the sync
  std::vector<bool> busy_;                          // by device: calls since the sync
  // By device: an unannotated call since the sync, which may reach every object (through safe()
  // pointers stored in them) as it does under the ADSM model.
  std::vector<bool> every_object_;
  std::vector<Settled> settled_;  // by device: completes with the calls and hand-overs of the last sync
  std::vector<std::exception_ptr> unreported_;  // by device: a failure a free or a copy waited for
  os::Origin origin_;                           // where a thread-end sync may run
};

}  // namespace hdsm::detail
