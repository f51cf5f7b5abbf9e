#include "cluster/threads_transport.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace hdsm::cluster::detail {

namespace {

/// A collective as a rank enters it: its name and two numbers every rank must pass alike.
struct Call {
  const char* name;
  std::uint64_t a = 0, b = 0;
  bool operator==(const Call& o) const { return std::strcmp(name, o.name) == 0 && a == o.a && b == o.b; }
};

}  // namespace

// The hub's barrier, which fails rather than hangs. The last rank to arrive checks that all came to
// the same collective; a rank that waits spins briefly (a hand-off between running threads costs
// under a microsecond, a wake-up tens), then blocks until the round ends, a rank leaves or the
// timeout passes. Once failed, every later meeting fails at once.
class Meet {
 public:
  Meet(int ranks, std::chrono::milliseconds timeout)
      : ranks_(ranks),
        timeout_(timeout),
        calls_(static_cast<std::size_t>(ranks)),
        entered_(static_cast<std::size_t>(ranks), 0) {}

  void arrive_and_wait(int rank, const Call& call) {
    std::unique_lock lock(mutex_);
    if (!broken_.empty()) throw failure();
    const std::uint64_t round = round_.load(std::memory_order_relaxed);
    calls_[static_cast<std::size_t>(rank)] = call;
    entered_[static_cast<std::size_t>(rank)] = round + 1;
    if (++arrived_ == ranks_) {
      arrived_ = 0;
      for (int r = 1; r < ranks_ && broken_.empty(); ++r)
        if (!(calls_[static_cast<std::size_t>(r)] == calls_[0]))
          fail(fmt::format("threads hub: the ranks diverged: rank 0 called {}, rank {} called {}",
                           to_string(calls_[0]), r, to_string(calls_[static_cast<std::size_t>(r)])));
      const std::string diverged = broken_;
      round_.store(round + 1, std::memory_order_release);
      lock.unlock();
      cv_.notify_all();
      if (!diverged.empty()) throw Error(Errc::system, diverged);
      return;
    }
    lock.unlock();
    for (int i = 0; i < kSpins && round_.load(std::memory_order_acquire) == round &&
                    !failed_.load(std::memory_order_relaxed);
         ++i)
      pause();
    lock.lock();
    const auto done = [&] { return round_.load(std::memory_order_relaxed) != round || !broken_.empty(); };
    if (!cv_.wait_for(lock, timeout_, done)) {
      std::string missing;
      for (int r = 0; r < ranks_; ++r)
        if (entered_[static_cast<std::size_t>(r)] != round + 1)
          missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
      fail(fmt::format("threads hub: rank {} waited {} ms in {} for rank(s) {}, which never came", rank,
                       timeout_.count(), to_string(call), missing));
    }
    if (!broken_.empty() && (round_.load(std::memory_order_relaxed) == round || broken_at_ == round))
      throw failure();
  }

  void leave(int rank, const char* why) noexcept {
    const std::lock_guard lock(mutex_);
    if (!broken_.empty()) return;
    try {
      fail(fmt::format("threads hub: rank {} left: {}", rank, why));
    } catch (...) {  // out of memory: the hub of a test, which ends here
      std::fprintf(stderr, "threads hub: rank %d left: %s\n", rank, why);
      std::abort();
    }
  }

 private:
  static constexpr int kSpins = 512;

  static std::string to_string(const Call& c) { return fmt::format("{}({}, {})", c.name, c.a, c.b); }
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  // Under the lock.
  void fail(std::string why) {
    broken_ = std::move(why);
    broken_at_ = round_.load(std::memory_order_relaxed);
    failed_.store(true, std::memory_order_relaxed);
    cv_.notify_all();
  }
  Error failure() const { return Error(Errc::system, broken_); }

  const int ranks_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<std::uint64_t> round_{0};
  std::atomic<bool> failed_{false};
  int arrived_ = 0;                              // in the current round; under the mutex, as everything below
  std::vector<Call> calls_;                      // each rank's collective in its latest round
  std::vector<std::uint64_t> entered_;           // each rank's latest round + 1
  std::string broken_;                           // why the hub failed; empty while it works
  std::uint64_t broken_at_ = ~std::uint64_t{0};  // the round it failed in
};

struct ThreadsHub::Shared {
  Shared(int ranks, std::chrono::milliseconds timeout)
      : meet(ranks, timeout),
        inputs(static_cast<std::size_t>(ranks)),
        sizes(static_cast<std::size_t>(ranks)),
        servers(static_cast<std::size_t>(ranks)) {}
  Meet meet;
  std::vector<const void*> inputs;
  std::vector<std::uint64_t> sizes;
  std::vector<std::atomic<PageServer*>> servers;
};

namespace {

template <class T>
void reduce(std::span<T> out, const std::vector<const void*>& inputs, ReduceOp op) {
  std::vector<T> result(out.size());
  for (std::size_t r = 0; r < inputs.size(); ++r) {
    const T* in = static_cast<const T*>(inputs[r]);
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (r == 0) {
        result[i] = in[i];
      } else if (op == ReduceOp::sum) {
        result[i] = static_cast<T>(result[i] + in[i]);
      } else {
        result[i] = op == ReduceOp::min ? std::min(result[i], in[i]) : std::max(result[i], in[i]);
      }
    }
  }
  std::copy(result.begin(), result.end(), out.begin());
}

