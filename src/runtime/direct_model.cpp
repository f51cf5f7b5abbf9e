#include "runtime/direct_model.hpp"

#include <hdsm/error.hpp>

#include "runtime/direct_objects.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

namespace hdsm::detail {

DirectModel::DirectModel(std::vector<Device*> devices, std::size_t default_device, std::string protocol,
                         const Runtime* owner)
    : devices_(std::move(devices)),
      default_device_(default_device),
      protocol_(std::move(protocol)),
      owner_(owner),
      queues_(devices_.size()),
      in_flight_(devices_.size()),
      busy_(devices_.size(), false),
      every_object_(devices_.size(), false),
      settled_(devices_.size()),
      unreported_(devices_.size()) {
  note_model_alive(*this);
}

// Where a derived constructor threw, release_all() did not run.
DirectModel::~DirectModel() { note_model_gone(*this); }

void DirectModel::release_all() noexcept {
  note_model_gone(*this);  // before the objects go: a thread that is ending may be syncing on them
  try {
    sync();
  } catch (...) {  // a kernel's error nobody synced for: the objects still go
  }
  for (auto& [start, o] : objects_) {
    direct_objects().remove(o.start);
    try {
      release(o);
    } catch (...) {
    }
  }
  objects_.clear();
}

Queue& DirectModel::queue(unsigned device) {
  if (!queues_[device]) queues_[device] = devices_[device]->create_queue();
  return *queues_[device];
}

void* DirectModel::alloc(std::size_t bytes, unsigned device) {
  if (bytes == 0) throw InvalidArgument("alloc(0): a shared object needs at least one byte");
  if (device >= devices_.size())
    throw InvalidArgument(
        fmt::format("alloc on device {}: this runtime has {} devices", device, devices_.size()));
  // What an element count's overflowing bytes ask for (detail::bytes_of): out of memory, as in every
  // memory model, before place() adds its one byte of gap.
  if (bytes == SIZE_MAX)
    throw OutOfDeviceMemory(devices_[device]->name(), bytes, devices_[device]->memory_used(),
                            devices_[device]->properties().memory_bytes);
  Object o = place(bytes, device);
  o.device = device;
  std::byte* start = o.start;
  try {
    direct_objects().add(start, o.bytes, owner_);  // other runtimes may refuse it from now on
    try {
      std::lock_guard lock(mutex_);
      objects_.emplace(reinterpret_cast<std::uintptr_t>(start), std::move(o));
    } catch (...) {
      direct_objects().remove(start);
      throw;
    }
  } catch (...) {
    release(o);
    throw;
  }
  return start;
}

DirectModel::Object* DirectModel::object_at(const void* p, bool or_end) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  auto it = objects_.upper_bound(at);
  if (it == objects_.begin()) return nullptr;
  --it;
  const std::uintptr_t in = at - it->first;
  return in < it->second.bytes || (or_end && in == it->second.bytes) ? &it->second : nullptr;
}

template <class F>
void DirectModel::for_each_overlapping(const void* p, std::size_t n, F&& f) const {
  if (n == 0) return;
  const auto first = reinterpret_cast<std::uintptr_t>(p);
  auto it = objects_.upper_bound(first);
  if (it != objects_.begin()) --it;  // the one before p may reach into the range
  for (; it != objects_.end(); ++it) {
    if (it->first >= first && it->first - first >= n) return;  // no overflow of first + n
    if (it->first + it->second.bytes > first) f(it->first, it->second);
  }
}

void DirectModel::check(const void* p, std::size_t n, const char* call) const {
  const auto first = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(mutex_);
  // The byte after an object is the gap place() reserves, not host memory: a range from there is
  // past the object's end (an off-by-one in the caller), as under the copying protocols.
  const Object* o = n > 0 ? const_cast<DirectModel*>(this)->object_at(p, true) : nullptr;
  if (o != nullptr && static_cast<const std::byte*>(p) == o->start + o->bytes)
    throw InvalidArgument(
        fmt::format("{}: the {}-byte range at {} starts at the end of the object at {} ({} bytes)", call, n,
                    p, static_cast<const void*>(o->start), o->bytes));
  bool in_object = false;
  for_each_overlapping(p, n, [&](std::uintptr_t begin, const Object& o) {
    in_object = true;
    if (begin > first)  // host memory, then the object
      throw InvalidArgument(
          fmt::format("{}: byte {} of the {}-byte range at {} is the start of the object at {} "
                      "({} bytes), the bytes before it are not",
                      call, begin - first, n, p, reinterpret_cast<void*>(begin), o.bytes));
    if (begin + o.bytes - first < n)
      throw InvalidArgument(
          fmt::format("{}: byte {} of the {}-byte range at {} is past the end of the object at "
                      "{} ({} bytes)",
                      call, begin + o.bytes - first, n, p, reinterpret_cast<void*>(begin), o.bytes));
  });
  if (!in_object) refuse_foreign(p, n, call);
}

