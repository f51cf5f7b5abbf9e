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
