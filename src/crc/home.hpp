// The home's side of the protocol: it serves the workers' requests one at a time, round-robin, over
// the directory and the shared space, and keeps the locks (granted first come, first served) and
// the barrier (a counter). It only ever answers: a worker that waits at a barrier or for a lock gets
// its reply when the barrier completes or the lock is handed to it.
#pragma once

#include "crc/directory.hpp"
#include "crc/transport.hpp"
#include "crc/worker.hpp"

#include <hdsm/crc.hpp>
#include <hdsm/error.hpp>

#include <chrono>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <hdsm/export.h>

HDSM_VISIBLE_BEGIN
namespace hdsm::crc::detail {

/// An exception of the hdsm error type `code` names, with `message`.
std::exception_ptr make_error(Errc code, const std::string& message);

class Home {
 public:
  /// Serves `workers` workers over `link`; the shared space's bytes start at `base`.
  Home(HomeLink& link, Directory& directory, std::byte* base, int workers, std::chrono::milliseconds timeout);

  /// One region: serves until every worker posted done or failed. The first error (a worker's, or a
  /// barrier or lock that not every worker reached) is returned; the region's other workers were
  /// told to stop at their next request.
  std::exception_ptr serve(std::size_t page_size, Stats& stats);
  /// How the home stops a worker that asks nothing once the region failed (threads: its next access
  /// throws); unset, it waits for the worker's next request.
  void set_interrupt(std::function<void(int worker)> interrupt) { interrupt_ = std::move(interrupt); }

 private:
  void handle(Request& r);
  std::span<std::byte> page(std::uint64_t number) { return {base_ + number * page_size_, page_size_}; }
  void fail(std::exception_ptr error);
  void fail(const std::string& message);
  /// Every reply goes through here (link_.reply), noting one to the worker whose request is handled.
  void send(const Caller& to, const Reply& reply, std::span<const std::byte> page = {},
            std::span<const std::uint64_t> invalidations = {});
  void answer(const Request& r, const Reply& reply, std::span<const std::byte> page = {});
  void acquire_reply(const Caller& to);
  bool direct_in_space(const Request& r, std::size_t bytes);
  std::string waiting_at_barrier() const;
  using Clock = std::chrono::steady_clock;
  /// When the longest wait (at the barrier, for a lock, for the workers to end a failed region)
  /// reaches the timeout; time_point::max() when nobody waits.
  Clock::time_point next_deadline() const;
  /// What has waited `timeout_` by `now` fails the region (or, once it failed, is reported stalled).
  void expire(Clock::time_point now);

  struct LockWaiter {
    Caller caller;
    Clock::time_point since;  // when it asked
  };
  struct LockState {
    int holder = -1;
    std::deque<LockWaiter> waiting;
  };

  HomeLink& link_;
  Directory& directory_;
  std::byte* base_;
  int workers_;
  std::chrono::milliseconds timeout_;
  std::size_t page_size_ = 0;
  Stats* stats_ = nullptr;
  // The region's state.
  std::vector<bool> finished_;
  int finished_count_ = 0;
  std::vector<Caller> at_barrier_;
  Clock::time_point barrier_since_;  // the barrier's first arrival
  std::uint64_t barrier_round_ = 0;
  std::map<std::int64_t, LockState> locks_;
  std::multiset<Clock::time_point> lock_since_;  // when each request queued for a lock asked
  std::exception_ptr error_;
  Clock::time_point failed_at_;  // when error_ was set
  std::function<void(int)> interrupt_;
  std::vector<bool> interrupted_;  // this region: the workers told to stop
  bool stall_reported_ = false;    // this region: HomeLink::stalled was called
  // A region where no request came for a whole timeout while tasks run: said once on stderr (a
  // worker that waits on another's write without an acquire spins on its buffer for good). Checked
  // by the message count at each timeout, so the request path reads no clock.
  Clock::time_point quiet_check_;
  std::uint64_t messages_at_check_ = 0;
  bool quiet_said_ = false;
  int handling_ = -1;      // the worker whose request handle() serves
  bool answered_ = false;  // handle() replied to it (the catch in serve() must not again)
  std::vector<std::uint64_t> list_;
};

/// The home's own link in regions it works in (run_with_home): direct copies are its own memory, a
/// single writer's pages go straight into its directory, and anything that needs serving is
/// refused (the home is busy with the task).
class HomeSelfLink final : public WorkerLink {
 public:
  HomeSelfLink(Directory& directory, std::byte* base) : directory_(directory), base_(base) {}
  Reply call(Request& r) override;
  void post(Request& r) override;
  void get(std::uint64_t offset, std::byte* into, std::size_t bytes) override;
  void put(std::uint64_t offset, const std::byte* from, std::size_t bytes) override;

 private:
  Directory& directory_;
  std::byte* base_;
};

/// A task's error as the region reports it: hdsm's errors naming the worker (prefixed with it where
/// their class can be rebuilt), any other a KernelFailure naming `worker` with the original nested.
/// `failure`: the error as describe_failure() told it.
std::exception_ptr task_error(std::exception_ptr error, int worker, const Request& failure);
std::exception_ptr nested_task_error(int worker, const std::string& what);

/// The home as the last of the region's workers (run_with_home), on its own memory.
class HomeWorker {
 public:
  /// Worker `id` (the region's count less one) over the shared space at `base` (`space` as the
  /// workers name it), with a local store of `local_store` bytes.
  HomeWorker(Directory& directory, std::byte* base, int id, std::size_t local_store, Space space,
             bool zero_copy);
  /// The home's share of a region of `count` workers; its counters are added to `stats`. Returns
  /// what the task threw.
  std::exception_ptr run(const std::function<void()>& task, const Geometry& g, int count, Stats& stats);

 private:
  HomeSelfLink link_;
  Worker worker_;
};

}  // namespace hdsm::crc::detail
HDSM_VISIBLE_END