std::string DirectModel::not_found(const void* p, const char* call) const {
  return fmt::format("{}({}): not in a shared object of this runtime{}", call, p,
                     foreign_owner(p, 0, owner_) != nullptr
                         ? " (it points into the shared memory of another hdsm::Runtime)"
                         : "");
}

void DirectModel::refuse_foreign(const void* p, std::size_t n, const char* call) const {
  if (foreign_owner(p, n, owner_) != nullptr)
    throw InvalidArgument(fmt::format(
        "{}: the {}-byte range at {} lies in the shared memory of another hdsm::Runtime", call, n, p));
}

std::optional<DirectModel::Found> DirectModel::find(const void* p) const {
  std::lock_guard lock(mutex_);
  const Object* o = const_cast<DirectModel*>(this)->object_at(p, true);
  if (o == nullptr) return std::nullopt;
  return Found{o->start, o->bytes, o->device};
}

void DirectModel::free(void* p) {
  std::size_t bytes = 0;
  {
    std::lock_guard lock(mutex_);
    const auto it = objects_.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == objects_.end()) {
      const Object* inside = object_at(p);
      throw InvalidPointer(
          inside != nullptr
              ? fmt::format(
                    "free({}): not the start of a shared object (it lies {} bytes into the object at {})", p,
                    static_cast<const std::byte*>(p) - inside->start, static_cast<void*>(inside->start))
              : fmt::format("free({}): not a shared object of this runtime ({})", p,
                            foreign_owner(p, 0, owner_) != nullptr ? "it belongs to another hdsm::Runtime"
                                                                   : "freed already?"));
    }
    bytes = it->second.bytes;
  }
  settle({{p, bytes}});  // a kernel may still use it
  Object gone;
  {
    std::lock_guard lock(mutex_);
    const auto it = objects_.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == objects_.end())
      throw InvalidPointer(fmt::format("free({}): freed by another thread meanwhile", p));
    gone = std::move(it->second);
    objects_.erase(it);
  }
  direct_objects().remove(gone.start);
  release(gone);
}

void DirectModel::call(const Kernel& kernel, const Launch& launch, std::span<const CallArg> args) {
  using Kind = CallArg::Kind;
  std::lock_guard lock(mutex_);
  // The call runs on the device of its first object argument.
  std::optional<unsigned> device;
  for (const CallArg& a : args)
    if (a.kind != Kind::value)
      if (const Object* o = object_at(a.pointer, true)) {
        device = o->device;
        break;
      }
  const unsigned d = device.value_or(static_cast<unsigned>(default_device_));
  std::vector<KernelArg> kernel_args;
  kernel_args.reserve(args.size());
  std::vector<Object*> used;
  struct Span {
    const Object* object;
    std::size_t first, last;
  };
  std::vector<Span> spans;  // the bytes of each object the call may touch
  const bool annotated =
      std::any_of(args.begin(), args.end(), [](const CallArg& a) { return a.kind == Kind::annotated; });
  for (std::size_t i = 0; i < args.size(); ++i) {
    const CallArg& a = args[i];
    if (a.kind == Kind::value) {
      kernel_args.push_back(a.value);
      continue;
    }
    Object* o = object_at(a.pointer, true);  // a range's end too: the gap place() leaves makes it one
    if (o == nullptr) {
      if (foreign_owner(a.pointer, 0, owner_) != nullptr)
        throw InvalidArgument(
            fmt::format("call({}): argument {} ({}) points into the shared memory of another hdsm::Runtime",
                        kernel.name, i, a.pointer));
      if (a.kind == Kind::annotated)
        throw InvalidArgument(fmt::format("call({}): annotated argument {} ({}) is not a shared object",
                                          kernel.name, i, a.pointer));
      kernel_args.push_back(a.value);  // a pointer to other memory, passed as it is
      continue;
    }
    const auto start = static_cast<std::size_t>(static_cast<const std::byte*>(a.pointer) - o->start);
    check_annotated_range(
        a, start, o->bytes, [&] { return fmt::format("the object at {}", static_cast<void*>(o->start)); },
        kernel.name, i);
    kernel_args.push_back(argument(d, *o, start));
    if (std::find(used.begin(), used.end(), o) == used.end()) used.push_back(o);
    if (a.kind == Kind::annotated && a.bytes != CallArg::kWholeObject)
      spans.push_back({o, start + a.offset, start + a.offset + a.bytes});
    else
      spans.push_back({o, 0, o->bytes});
  }
  Queue& q = queue(d);
  // A call on another device that used one of these objects since its sync comes first: this
  // queue waits for everything that device's queue had (which chains to what that one waited for),
  // or, while a sync of that device is under way (another thread's, or a thread's end), for what
  // the sync waits for: its calls and their hand-overs.
  std::vector<unsigned> waited;
  for (Object* o : used) {
    const int e = std::exchange(o->last_device, static_cast<int>(d));
    if (e < 0 || static_cast<unsigned>(e) == d) continue;
    if (std::find(waited.begin(), waited.end(), static_cast<unsigned>(e)) != waited.end()) continue;
    if (busy_[e])
      q.wait(queues_[e]->record());
    else if (!settled_[e].event.query())
      q.wait(settled_[e].event);
    else
      continue;
    waited.push_back(static_cast<unsigned>(e));
  }
  // And the asynchronous copies into or out of the bytes it may touch.
  std::vector<const Event*> copies;
  for (const Span& span : spans)
    for (const Object::Copy& c : span.object->copies)
      if (c.first < span.last && span.first < c.last && !c.done.query() &&
          std::find_if(copies.begin(), copies.end(),
                       [&](const Event* e) { return e->state() == c.done.state(); }) == copies.end())
        copies.push_back(&c.done);
  for (const Event* e : copies) q.wait(*e);
  for (Object* o : used) before_launch(d, *o, q);
  q.launch(kernel, launch, kernel_args);
  busy_[d] = true;
  if (!annotated) every_object_[d] = true;
  for (Object* o : used) in_flight_[d].push_back(o->start);
  note_call(*this, d);
}

