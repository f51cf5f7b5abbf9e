#include "crc/home.hpp"

#include "crc/engine.hpp"
#include "os/exception_text.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <typeinfo>

namespace hdsm::crc::detail {

namespace {
/// The replies sent while it lives go out together (every waiting worker's, at a barrier).
struct ReplyBatch {
  explicit ReplyBatch(HomeLink& link) : link(link) { link.begin_batch(); }
  ~ReplyBatch() { link.end_batch(); }
  ReplyBatch(const ReplyBatch&) = delete;
  ReplyBatch& operator=(const ReplyBatch&) = delete;
  HomeLink& link;
};

}  // namespace

const char* to_string(Op op) {
  switch (op) {
    case Op::fetch_read:
      return "fetch for reading";
    case Op::fetch_write:
      return "fetch for writing";
    case Op::upgrade:
      return "upgrade";
    case Op::write_back:
      return "write-back";
    case Op::flush_fetch:
      return "write-back and fetch";
    case Op::single_put:
      return "single-writer put";
    case Op::direct_get:
      return "direct get";
    case Op::direct_put:
      return "direct put";
    case Op::lock:
      return "lock";
    case Op::unlock:
      return "unlock";
    case Op::barrier:
      return "barrier";
    case Op::done:
      return "done";
    case Op::failed:
      return "failed";
  }
  return "?";
}

std::exception_ptr make_error(Errc code, const std::string& message) {
  switch (code) {
    case Errc::invalid_argument:
      return std::make_exception_ptr(InvalidArgument(message));
    case Errc::invalid_pointer:
      return std::make_exception_ptr(InvalidPointer(message));
    case Errc::config:
      return std::make_exception_ptr(ConfigError(message));
    case Errc::unsupported:
      return std::make_exception_ptr(Unsupported(message));
    case Errc::no_device:
      return std::make_exception_ptr(NoDevice(message));
    case Errc::kernel_failure:
      return std::make_exception_ptr(KernelFailure(message));
    default:
      return std::make_exception_ptr(Error(code, message));
  }
}

Home::Home(HomeLink& link, Directory& directory, std::byte* base, int workers,
           std::chrono::milliseconds timeout)
    : link_(link), directory_(directory), base_(base), workers_(workers), timeout_(timeout) {}

std::exception_ptr Home::serve(std::size_t page_size, Stats& stats) {
  page_size_ = page_size;
  stats_ = &stats;
  finished_.assign(static_cast<std::size_t>(workers_), false);
  finished_count_ = 0;
  at_barrier_.clear();
  barrier_round_ = 0;
  locks_.clear();
  error_ = nullptr;
  interrupted_.assign(static_cast<std::size_t>(workers_), false);
  stall_reported_ = false;
  lock_since_.clear();
  quiet_check_ = Clock::now() + timeout_;
  messages_at_check_ = stats.messages;
  quiet_said_ = false;
  Request r;
  std::uint32_t served = 0;
  while (finished_count_ < workers_) {
    // Nobody waits on anybody: wait as long as the workers compute. Someone waits at a barrier or
    // for a lock, or the region failed: the others have the timeout to come (to end their tasks),
    // counted from when the wait began.
    const Clock::time_point deadline = next_deadline();
    // Out of memory to take a request in (MPI) or to word a timeout: the region fails, and the
    // workers are told so as they wait or ask (a reply of a status alone never throws).
    try {
      if (!link_.receive(r, deadline)) {
        expire(Clock::now());
        continue;
      }
    } catch (...) {
      fail(std::current_exception());
      continue;
    }
    // A worker that keeps asking (one that misses its buffer in a loop) must not hold off the
    // others' timeout: with a deadline, the clock is read every 64 requests too.
    if (deadline != Clock::time_point::max() && (++served & 63) == 0) {
      try {
        if (const Clock::time_point now = Clock::now(); now >= deadline) expire(now);
      } catch (...) {
        fail(std::current_exception());
      }
    }
    ++stats.messages;
    handling_ = r.worker;
    answered_ = false;
    try {
      handle(r);
    } catch (...) {
      // A request the home cannot serve (out of memory for a twin, a write-back the directory
      // refuses, a reply the transport could not send): the region fails, and every worker is told
      // so, the one that asked too, rather than the home leaving them all waiting.
      const auto is = [&](const Caller& c) { return c.worker == r.worker; };
      bool queued = std::any_of(at_barrier_.begin(), at_barrier_.end(), is);
      for (const auto& [number, lock] : locks_)
        queued = queued || std::any_of(lock.waiting.begin(), lock.waiting.end(),
                                       [&](const LockWaiter& l) { return is(l.caller); });
      fail(std::current_exception());
      const bool call = r.op != Op::single_put && r.op != Op::done && r.op != Op::failed &&
                        (r.op != Op::direct_put || r.write);
      if (call && !queued && !answered_) answer(r, Reply{.status = Status::aborted});
    }
  }
  return error_;
}

Home::Clock::time_point Home::next_deadline() const {
  Clock::time_point deadline = Clock::time_point::max();
  if (!at_barrier_.empty()) deadline = barrier_since_ + timeout_;
  if (!lock_since_.empty()) deadline = std::min(deadline, *lock_since_.begin() + timeout_);
  if (error_ && !stall_reported_ && at_barrier_.empty() && lock_since_.empty())
    deadline = std::min(deadline, failed_at_ + timeout_);
  if (!error_ && !quiet_said_) deadline = std::min(deadline, quiet_check_);
  return deadline;
}

void Home::expire(Clock::time_point now) {
  if (!error_ && !quiet_said_ && now >= quiet_check_) {
    if (stats_->messages == messages_at_check_) {
      std::vector<int> running;
      for (int w = 0; w < workers_; ++w)
        if (!finished_[static_cast<std::size_t>(w)]) running.push_back(w);
      quiet_said_ = true;
      const bool one = running.size() == 1;
      fmt::print(
          stderr,
          "hdsm crc: no worker has asked the home anything for {} ms (HDSM_CRC_TIMEOUT) while worker{} {} "
          "{} still in {} task{}. A notice, said once a region; the region goes on: a task may compute that "
          "long without a miss, lock or barrier. If one waits instead for another worker's write without an "
          "acquire (crc::lock, crc::barrier), it never sees it, since it reads its own buffered copy\n",
          timeout_.count(), one ? "" : "s", fmt::join(running, ", "), one ? "is" : "are",
          one ? "its" : "their", one ? "" : "s");
    } else {
      messages_at_check_ = stats_->messages;
      quiet_check_ = now + timeout_;
    }
  }
  if (error_) {
    if (stall_reported_ || !at_barrier_.empty() || !lock_since_.empty() || now < failed_at_ + timeout_)
      return;
    // Told to stop (threads: at their next access), some workers still did not end their tasks:
    // they compute without touching shared data, or the transport cannot reach them (MPI).
    std::vector<int> late;
    for (int w = 0; w < workers_; ++w)
      if (!finished_[static_cast<std::size_t>(w)]) late.push_back(w);
    stall_reported_ = true;
    link_.stalled(
        fmt::format("the crc region failed ({}), and worker{} {} did not end {} task within {} "
                    "ms of it (HDSM_CRC_TIMEOUT)",
                    os::exception_text(error_), late.size() == 1 ? "" : "s", fmt::join(late, ", "),
                    late.size() == 1 ? "its" : "their", timeout_.count()));
    return;
  }
  if (!at_barrier_.empty() && now >= barrier_since_ + timeout_) {
    fail(fmt::format("crc barrier {}: {} within {} ms", barrier_round_, waiting_at_barrier(),
                     timeout_.count()));
    return;
  }
  for (const auto& [number, lock] : locks_)
    if (!lock.waiting.empty() && now >= lock.waiting.front().since + timeout_) {
      fail(fmt::format("crc lock {}: worker {} waited for it for more than {} ms (worker {} holds it)",
                       number, lock.waiting.front().caller.worker, timeout_.count(), lock.holder));
      return;
    }
}

std::string Home::waiting_at_barrier() const {
  std::vector<int> came, missing;
  std::vector<bool> here(static_cast<std::size_t>(workers_), false);
  for (const Caller& c : at_barrier_) here[static_cast<std::size_t>(c.worker)] = true;
  for (int w = 0; w < workers_; ++w) (here[static_cast<std::size_t>(w)] ? came : missing).push_back(w);
  return fmt::format("worker{} {} did not come (worker{} {} waited)", missing.size() == 1 ? "" : "s",
                     fmt::join(missing, ", "), came.size() == 1 ? "" : "s", fmt::join(came, ", "));
}

void Home::fail(std::exception_ptr error) {
  if (!error_) {
    error_ = std::move(error);
    failed_at_ = Clock::now();
  }
  // Workers that ask nothing (they only hit their buffers) would never hear of it: the home stops
  // them where the transport lets it.
  if (interrupt_)
    for (int w = 0; w < workers_; ++w)
      if (!finished_[static_cast<std::size_t>(w)] && !interrupted_[static_cast<std::size_t>(w)]) {
        interrupted_[static_cast<std::size_t>(w)] = true;
        interrupt_(w);
      }
  // Everyone waiting is told to stop; later requests get the same answer.
  for (const Caller& w : at_barrier_) send(w, Reply{.status = Status::aborted});
  at_barrier_.clear();
  for (auto& [number, lock] : locks_) {
    for (const LockWaiter& w : lock.waiting) send(w.caller, Reply{.status = Status::aborted});
    lock.waiting.clear();
  }
  lock_since_.clear();
}

// A direct copy's offset comes from another process under MPI (where the window is missing):
// checked before it addresses anything. A put is a post, which has no answer: the region fails.
bool Home::direct_in_space(const Request& r, std::size_t bytes) {
  const std::uint64_t space = directory_.pages() * page_size_;
  if (r.page <= space && bytes <= space - r.page) return true;
  const std::string message =
      fmt::format("crc worker {}: {} of {} B at offset {:#x} is outside the shared space of {} B", r.worker,
                  to_string(r.op), bytes, r.page, space);
  if (r.op == Op::direct_get) answer(r, Reply{.status = Status::error, .message = message});
  fail(message);
  return false;
}

void Home::fail(const std::string& message) { fail(std::make_exception_ptr(InvalidArgument(message))); }

void Home::send(const Caller& to, const Reply& reply, std::span<const std::byte> page,
                std::span<const std::uint64_t> invalidations) {
  link_.reply(to, reply, page, invalidations);
  if (to.worker == handling_) answered_ = true;
}

void Home::answer(const Request& r, const Reply& reply, std::span<const std::byte> bytes) {
  send(caller_of(r), reply, bytes);
}

void Home::acquire_reply(const Caller& to) {
  list_.clear();
  directory_.take_invalidations(to.worker, list_);
  send(to, Reply{}, {}, list_);
}

void Home::handle(Request& r) {
  const int w = r.worker;
  switch (r.op) {
    case Op::done:
    case Op::failed: {
      // Counted once: a second end from one worker (a message of another library version, or a
      // damaged one) would end the region before another worker's task.
      if (finished_[static_cast<std::size_t>(w)]) {
        fail(std::make_exception_ptr(
            Error(Errc::system, fmt::format("crc home: worker {} reported the end of its task twice", w))));
        return;
      }
      finished_[static_cast<std::size_t>(w)] = true;
      ++finished_count_;
      if (r.op == Op::failed) {
        std::exception_ptr error = r.error;
        // From another process: the error's type and message (hdsm's own errors name the worker).
        if (!error && r.errc != 0) {
          error = make_error(static_cast<Errc>(r.errc), r.message);
          r.exact = true;  // make_error's own
        }
        if (!error)
          error = std::make_exception_ptr(
              KernelFailure(fmt::format("crc worker {}: the task threw: {}", w, r.message)));
        fail(task_error(error, w, r));
        return;
      }
      if (error_) return;
      if (!at_barrier_.empty())
        fail(fmt::format("crc barrier {}: worker {} ended its task without coming; {}", barrier_round_, w,
                         waiting_at_barrier()));
      for (const auto& [number, lock] : locks_)
        if (lock.holder == w) fail(fmt::format("crc worker {} ended its task holding lock {}", w, number));
      return;
    }
    case Op::single_put:
      for (const std::uint64_t p : r.pages) {
        if (p >= directory_.pages()) {  // from another process under MPI: checked
          fail(fmt::format("crc worker {}: a single writer's page {} is outside the shared space of {} pages",
                           w, p, directory_.pages()));
          return;
        }
        directory_.single_writer_update(p, w);
      }
      return;
    case Op::direct_put: {
      const std::span<const std::byte> bytes = link_.written(r);
      if (!direct_in_space(r, bytes.size())) return;
      std::memcpy(base_ + r.page, bytes.data(), bytes.size());
      if (r.write) answer(r, Reply{});  // sent as a call (threads under ThreadSanitizer): its bytes wait
      return;
    }
    case Op::direct_get:
      if (!direct_in_space(r, page_size_)) return;
      answer(r, Reply{.data = true}, {base_ + r.page, page_size_});
      return;
    default:
      break;
  }
  // Page numbers come from other processes under MPI: checked before they index anything.
  const bool paged = r.op == Op::fetch_read || r.op == Op::fetch_write || r.op == Op::upgrade ||
                     r.op == Op::write_back || r.op == Op::flush_fetch;
  if (paged &&
      (r.page >= directory_.pages() || (r.op == Op::flush_fetch && r.victim >= directory_.pages()))) {
    const std::string message = fmt::format("{} of page {} (victim {}): the shared space has {} pages",
                                            to_string(r.op), r.page, r.victim, directory_.pages());
    answer(r, Reply{.status = Status::error, .message = message});
    // The worker and the home number pages differently: the region ends (a flush_fetch's victim could
    // not land, and a worker that went on would lose it).
    fail(fmt::format("crc worker {}: {}", w, message));
    return;
  }
  if (error_) {
    // The region is ending: a write-back that still comes lands, everything else stops. (A worker
    // told so drops its other modified pages: what a failed region leaves in the space is partly
    // updated, as documented.)
    if (r.op == Op::write_back) directory_.write_back(r.page, w, page(r.page), link_.written(r));
    if (r.op == Op::flush_fetch) directory_.write_back(r.victim, w, page(r.victim), link_.written(r));
    answer(r, Reply{.status = Status::aborted});
    return;
  }
  switch (r.op) {
    case Op::fetch_read:
      directory_.read_fetch(r.page, w);
      if (r.copying)  // the worker copies it: the version it must have copied, or newer
        answer(r, Reply{.version = directory_.version(r.page)});
      else
        answer(r, Reply{.data = true}, page(r.page));
      return;
    case Op::fetch_write:
      directory_.write_fault(r.page, w, /*has_copy=*/false);
      answer(r, Reply{.data = true}, page(r.page));
      return;
    case Op::upgrade:
      if (directory_.write_fault(r.page, w, /*has_copy=*/true))
        answer(r, Reply{.data = true}, page(r.page));
      else
        answer(r, Reply{});
      return;
    case Op::write_back:
      stats_->merged_bytes += directory_.write_back(r.page, w, page(r.page), link_.written(r));
      answer(r, Reply{});
      return;
    case Op::flush_fetch:
      stats_->merged_bytes += directory_.write_back(r.victim, w, page(r.victim), link_.written(r));
      if (r.write)
        directory_.write_fault(r.page, w, false);
      else
        directory_.read_fetch(r.page, w);
      answer(r, Reply{.data = true}, page(r.page));
      return;
    case Op::lock: {
      LockState& lock = locks_[r.number];
      if (lock.holder == w) {
        answer(r, Reply{.status = Status::error, .message = "this worker holds it already"});
        return;
      }
      if (lock.holder < 0) {
        lock.holder = w;
        acquire_reply(caller_of(r));
      } else {
        const Clock::time_point now = Clock::now();  // a worker that waits reads the clock
        lock.waiting.push_back(LockWaiter{caller_of(r), now});
        lock_since_.insert(now);
      }
      return;
    }
    case Op::unlock: {
      const auto it = locks_.find(r.number);
      if (it == locks_.end() || it->second.holder != w) {
        answer(r, Reply{.status = Status::error,
                        .message = it == locks_.end() || it->second.holder < 0
                                       ? std::string("nobody holds it")
                                       : fmt::format("worker {} holds it", it->second.holder)});
        return;
      }
      LockState& lock = it->second;
      answer(r, Reply{});
      if (lock.waiting.empty()) {
        lock.holder = -1;
        return;
      }
      const LockWaiter next = lock.waiting.front();
      lock.holder = next.caller.worker;
      acquire_reply(next.caller);
      lock.waiting.pop_front();
      lock_since_.erase(lock_since_.find(next.since));
      return;
    }
    case Op::barrier: {
      if (finished_count_ != 0) {
        // Every worker that ended without coming, not only the first: each one's task skips it.
        std::vector<int> gone;
        for (int x = 0; x < workers_; ++x)
          if (finished_[static_cast<std::size_t>(x)]) gone.push_back(x);
        answer(r, Reply{.status = Status::aborted});
        fail(fmt::format("crc barrier {}: worker {} came, but {} without coming", barrier_round_, w,
                         gone.size() == 1
                             ? fmt::format("worker {} ended its task", gone[0])
                             : fmt::format("workers {} ended their tasks", fmt::join(gone, ", "))));
        return;
      }
      if (at_barrier_.empty()) barrier_since_ = Clock::now();  // once a barrier, at its first arrival
      at_barrier_.push_back(caller_of(r));
      if (static_cast<int>(at_barrier_.size()) < workers_) return;
      std::size_t released = 0;
      try {
        const ReplyBatch batch(link_);
        for (; released < at_barrier_.size(); ++released) acquire_reply(at_barrier_[released]);
      } catch (...) {
        // The workers released have their replies: only the others are to be told the region failed.
        at_barrier_.erase(at_barrier_.begin(), at_barrier_.begin() + static_cast<std::ptrdiff_t>(released));
        throw;
      }
      at_barrier_.clear();
      ++barrier_round_;
      return;
    }
    default:
      answer(r, Reply{.status = Status::error,
                      .message = fmt::format("unexpected request {}", to_string(r.op))});
  }
}

Reply HomeSelfLink::call(Request& r) {
  throw Unsupported(fmt::format(
      "crc worker {} (the home, in run_with_home): its {} needs the home, which is running the task; a "
      "region the home works in may use read_only, write_single and overwrite_local only",
      r.worker, to_string(r.op)));
}

void HomeSelfLink::post(Request& r) {
  if (r.op != Op::single_put) return;
  for (const std::uint64_t p : r.pages) directory_.single_writer_update(p, r.worker);
}

void HomeSelfLink::get(std::uint64_t offset, std::byte* into, std::size_t bytes) {
  std::memcpy(into, base_ + offset, bytes);
}

void HomeSelfLink::put(std::uint64_t offset, const std::byte* from, std::size_t bytes) {
  std::memcpy(base_ + offset, from, bytes);
}

HomeWorker::HomeWorker(Directory& directory, std::byte* base, int id, std::size_t local_store, Space space,
                       bool zero_copy)
    : link_(directory, base), worker_(id, id + 1, local_store, link_, space) {
  worker_.serve_in_place(zero_copy);
}

void HomeLink::stalled(const std::string& why) {
  std::fprintf(stderr, "hdsm: %s; the home goes on waiting\n", why.c_str());
}

bool describe_failure(const std::exception_ptr& error, Request& r) {
  try {
    std::rethrow_exception(error);
  } catch (const RegionAborted&) {
    return false;
  } catch (const Error& e) {
    r.message = e.what();
    r.errc = static_cast<int>(e.code());
    // make_error's classes: an error of one of them is rebuilt as it was.
    const std::type_info& t = typeid(e);
    r.exact =
        t == typeid(InvalidArgument) || t == typeid(InvalidPointer) || t == typeid(ConfigError) ||
        t == typeid(Unsupported) || t == typeid(NoDevice) || t == typeid(KernelFailure) ||
        (t == typeid(Error) && e.code() != Errc::invalid_argument && e.code() != Errc::invalid_pointer &&
         e.code() != Errc::config && e.code() != Errc::unsupported && e.code() != Errc::no_device &&
         e.code() != Errc::kernel_failure);
  } catch (const std::exception& e) {
    r.message = e.what();
  } catch (...) {
    r.message = "an exception that is not a std::exception";
  }
  return true;
}

bool is_nested_kernel_failure(const std::exception_ptr& error) {
  // The class std::throw_with_nested makes of a KernelFailure, found once by making one.
  static const std::type_info& nested = []() -> const std::type_info& {
    try {
      std::throw_with_nested(KernelFailure(""));
    } catch (const KernelFailure& e) {
      return typeid(e);
    }
    return typeid(KernelFailure);  // not reached: throw_with_nested throws
  }();
  try {
    std::rethrow_exception(error);
  } catch (const KernelFailure& e) {
    return typeid(e) == nested;
  } catch (...) {
    return false;
  }
}

std::exception_ptr task_error(std::exception_ptr error, int worker, const Request& failure) {
  // Only the request's description is read here: the worker's thread may still be releasing the error.
  try {
    std::rethrow_exception(error);
  } catch (const Error&) {
    // hdsm's errors from the worker's own accesses name it already; others (an argument the task
    // got wrong, the program's own hdsm::Error) get its number, where their class can be rebuilt
    // with it (a SystemError, an OutOfDeviceMemory or the program's own subclass go as they are).
    const std::string prefix = fmt::format("crc worker {}", worker);
    if (failure.message.starts_with(prefix + ":") || failure.message.starts_with(prefix + " ") ||
        !failure.exact)
      return error;
    return make_error(static_cast<Errc>(failure.errc), fmt::format("{}: {}", prefix, failure.message));
  } catch (...) {
    return nested_task_error(worker, failure.message);
  }
}

std::exception_ptr nested_task_error(int worker, const std::string& what) {
  return nested_failure(fmt::format("crc worker {}: the task threw: {}", worker, what));
}

std::exception_ptr nested_failure(const std::string& message) noexcept {
  std::exception_ptr cause = std::current_exception();
  try {
    std::throw_with_nested(KernelFailure(message));
  } catch (const KernelFailure&) {
    return std::current_exception();
  } catch (...) {
    return cause;  // out of memory for the wrapper
  }
}

std::exception_ptr nested_failure_of(const std::string& what_failed) noexcept {
  try {
    return nested_failure(fmt::format("{}: {}", what_failed, os::exception_text(std::current_exception())));
  } catch (...) {
    return std::current_exception();
  }
}

std::exception_ptr HomeWorker::run(const std::function<void()>& task, const Geometry& g, int count,
                                   Stats& stats) {
  std::exception_ptr error = worker_.run(task, g, count);
  // The home's own task fails as the workers' do: a KernelFailure naming it, the original nested
  // (under MPI every rank then gets the same type). The workers run meanwhile and the home serves
  // them next, so nothing here may throw: out of memory for the words, the error stays as it is.
  if (error) {
    try {
      const Request failure = worker_.failure(error);  // on this thread, which threw it
      error = task_error(error, worker_.id(), failure);
    } catch (...) {  // NOLINT(bugprone-empty-catch): the error as it was thrown
    }
  }
  add_stats(stats, worker_.stats());
  worker_.reset_stats();
  return error;
}

}  // namespace hdsm::crc::detail
