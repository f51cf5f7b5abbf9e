// Syncs of the ADSM model: each thread acquires what its own calls used (release consistency: a
// thread acquires what it released), after their kernels.
#include "obs/lock_wait.hpp"
#include "os/exception_text.hpp"
#include "os/process.hpp"
#include "runtime/adsm_model.hpp"
#include "runtime/runtime_impl.hpp"
#include "transfer/copy_engine.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <iterator>
#include <memory>
#include <mutex>

namespace hdsm::detail {
namespace {

/// The devices on which the calling thread has calls in flight, per model: its sync visits only
/// their call lists, so threads on different devices never take each other's locks. A stale entry
/// (a model gone, another at its address) only makes a sync look at a list with nothing of its.
struct ThreadCalls {
  const AdsmModel* model;
  std::vector<unsigned> devices;
};

/// The models alive, for a thread that ends to tell its noted models from ones gone since; each with
/// the ending threads syncing on it, which its destructor waits for. Never destroyed: a thread may
/// end during the static destructors.
struct LiveModels {
  std::mutex mutex;
  std::vector<std::pair<const AdsmModel*, std::shared_ptr<std::atomic<unsigned>>>> models;
};
LiveModels& live_models() {
  static auto* live = new LiveModels;  // NOLINT(cppcoreguidelines-owning-memory): leaked on purpose
  return *live;
}

/// A thread's notes. A thread that ends with calls it never synced syncs them as it ends: their
/// results reach the host for whoever joins it (before, nobody acquired them, and under batch the
/// host kept its old copy for good), and the runtime forgets the calls. A failure goes to stderr, as
/// nobody is left to catch it. Not in a child of fork() (the notes are the parent's thread's, and
/// the runtime's threads are not there), nor where the runtime may not be torn down.
struct ThreadNotes {
  std::vector<ThreadCalls> list;
  os::Origin origin;
  ThreadNotes() = default;
  ThreadNotes(const ThreadNotes&) = delete;
  ThreadNotes& operator=(const ThreadNotes&) = delete;
  ~ThreadNotes() {
    if (list.empty() || !origin.same_process()) return;
    const std::vector<ThreadCalls> left = std::move(list);
    list.clear();
    for (const ThreadCalls& t : left) {
      // Pinned, not locked, through the sync: other runtimes come and go meanwhile, and this one's
      // destructor waits for the pin.
      std::shared_ptr<std::atomic<unsigned>> pin;
      {
        LiveModels& live = live_models();
        std::lock_guard lock(live.mutex);
        const auto it = std::find_if(live.models.begin(), live.models.end(),
                                     [&](const auto& m) { return m.first == t.model; });
        if (it == live.models.end()) continue;
        pin = it->second;
        pin->fetch_add(1);
      }
      try {
        const_cast<AdsmModel*>(t.model)->sync_at_thread_end(t.devices);
      } catch (...) {
        std::fprintf(stderr, "hdsm: a thread ended with calls it never synced, and one failed: %s\n",
                     os::exception_text(std::current_exception()).c_str());
      }
      pin->fetch_sub(1);
      pin->notify_all();
    }
  }
};
thread_local ThreadNotes thread_calls;

/// What one sync acquires on one device: the objects its calls used there, after their kernels.
struct Acquire {
  unsigned device;
  bool every_object = false;
  std::uint64_t walk = 0;  // with every_object: the latest of the unannotated calls' release walks
  Uses uses;
  std::vector<Event> after;
};

Acquire& acquire_on(std::vector<Acquire>& acquires, unsigned device) {
  auto it =
      std::find_if(acquires.begin(), acquires.end(), [&](const Acquire& a) { return a.device == device; });
  if (it != acquires.end()) return *it;
  return acquires.emplace_back(Acquire{device, false, 0, {}, {}});
}

}  // namespace

void note_call(const AdsmModel& model, unsigned device) {
  std::vector<ThreadCalls>& notes = thread_calls.list;
  auto it = std::find_if(notes.begin(), notes.end(), [&](const ThreadCalls& t) { return t.model == &model; });
  if (it == notes.end()) it = notes.insert(notes.end(), ThreadCalls{&model, {}});
  if (std::find(it->devices.begin(), it->devices.end(), device) == it->devices.end())
    it->devices.push_back(device);
}

std::vector<unsigned> take_noted_calls(const AdsmModel& model) {
  std::vector<ThreadCalls>& notes = thread_calls.list;
  const auto it =
      std::find_if(notes.begin(), notes.end(), [&](const ThreadCalls& t) { return t.model == &model; });
  if (it == notes.end()) return {};
  std::vector<unsigned> devices = std::move(it->devices);
  notes.erase(it);
  return devices;
}

void note_model_alive(const AdsmModel& model) {
  LiveModels& live = live_models();
  std::lock_guard lock(live.mutex);
  live.models.emplace_back(&model, std::make_shared<std::atomic<unsigned>>(0));
}

void note_model_gone(const AdsmModel& model) {
  std::shared_ptr<std::atomic<unsigned>> pin;
  {
    LiveModels& live = live_models();
    std::lock_guard lock(live.mutex);
    const auto it = std::find_if(live.models.begin(), live.models.end(),
                                 [&](const auto& m) { return m.first == &model; });
    if (it == live.models.end()) return;
    pin = std::move(it->second);
    live.models.erase(it);
  }
  // No thread can pin it from here on; wait for those syncing on it.
  for (unsigned n = pin->load(); n != 0; n = pin->load()) pin->wait(n);
}

void AdsmModel::sync_at_thread_end(const std::vector<unsigned>& devices) {
  if (rt_.origin.may_tear_down()) sync_devices(devices);
}

void AdsmModel::sync() { sync_devices(take_noted_calls(*this)); }

void AdsmModel::sync_devices(const std::vector<unsigned>& devices) {
  // The calls this thread made.
  const std::thread::id me = std::this_thread::get_id();
  std::vector<Call> calls;
  for (const unsigned device : devices) {
    if (device >= device_calls_.size()) continue;
    DeviceCalls& d = device_calls_[device];
    const auto lock = obs::lock_counting_wait(d.mutex, rt_.lock_sink());
    auto mine = std::stable_partition(d.in_flight.begin(), d.in_flight.end(),
                                      [&](const Call& c) { return c.thread != me; });
    for (auto c = mine; c != d.in_flight.end(); ++c) d.count(me, c->every_object, -1);
    std::move(mine, d.in_flight.end(), std::back_inserter(calls));
    d.in_flight.erase(mine, d.in_flight.end());
  }
  if (calls.empty()) return;
  coherence::SharedSpace& space = shared_space();
  // One acquire per device, in the order of the devices' first calls, after the kernels of the calls
  // that used its objects; an unannotated call makes its device's acquire cover every object it
  // released (not those made since). Remote objects are acquired on their own devices.
  std::vector<Acquire> acquires;
  for (const Call& c : calls) {
    Acquire& a = acquire_on(acquires, c.device);
    a.every_object |= c.every_object;
    a.walk = std::max(a.walk, c.walk);  // the latest walk saw every live object the others did
    for (const coherence::ObjectUse& u : c.uses) add_use(a.uses, space.directory(), u);
    a.after.push_back(c.done);
    for (const RemoteObject& r : c.remote) {
      if (r.pointer == nullptr) continue;  // freed since
      Acquire& home = acquire_on(acquires, r.home);
      add_use(home.uses, space.directory(), {r.pointer, r.use});
      home.after.push_back(c.done);
    }
  }
  std::exception_ptr first_error;
  for (Acquire& a : acquires) {
    try {
      const Event after = transfer::all_of(std::move(a.after));
      if (a.every_object) {
        space.acquire(a.device, a.uses, &after, &a.walk);
      } else if (!a.uses.empty()) {
        space.acquire(a.device, a.uses, &after);
      } else {
        after.wait();
      }
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  for (const Call& c : calls)
    for (const RemoteObject& r : c.remote) {
      if (!r.temporary) continue;
      try {
        c.done.wait();
      } catch (const std::exception&) {  // reported by the acquire above
      }
      space.free_temporary(c.device, *r.temporary);
    }
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace hdsm::detail
