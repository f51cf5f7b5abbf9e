// The sync of a thread that ends with calls it never synced, for every memory model that notes its
// calls (memory_model.hpp): the user guide promises that whoever joins such a thread reads the
// calls' results, whatever HDSM_PROTOCOL gives the device.
#include "os/exception_text.hpp"
#include "os/process.hpp"
#include "runtime/memory_model.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace hdsm::detail {
namespace {

/// The devices on which the calling thread has calls in flight, per model: its sync visits only
/// their call lists, so threads on different devices never take each other's locks. A stale entry
/// (a model gone, another at its address) only makes a sync look at a list with nothing of its.
struct ThreadCalls {
  const MemoryModel* model;
  std::vector<unsigned> devices;
};

/// The models alive, for a thread that ends to tell its noted models from ones gone since; each with
/// the ending threads syncing on it, which its destructor waits for. Never destroyed: a thread may
/// end during the static destructors.
struct LiveModels {
  std::mutex mutex;
  std::vector<std::pair<const MemoryModel*, std::shared_ptr<std::atomic<unsigned>>>> models;
};
LiveModels& live_models() {
  static auto* live = new LiveModels;  // NOLINT(cppcoreguidelines-owning-memory): leaked on purpose
  return *live;
}

/// A thread's notes, synced as it ends. A failure goes to stderr, as nobody is left to catch it. Not
/// in a child of fork() (the notes are the parent's thread's, and the runtime's threads are not
/// there); the models decide where else they may not (MemoryModel::sync_at_thread_end).
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
        const_cast<MemoryModel*>(t.model)->sync_at_thread_end(t.devices);
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

}  // namespace

void note_call(const MemoryModel& model, unsigned device) {
  std::vector<ThreadCalls>& notes = thread_calls.list;
  auto it = std::find_if(notes.begin(), notes.end(), [&](const ThreadCalls& t) { return t.model == &model; });
  if (it == notes.end()) it = notes.insert(notes.end(), ThreadCalls{&model, {}});
  if (std::find(it->devices.begin(), it->devices.end(), device) == it->devices.end())
    it->devices.push_back(device);
}

std::vector<unsigned> take_noted_calls(const MemoryModel& model) {
  std::vector<ThreadCalls>& notes = thread_calls.list;
  const auto it =
      std::find_if(notes.begin(), notes.end(), [&](const ThreadCalls& t) { return t.model == &model; });
  if (it == notes.end()) return {};
  std::vector<unsigned> devices = std::move(it->devices);
  notes.erase(it);
  return devices;
}

void note_model_alive(const MemoryModel& model) {
  LiveModels& live = live_models();
  std::lock_guard lock(live.mutex);
  live.models.emplace_back(&model, std::make_shared<std::atomic<unsigned>>(0));
}

void note_model_gone(const MemoryModel& model) {
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

}  // namespace hdsm::detail