void DirectModel::settle(std::initializer_list<std::pair<const void*, std::size_t>> ranges) {
  std::vector<unsigned> devices;
  std::vector<Settled> earlier;  // syncs of other threads may have taken such calls over: wait for them too
  std::vector<Event> copies;     // note_copy()'s copies of those bytes
  {
    std::lock_guard lock(mutex_);
    std::vector<std::uintptr_t> touched;  // the objects the ranges touch (a range touches one)
    for (const auto& [p, n] : ranges)
      for_each_overlapping(p, n, [&](std::uintptr_t start, const Object& o) {
        touched.push_back(start);
        const std::uintptr_t first = std::max(reinterpret_cast<std::uintptr_t>(p), start) - start;
        const std::uintptr_t last =
            std::min<std::uintptr_t>(o.bytes, reinterpret_cast<std::uintptr_t>(p) + n - start);
        for (const Object::Copy& c : o.copies)
          if (c.first < last && first < c.last && !c.done.query()) copies.push_back(c.done);
      });
    if (touched.empty()) return;  // host memory: no call uses it
    for (unsigned d = 0; d < devices_.size(); ++d) {
      if (!busy_[d]) continue;
      // An unannotated call may reach any object: the ranges wait for it as they touch one.
      const bool overlaps =
          every_object_[d] || std::any_of(touched.begin(), touched.end(), [&](std::uintptr_t t) {
            return std::find(in_flight_[d].begin(), in_flight_[d].end(), reinterpret_cast<std::byte*>(t)) !=
                   in_flight_[d].end();
          });
      if (overlaps) devices.push_back(d);
    }
    for (unsigned d = 0; d < devices_.size(); ++d)
      if (std::find(devices.begin(), devices.end(), d) == devices.end() && !settled_[d].event.query())
        earlier.push_back(settled_[d]);
  }
  for (const Event& c : copies) {
    try {
      c.wait();
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): its event reports it
    }
  }
  for (const Settled& e : earlier) wait_settled(e, false);
  for (const unsigned d : devices) sync_device(d, false);
}

void DirectModel::note_copy(const void* dst, const void* src, std::size_t n, const Event& done) {
  if (n == 0 || done.query()) return;
  std::lock_guard lock(mutex_);
  for (const void* p : {dst, src}) {
    if (p == nullptr) continue;
    Object* o = object_at(p);  // check() passed: the range lies in one object or in none
    if (o == nullptr) continue;
    std::erase_if(o->copies, [](const Object::Copy& c) { return c.done.query(); });
    const auto first = static_cast<std::size_t>(static_cast<const std::byte*>(p) - o->start);
    o->copies.push_back({done, first, first + n});
  }
}

