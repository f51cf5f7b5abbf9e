// Chrome/Perfetto trace-event recording (HDSM_TRACE=file.json): one lane per copy engine, per
// kernel queue and per host thread. When no file is configured every call returns at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace hdsm::obs {

using Clock = std::chrono::steady_clock;

class Tracer {
 public:
  /// Events are kept in memory and written to `path` by flush() or the destructor; empty = off.
  /// The file is opened (created, emptied) here, so a path that cannot be written is a
  /// ConfigError naming HDSM_TRACE before the program runs, not a message at its end.
  explicit Tracer(std::string path);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  bool enabled() const { return !path_.empty(); }
  /// Register a named lane (a Chrome "thread"); returns its id.
  int lane(std::string name);
  /// The lane of the calling host thread, registered on first use.
  int host_thread_lane();
  /// A completed span on a lane; `bytes` is shown as an argument when non-zero.
  void span(int lane, std::string_view name, Clock::time_point begin, Clock::time_point end,
            std::uint64_t bytes = 0);
  /// Write the file now (also done at destruction). Throws SystemError when it cannot be written.
  void flush();

  /// Cap on the events kept in memory; later ones are counted as dropped.
  static constexpr std::size_t kMaxEvents = 2'000'000;

 private:
  struct Event {
    int lane;
    std::string name;
    std::int64_t begin_ns, duration_ns;
    std::uint64_t bytes;
  };
  std::string path_;
  int fd_ = -1;  // open from the constructor: a later chdir does not move the file
  Clock::time_point origin_;
  std::mutex mutex_;
  std::vector<std::string> lanes_;
  std::vector<Event> events_;
  std::uint64_t dropped_ = 0;
  std::uint64_t id_;
};

}  // namespace hdsm::obs
