#include "obs/trace.hpp"

#include "os/errno_text.hpp"
#include "os/files.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstdio>

namespace hdsm::obs {
namespace {

std::atomic<std::uint64_t> next_tracer_id{1};

// Lane of the calling thread in the tracer with the given id (a thread may meet several tracers
// over its life; the cache is keyed by tracer id, never by address).
struct ThreadLane {
  std::uint64_t tracer = 0;
  int lane = -1;
};
thread_local ThreadLane tls_lane;

double to_us(std::int64_t ns) { return static_cast<double>(ns) / 1000.0; }

}  // namespace

Tracer::Tracer(std::string path) : path_(std::move(path)), origin_(Clock::now()), id_(next_tracer_id++) {
  if (!enabled()) return;
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw ConfigError(
        fmt::format("HDSM_TRACE={}: open of the trace file failed: {}", path_, os::errno_text(errno)));
}

Tracer::~Tracer() {
  if (!enabled()) return;
  try {
    flush();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hdsm: could not write the trace: %s\n", e.what());
  }
  ::close(fd_);
}

int Tracer::lane(std::string name) {
  if (!enabled()) return -1;
  std::lock_guard lock(mutex_);
  lanes_.push_back(std::move(name));
  return static_cast<int>(lanes_.size()) - 1;
}

int Tracer::host_thread_lane() {
  if (!enabled()) return -1;
  if (tls_lane.tracer != id_) {
    tls_lane.tracer = id_;
    tls_lane.lane = lane(fmt::format("host thread {}", static_cast<long>(::syscall(SYS_gettid))));
  }
  return tls_lane.lane;
}

void Tracer::span(int lane, std::string_view name, Clock::time_point begin, Clock::time_point end,
                  std::uint64_t bytes) {
  if (!enabled() || lane < 0) return;
  const auto b = std::chrono::duration_cast<std::chrono::nanoseconds>(begin - origin_).count();
  const auto d = std::chrono::duration_cast<std::chrono::nanoseconds>(end - begin).count();
  std::lock_guard lock(mutex_);
  if (events_.size() >= kMaxEvents) {
    ++dropped_;
    return;
  }
  events_.push_back(Event{lane, std::string(name), b, d, bytes});
}

void Tracer::flush() {
  if (!enabled()) return;
  nlohmann::json events = nlohmann::json::array();
  {
    std::lock_guard lock(mutex_);
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 1}, {"args", {{"name", "hdsm"}}}});
    for (std::size_t i = 0; i < lanes_.size(); ++i) {
      events.push_back(
          {{"ph", "M"}, {"name", "thread_name"}, {"pid", 1}, {"tid", i}, {"args", {{"name", lanes_[i]}}}});
      events.push_back({{"ph", "M"},
                        {"name", "thread_sort_index"},
                        {"pid", 1},
                        {"tid", i},
                        {"args", {{"sort_index", i}}}});
    }
    for (const auto& e : events_) {
      nlohmann::json ev = {{"ph", "X"},     {"name", e.name},          {"pid", 1},
                           {"tid", e.lane}, {"ts", to_us(e.begin_ns)}, {"dur", to_us(e.duration_ns)}};
      if (e.bytes != 0) ev["args"] = {{"bytes", e.bytes}};
      events.push_back(std::move(ev));
    }
  }
  nlohmann::json doc = {{"traceEvents", std::move(events)},
                        {"displayTimeUnit", "ns"},
                        {"otherData", {{"dropped_events", dropped_}}}};
  const std::string text = doc.dump();
  // A regular file is rewritten from its start (flush may run more than once); a pipe or a terminal
  // (HDSM_TRACE=/dev/stderr) takes the text as it comes.
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw SystemError("fstat", "trace file " + path_, errno);
  if (S_ISREG(st.st_mode)) {
    if (::ftruncate(fd_, 0) != 0) throw SystemError("ftruncate", "trace file " + path_, errno);
    if (::lseek(fd_, 0, SEEK_SET) != 0) throw SystemError("lseek", "trace file " + path_, errno);
  }
  if (!os::write_all(fd_, text)) throw SystemError("write", "trace file " + path_, errno);
}

}  // namespace hdsm::obs