// Bulk memory is ordered after the calls before it, as cudaMemcpy is after earlier kernels: a copy
// that touches an object a device's calls use waits for those calls (and the hand-over back) first.
void DirectModel::copy(void* dst, const void* src, std::size_t n, std::vector<Event>*) {
  check(dst, n, "memcpy");
  check(src, n, "memcpy");
  settle({{dst, n}, {src, n}});
  const BulkGuard guard = guard_bulk(dst, src, n);
  std::memmove(dst, src, n);
}

void DirectModel::fill(void* dst, std::uint8_t value, std::size_t n) {
  check(dst, n, "memset");
  settle({{dst, n}});
  const BulkGuard guard = guard_bulk(dst, nullptr, n);
  std::memset(dst, value, n);
}

DirectModel::BulkGuard DirectModel::guard_bulk(const void* dst, const void* src, std::size_t n) {
  struct Lock {
    std::uintptr_t start;
    std::shared_ptr<std::shared_mutex> mutex;
    bool write;
  };
  std::vector<Lock> locks;
  {
    std::lock_guard lock(mutex_);
    const auto add = [&](const void* p, bool write) {
      if (p == nullptr) return;
      for_each_overlapping(p, n, [&](std::uintptr_t start, const Object& o) {
        const auto same =
            std::find_if(locks.begin(), locks.end(), [&](const Lock& l) { return l.start == start; });
        if (same == locks.end())
          locks.push_back({start, o.bulk, write});
        else
          same->write = same->write || write;
      });
    };
    add(dst, true);
    add(src, false);
  }
  std::sort(locks.begin(), locks.end(), [](const Lock& a, const Lock& b) { return a.start < b.start; });
  BulkGuard guard;
  for (const Lock& l : locks) {
    guard.held_.push_back(l.mutex);
    if (l.write)
      guard.writes_.emplace_back(*l.mutex);
    else
      guard.reads_.emplace_back(*l.mutex);
  }
  return guard;
}

// A failure of a sync's work is reported once: by whichever waiter of its event claims it first
// (the syncing thread, or another that found the device idle and waited for the same event).
void DirectModel::claim(const Settled& settled, std::exception_ptr failure, bool report) {
  if (settled.claimed->exchange(true)) return;  // another waiter reports it
  if (report) std::rethrow_exception(failure);
  std::lock_guard lock(mutex_);
  if (!unreported_[settled.device]) unreported_[settled.device] = std::move(failure);
}

void DirectModel::wait_settled(const Settled& settled, bool report) {
  try {
    settled.event.wait();
  } catch (...) {
    claim(settled, std::current_exception(), report);
  }
}

void DirectModel::sync_device(unsigned device, bool report) {
  std::unique_lock lock(mutex_);
  if (busy_[device]) {
    Queue& q = *queues_[device];
    std::vector<std::byte*> used;
    used.swap(in_flight_[device]);
    busy_[device] = false;
    every_object_[device] = false;
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    for (std::byte* start : used) {
      const auto it = objects_.find(reinterpret_cast<std::uintptr_t>(start));
      if (it != objects_.end()) after_calls(device, it->second, q);
    }
    settled_[device] = Settled{q.record(), std::make_shared<std::atomic<bool>>(false), device};
    const Settled mine = settled_[device];
    // The syncing thread waits in the queue itself (the platform's wait: clWaitForEvents on OpenCL),
    // quicker than the event, whose completion comes through a callback; other threads that find
    // the device idle wait for the event.
    lock.unlock();
    try {
      q.synchronize();
    } catch (...) {
      // The work's failure, said by the queue rather than the event: claimed as the event's would be.
      const std::exception_ptr failure = std::current_exception();
      try {
        mine.event.wait();
      } catch (...) {  // NOLINT(bugprone-empty-catch): the same failure, or a later one of the same work
      }
      claim(mine, failure, report);
      return;
    }
    wait_settled(mine, report);
    return;
  }
  const Settled settled = settled_[device];
  lock.unlock();
  wait_settled(settled, report);
}

void DirectModel::sync() {
  (void)take_noted_calls(*this);  // every device is synced, the thread's calls with them
  std::exception_ptr first;
  for (unsigned d = 0; d < devices_.size(); ++d) {
    {
      std::lock_guard lock(mutex_);
      if (std::exception_ptr kept = std::exchange(unreported_[d], nullptr); kept && !first) first = kept;
    }
    try {
      sync_device(d);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void DirectModel::sync_at_thread_end(const std::vector<unsigned>& devices) {
  if (!origin_.may_tear_down()) return;
  std::exception_ptr first;
  for (const unsigned d : devices) {
    if (d >= devices_.size()) continue;
    try {
      sync_device(d);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace hdsm::detail
