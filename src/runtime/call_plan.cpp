// Kernel calls of the ADSM model: a call is first planned as a value (AdsmModel::plan: the device,
// the translated arguments, the remote and copied objects, the lock order and the releases), then
// enqueued (AdsmModel::enqueue).
#include <hdsm/error.hpp>

#include "obs/lock_wait.hpp"
#include "runtime/adsm_model.hpp"
#include "runtime/direct_objects.hpp"
#include "runtime/runtime_impl.hpp"
#include "transfer/copy_engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <iterator>

namespace hdsm::detail {
namespace {

using coherence::KernelUse;

KernelUse kernel_use(Use use) {
  switch (use) {
    case Use::in:
      return KernelUse::in;
    case Use::out:
      return KernelUse::out;
    case Use::inout:
      return KernelUse::inout;
  }
  return KernelUse::inout;
}

// How call `kernel` uses the object its argument `index` points into (or ends at); a range
// annotation must lie within that object and not be empty.
coherence::ObjectUse object_use(const CallArg& a, KernelUse use, const coherence::Directory& directory,
                                std::string_view kernel, std::size_t index) {
  const coherence::Directory::Hit hit = directory.lookup_argument(a.pointer);
  if (hit.object == nullptr) return {a.pointer, use};  // freed meanwhile: the release names it
  if (a.kind != CallArg::Kind::annotated || a.bytes == CallArg::kWholeObject)
    return {directory.user(*hit.object), use};
  check_annotated_range(
      a, hit.offset_in_object, hit.object->bytes, [&] { return fmt::format("object #{}", hit.object->id); },
      kernel, index);
  // Release and acquire cover the whole object, and the bytes out of the range keep their values:
  // for them, a ranged out is an inout.
  return {static_cast<const std::byte*>(a.pointer) + a.offset, use == KernelUse::out ? KernelUse::inout : use,
          a.bytes};
}

}  // namespace

CallPlan AdsmModel::plan(const Kernel& kernel, std::span<const CallArg> args) {
  using Kind = CallArg::Kind;
  coherence::SharedSpace& space = shared_space();
  const coherence::Directory& directory = space.directory();
  const os::Arena& arena = directory.arena();
  const bool annotated =
      std::any_of(args.begin(), args.end(), [](const CallArg& a) { return a.kind == Kind::annotated; });
  CallPlan plan;
  // The call runs on the device of its first shared-pointer argument.
  plan.device = static_cast<unsigned>(rt_.default_device);
  for (const CallArg& a : args)
    if (a.kind != Kind::value && arena.contains(a.pointer)) {
      plan.device = arena.segment_of(a.pointer);
      break;
    }
  const unsigned target = plan.device;
  plan.every_object = !annotated;
  plan.arguments.reserve(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    const CallArg& a = args[i];
    if (a.kind == Kind::value) {
      plan.arguments.push_back(a.value);
      continue;
    }
    if (!arena.contains(a.pointer)) {
      if (foreign_owner(a.pointer, 0, rt_.self) != nullptr)
        throw InvalidArgument(
            fmt::format("call({}): argument {} ({}) points into the shared memory of another hdsm::Runtime",
                        kernel.name, i, a.pointer));
      if (a.kind == Kind::annotated)
        throw InvalidArgument(fmt::format("call({}): annotated argument {} ({}) is not a shared object",
                                          kernel.name, i, a.pointer));
      plan.arguments.push_back(a.value);
      continue;
    }
    const unsigned d = arena.segment_of(a.pointer);
    // In a call with annotations a raw pointer counts as what it says (inout, or in for a typed
    // kernel's const parameter); without any, every object is released and acquired.
    const KernelUse use = annotated ? kernel_use(a.use) : KernelUse::unknown;
    if (d == target) {
      plan.arguments.push_back(space.argument(a.pointer));
      if (annotated) add_use(plan.uses, directory, object_use(a, use, directory, kernel.name, i));
      continue;
    }
    // Remote access: an object of a peer is passed as its device's address; otherwise HDSM_REMOTE=copy
    // passes a copy on the call's device.
    std::optional<KernelArg> peer = space.peer_argument(target, a.pointer);
    if (!peer && !remote_copy_)
      throw Unsupported(fmt::format(
          "call({}): argument {} ({}) is in an object of device {} ({}), but the call runs on device {} "
          "({}), "
          "the device of its first shared-pointer argument, and kernels there cannot reach device {}'s "
          "memory "
          "(not peers); allocate the object on device {} or a peer of it, or set HDSM_REMOTE=copy to copy it "
          "there for the call",
          kernel.name, i, a.pointer, d, rt_.devices[d]->name(), target, rt_.devices[target]->name(), d,
          target));
    // Remote objects are named by their start, as a range's end (one past the last byte) points at
    // no byte of its object. One freed since peer_argument() keeps its pointer: the release names it.
    const coherence::Object* object = directory.lookup_argument(a.pointer).object;
    auto same = std::find_if(plan.remote.begin(), plan.remote.end(), [&](const RemoteObject& r) {
      return object != nullptr && directory.lookup(r.pointer).object == object;
    });
    if (same == plan.remote.end()) {
      plan.remote.push_back({object != nullptr ? directory.user(*object) : a.pointer, d, use, std::nullopt});
      same = std::prev(plan.remote.end());
    } else {
      same->use = combine(same->use, use);
    }
    if (peer) {
      plan.arguments.push_back(*peer);
    } else {
      plan.copied.push_back({i, static_cast<std::size_t>(same - plan.remote.begin()), a.pointer});
      plan.arguments.push_back({});  // the temporary's, once it exists
    }
  }
  if (!plan.copied.empty())
    for (std::size_t r = 0; r < plan.remote.size(); ++r)
      if (std::any_of(plan.copied.begin(), plan.copied.end(), [&](const auto& c) { return c.remote == r; }))
        plan.remote[r].temporary.emplace();

  // The call locks of every device involved (its own and the homes of remote objects), in index
  // order, so two calls never wait for each other's locks.
  plan.lock_order.push_back(target);
  for (const RemoteObject& r : plan.remote) plan.lock_order.push_back(r.home);
  std::sort(plan.lock_order.begin(), plan.lock_order.end());
  plan.lock_order.erase(std::unique(plan.lock_order.begin(), plan.lock_order.end()), plan.lock_order.end());
  // Remote objects are released on their own devices, as if the kernel ran there; then the call's.
  for (unsigned home : plan.lock_order) {
    if (home == target) continue;
    CallPlan::Release release{home, {}};
    for (const RemoteObject& r : plan.remote)
      if (r.home == home) release.uses.push_back({r.pointer, r.use});
    plan.releases.push_back(std::move(release));
  }
  if (plan.every_object || !plan.uses.empty()) plan.releases.push_back({target, plan.uses});
  return plan;
}

void AdsmModel::enqueue(const Kernel& kernel, const Launch& launch, CallPlan plan) {
  coherence::SharedSpace& space = shared_space();
  const unsigned target = plan.device;
  std::vector<std::unique_lock<os::RankedMutex<std::mutex>>> locks;
  locks.reserve(plan.lock_order.size());
  for (unsigned d : plan.lock_order)
    locks.push_back(obs::lock_counting_wait(device_calls_[d].mutex, rt_.lock_sink()));

  warn_shared_calls(device_calls_[target], target, plan.every_object, kernel);
  std::vector<Event> copies_back;
  std::uint64_t walk = 0;
  try {
    for (const CallPlan::Release& r : plan.releases)
      if (r.device != target) space.release(r.device, r.uses);
    for (RemoteObject& r : plan.remote) {
      if (r.temporary)
        r.temporary = space.copy_in(target, r.pointer);
      else
        space.order(target, r.home);  // the launch waits for the release on the object's device
    }
    for (const CallPlan::Copied& c : plan.copied)
      plan.arguments[c.argument] = space.argument(*plan.remote[c.remote].temporary, c.pointer);
    for (const CallPlan::Release& r : plan.releases)
      if (r.device == target) space.release(target, r.uses, plan.every_object ? &walk : nullptr);
    space.launch(target, kernel, launch, plan.arguments);
    // The first event after the launch: a queue reports a kernel's failure to one event only (as
    // CUDA does), and the ordering and copy-back events below must not take it from the sync.
    copies_back.push_back(space.record(target));
    for (const RemoteObject& r : plan.remote) {
      if (!r.temporary)
        space.order(r.home, target);  // later work on the object's device follows the kernel
      else if (r.use != KernelUse::in)
        copies_back.push_back(space.copy_back(target, *r.temporary, r.pointer));
    }
  } catch (...) {
    // The temporaries made so far go, once the copies into them are done.
    for (const RemoteObject& r : plan.remote) {
      if (!r.temporary || !r.temporary->buffer) continue;
      try {
        space.record(target).wait();
      } catch (const std::exception&) {  // the error being thrown says what failed
      }
      space.free_temporary(target, *r.temporary);
    }
    throw;
  }
  if (!plan.remote.empty()) copies_back.push_back(space.record(target));
  device_calls_[target].in_flight.push_back(Call{target, std::move(plan.uses), std::move(plan.remote),
                                                 plan.every_object, transfer::all_of(std::move(copies_back)),
                                                 std::this_thread::get_id(), walk});
  device_calls_[target].count(std::this_thread::get_id(), plan.every_object, 1);
  note_call(*this, target);
}

void AdsmModel::DeviceCalls::count(std::thread::id thread, bool unannotated, std::ptrdiff_t delta) {
  auto it = std::find_if(tallies.begin(), tallies.end(), [&](const Tally& t) { return t.thread == thread; });
  if (it == tallies.end()) it = tallies.insert(tallies.end(), Tally{thread, 0, 0});
  it->calls = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(it->calls) + delta);
  if (unannotated)
    it->unannotated = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(it->unannotated) + delta);
  if (it->calls == 0) tallies.erase(it);
}

void AdsmModel::warn_shared_calls(const DeviceCalls& d, unsigned device, bool every_object,
                                  const Kernel& kernel) {
  if (d.tallies.empty() || warned_shared_calls_.load(std::memory_order_relaxed)) return;
  const std::thread::id me = std::this_thread::get_id();
  const bool shared = std::any_of(d.tallies.begin(), d.tallies.end(), [&](const DeviceCalls::Tally& t) {
    return t.thread != me && (every_object || t.unannotated != 0);
  });
  if (!shared || warned_shared_calls_.exchange(true)) return;
  fmt::print(stderr,
             "hdsm: warning: kernel '{}' is called on device {} while another thread's call is in flight "
             "there, and one of the two is unannotated: an unannotated call releases and acquires every "
             "object of its device, the other thread's too, so their results or host writes can be "
             "lost. Annotate the calls (hdsm::in, out, inout) to keep threads to their own objects. "
             "(Said once.)\n",
             kernel.name, device);
}

void AdsmModel::call(const Kernel& kernel, const Launch& launch, std::span<const CallArg> args) {
  enqueue(kernel, launch, plan(kernel, args));
}

}  // namespace hdsm::detail