class ThreadsTransport final : public Transport {
 public:
  ThreadsTransport(ThreadsHub::Shared& hub, int rank, int ranks) : hub_(hub), rank_(rank), ranks_(ranks) {}

  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }
  bool shared_address_space() const override { return true; }
  bool concurrent_requests() const override { return true; }

  void allreduce(std::span<std::uint32_t> values, ReduceOp op) override { reduce_all(values, op); }
  void allreduce(std::span<std::uint64_t> values, ReduceOp op) override { reduce_all(values, op); }

  std::vector<std::uint64_t> allgather(std::uint64_t value) override {
    hub_.sizes[static_cast<std::size_t>(rank_)] = value;
    meet({"allgather"});
    std::vector<std::uint64_t> all = hub_.sizes;
    meet({"allgather's end"});
    return all;
  }

  void gather(std::span<const std::byte> mine, std::vector<std::byte>& all,
              std::vector<std::uint64_t>& sizes) override {
    hub_.inputs[static_cast<std::size_t>(rank_)] = mine.data();
    hub_.sizes[static_cast<std::size_t>(rank_)] = mine.size();
    count_sent(rank_ == 0 ? 0 : mine.size());
    meet({"gather"});
    if (rank_ == 0) {
      all.clear();
      sizes = hub_.sizes;
      for (int r = 0; r < ranks_; ++r) {
        const auto* in = static_cast<const std::byte*>(hub_.inputs[static_cast<std::size_t>(r)]);
        all.insert(all.end(), in, in + hub_.sizes[static_cast<std::size_t>(r)]);
      }
    }
    meet({"gather's end"});
  }

  void scatter(const std::vector<std::span<const std::byte>>& each, std::vector<std::byte>& mine) override {
    if (rank_ == 0) {
      hub_.inputs[0] = &each;
      for (int r = 1; r < ranks_; ++r) count_sent(each[static_cast<std::size_t>(r)].size());
    }
    meet({"scatter"});
    mine.clear();
    if (rank_ != 0) {
      const auto& all = *static_cast<const std::vector<std::span<const std::byte>>*>(hub_.inputs[0]);
      const std::span<const std::byte> part = all[static_cast<std::size_t>(rank_)];
      mine.assign(part.begin(), part.end());
    }
    meet({"scatter's end"});
  }

  void broadcast(int root, std::span<std::byte> data) override {
    if (rank_ == root) {
      hub_.inputs[static_cast<std::size_t>(root)] = data.data();
      count_sent(data.size() * static_cast<std::uint64_t>(ranks_ - 1));
    }
    // A root or size the ranks do not agree on fails the meeting (MPI would truncate or hang).
    meet({"broadcast", static_cast<std::uint64_t>(root), data.size()});
    if (rank_ != root && !data.empty())
      std::memcpy(data.data(), hub_.inputs[static_cast<std::size_t>(root)], data.size());
    meet({"broadcast's end", static_cast<std::uint64_t>(root), data.size()});
  }

  void barrier() override { meet({"barrier"}); }
  // The hub's meetings have a timeout of their own (the hub's), and fail rather than wait once a
  // rank left.
  bool agree_within(std::span<std::uint64_t> values, std::chrono::milliseconds) override {
    allreduce(values, ReduceOp::max);
    return true;
  }
  void abandon(const char* why) noexcept override { hub_.meet.leave(rank_, why); }

  void serve_pages(PageServer* server) override {
    hub_.servers[static_cast<std::size_t>(rank_)].store(server);
  }
  void stop_serving() override { hub_.servers[static_cast<std::size_t>(rank_)].store(nullptr); }

  void fetch(int holder, std::uint64_t page, std::uint64_t epoch, std::span<std::byte> into) override {
    PageServer* server = hub_.servers[static_cast<std::size_t>(holder)].load();
    if (server == nullptr)
      throw InvalidArgument(
          fmt::format("threads transport: rank {} asked rank {} for page {}, which serves no pages", rank_,
                      holder, page));
    server->serve(page, epoch, into);
  }

 private:
  template <class T>
  void reduce_all(std::span<T> values, ReduceOp op) {
    hub_.inputs[static_cast<std::size_t>(rank_)] = values.data();
    // Each rank reads every rank's values: their lengths, types and operation must agree.
    const Call call{"allreduce", values.size(), sizeof(T) * 8 + static_cast<std::uint64_t>(op)};
    meet(call);
    std::vector<T> copy(values.begin(), values.end());
    reduce(std::span<T>(copy), hub_.inputs, op);
    meet({"allreduce's end", call.a, call.b});
    std::copy(copy.begin(), copy.end(), values.begin());
  }

  void meet(const Call& call) { hub_.meet.arrive_and_wait(rank_, call); }

  ThreadsHub::Shared& hub_;
  int rank_, ranks_;
};

}  // namespace

ThreadsHub::ThreadsHub(int ranks, std::chrono::milliseconds timeout) : ranks_(ranks) {
  if (ranks < 1 || ranks > 16)
    throw InvalidArgument(fmt::format("a threads hub of {} ranks (1 to 16)", ranks));
  shared_ = std::make_unique<Shared>(ranks, timeout);
  for (int r = 0; r < ranks; ++r)
    endpoints_.push_back(std::make_unique<ThreadsTransport>(*shared_, r, ranks));
}

ThreadsHub::~ThreadsHub() = default;

Transport& ThreadsHub::endpoint(int rank) { return *endpoints_.at(static_cast<std::size_t>(rank)); }

void ThreadsHub::leave(int rank, const std::string& why) { shared_->meet.leave(rank, why.c_str()); }

}  // namespace hdsm::cluster::detail
