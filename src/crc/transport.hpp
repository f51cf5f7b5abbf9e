// What the home and the workers say to each other, and the two ends of a transport. Every exchange
// starts at a worker: a call waits for the home's reply, a post does not (the home reads it in
// order with the worker's calls). The home never sends a worker anything it did not ask for. The
// protocol code (home.cpp, worker.cpp) is the same for every transport; only these ends differ:
// threads of one process (lock-free mailboxes, the home copying pages into and out of the local
// stores) or MPI ranks (the pages travel in the messages).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include <hdsm/export.h>
#include <hdsm/error.hpp>

HDSM_VISIBLE_BEGIN
namespace hdsm::crc::detail {

enum class Op : std::uint8_t {
  fetch_read,   // call: the page, for reading
  fetch_write,  // call: the page, for writing
  upgrade,      // call: write permission for a page held for reading (the page again if stale)
  write_back,   // call: merge this modified page
  flush_fetch,  // call: write_back of `victim`, then fetch_read or fetch_write of `page`
  single_put,   // post: every page of `pages` went back whole from a single writer (after the
                //   direct put), or was written in place
  lock,         // call: acquire lock `number`; the reply carries the invalidations
  unlock,       // call: release lock `number` (after the write-backs)
  barrier,      // call: the reply, once every worker came, carries the invalidations
  direct_get,   // call: the bytes at offset `page`, for a read-only or single-writer copy where the
                //   transport has no one-sided copies (no directory bookkeeping)
  direct_put,   // post: a single writer's page at offset `page`, likewise (a call where `write`)
  done,         // post: the task returned (after the last write-backs)
  failed,       // post: the task threw (`error`); counts as done
};

const char* to_string(Op op);

struct Request {
  Op op = Op::done;
  int worker = 0;
  bool write = false;                // flush_fetch: the fetch is for writing
  bool copying = false;              // fetch_read: the worker copies the page itself (shared memory);
                                     //   the reply carries the page's version instead
  std::uint64_t page = 0;            // page number in the shared space
  std::uint64_t victim = 0;          // flush_fetch: the page written back first
  std::int64_t number = 0;           // lock number
  std::uint64_t sequence = 0;        // barrier: the worker's barrier count in this region (for messages)
  std::vector<std::uint64_t> pages;  // single_put: the page numbers
  // Threads transport: where the page goes, where the written page is, where the list goes.
  std::byte* frame = nullptr;
  const std::byte* written = nullptr;
  std::vector<std::uint64_t>* invalidations = nullptr;
  std::exception_ptr error;  // failed (threads)
  std::string message;       // failed (any transport): what() of the error
  int errc = 0;              // failed: the hdsm::Errc of an hdsm error, 0 for any other exception
  bool exact = false;        // failed: an error of errc's own class (not SystemError, not a subclass)
};

/// A task's failure as a failed request says it (message, errc, exact), read on the thread that
/// threw it: the home reads these, never the error object, which that thread may still be releasing.
/// False for RegionAborted (the home ended the region: nothing to report).
bool describe_failure(const std::exception_ptr& error, Request& r);
/// A KernelFailure with the original nested (std::throw_with_nested's, as task_error makes): caught
/// as the KernelFailure that make_error rebuilds elsewhere, though describe_failure does not call it
/// exact.
bool is_nested_kernel_failure(const std::exception_ptr& error);
/// In a catch handler: a KernelFailure saying `message`, the exception being handled nested in it
/// (that exception itself where there is no memory for the wrapper).
std::exception_ptr nested_failure(const std::string& message) noexcept;
/// nested_failure of "`what_failed`: " and the handled exception's what().
std::exception_ptr nested_failure_of(const std::string& what_failed) noexcept;

/// Whom a reply goes to: the parts of a call that its reply needs. Workers queued at a barrier or
/// for a lock wait as these, not as whole requests, which the home would move and destroy.
struct Caller {
  int worker = 0;
  std::byte* frame = nullptr;                           // threads: where the page goes
  std::vector<std::uint64_t>* invalidations = nullptr;  // threads: where the list goes
};
inline Caller caller_of(const Request& r) { return {r.worker, r.frame, r.invalidations}; }

enum class Status : std::uint8_t { ok, error, aborted };

struct Reply {
  Status status = Status::ok;
  bool data = false;          // the page's bytes were delivered into the frame
  std::uint32_t version = 0;  // a copying fetch_read: the page's version when the home counted the reader
  std::string message;        // error: what went wrong (the worker throws InvalidArgument)
};

/// Thrown inside a task when the home ended the region (another worker failed): it unwinds the
/// task, which then counts as done.
struct RegionAborted {};

/// The reply to a direct copy a link sent through the home: its error raised as the worker's own
/// calls raise theirs.
inline void check_direct(const Reply& reply) {
  if (reply.status == Status::aborted) throw RegionAborted{};
  if (reply.status == Status::error) throw InvalidArgument(reply.message);
}

/// The home's end.
class HomeLink {
 public:
  virtual ~HomeLink() = default;
  /// The next request, taking the workers round-robin; false when none came by `deadline`
  /// (time_point::max(): none). The clock is read only when no request is there at once, which the
  /// home's busiest moments, a barrier's arrivals, never pay.
  virtual bool receive(Request& request, std::chrono::steady_clock::time_point deadline) = 0;
  /// The page bytes a write_back or flush_fetch request carries.
  virtual std::span<const std::byte> written(const Request& request) = 0;
  /// Answers a call: `page` (when not empty) goes into the worker's frame, `invalidations` to its
  /// list (empty when the worker calls). The worker waits for it, so a reply is delivered or the
  /// link ends the job; it may throw only before anything reached the worker, and a reply of a status
  /// alone (the home's word that the region failed) never throws.
  virtual void reply(const Caller& to, const Reply& reply, std::span<const std::byte> page,
                     std::span<const std::uint64_t> invalidations) = 0;
  /// The replies between these two calls may be sent together (a barrier's release): each worker's
  /// reply is still delivered once, at the latest by end_batch.
  virtual void begin_batch() {}
  virtual void end_batch() {}
  /// The region failed and some workers still did not end their tasks after the timeout (`why`
  /// says which): by default the home says so and goes on waiting for them; over MPI, where the
  /// workers are processes it cannot stop, the job ends.
  virtual void stalled(const std::string& why);
};

/// A worker's end.
class WorkerLink {
 public:
  virtual ~WorkerLink() = default;
  /// Sends `request` and waits for the reply (page bytes land in request.frame, invalidations in
  /// *request.invalidations).
  virtual Reply call(Request& request) = 0;
  /// call(), running `meanwhile(context)` once the request is on its way (by default before it).
  virtual Reply call(Request& request, void (*meanwhile)(void*), void* context) {
    meanwhile(context);
    return call(request);
  }
  /// Where the worker shares the home's memory: the version of every page (Directory::versions),
  /// so a read miss can copy its page while its request travels. nullptr elsewhere.
  virtual const std::atomic<std::uint32_t>* versions() const { return nullptr; }
  /// Sends `request` without waiting.
  virtual void post(Request& request) = 0;
  /// Direct copies from and to the shared space, without the home (read-only and single-writer
  /// pages): `offset` bytes into the space.
  virtual void get(std::uint64_t offset, std::byte* into, std::size_t bytes) = 0;
  virtual void put(std::uint64_t offset, const std::byte* from, std::size_t bytes) = 0;
};

}  // namespace hdsm::crc::detail
HDSM_VISIBLE_END
