#include "cluster/threads_transport.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace hdsm::cluster::detail {

struct ThreadsHub::Shared {
  explicit Shared(int ranks)
      : meet(ranks),
        inputs(static_cast<std::size_t>(ranks)),
        sizes(static_cast<std::size_t>(ranks)),
        servers(static_cast<std::size_t>(ranks)) {}
  std::barrier<> meet;
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
    hub_.meet.arrive_and_wait();
    std::vector<std::uint64_t> all = hub_.sizes;
    hub_.meet.arrive_and_wait();
    return all;
  }

  void gather(std::span<const std::byte> mine, std::vector<std::byte>& all,
              std::vector<std::uint64_t>& sizes) override {
    hub_.inputs[static_cast<std::size_t>(rank_)] = mine.data();
    hub_.sizes[static_cast<std::size_t>(rank_)] = mine.size();
    count_sent(rank_ == 0 ? 0 : mine.size());
    hub_.meet.arrive_and_wait();
    if (rank_ == 0) {
      all.clear();
      sizes = hub_.sizes;
      for (int r = 0; r < ranks_; ++r) {
        const auto* in = static_cast<const std::byte*>(hub_.inputs[static_cast<std::size_t>(r)]);
        all.insert(all.end(), in, in + hub_.sizes[static_cast<std::size_t>(r)]);
      }
    }
    hub_.meet.arrive_and_wait();
  }

  void scatter(const std::vector<std::span<const std::byte>>& each, std::vector<std::byte>& mine) override {
    if (rank_ == 0) {
      hub_.inputs[0] = &each;
      for (int r = 1; r < ranks_; ++r) count_sent(each[static_cast<std::size_t>(r)].size());
    }
    hub_.meet.arrive_and_wait();
    mine.clear();
    if (rank_ != 0) {
      const auto& all = *static_cast<const std::vector<std::span<const std::byte>>*>(hub_.inputs[0]);
      const std::span<const std::byte> part = all[static_cast<std::size_t>(rank_)];
      mine.assign(part.begin(), part.end());
    }
    hub_.meet.arrive_and_wait();
  }

  void broadcast(int root, std::span<std::byte> data) override {
    if (rank_ == root) {
      hub_.inputs[static_cast<std::size_t>(root)] = data.data();
      count_sent(data.size() * static_cast<std::uint64_t>(ranks_ - 1));
    }
    hub_.sizes[static_cast<std::size_t>(rank_)] = data.size();
    hub_.meet.arrive_and_wait();
    if (hub_.sizes[static_cast<std::size_t>(root)] != data.size())
      throw InvalidArgument(
          fmt::format("threads transport: broadcast of {} bytes from rank {} received as {} on rank {}",
                      hub_.sizes[static_cast<std::size_t>(root)], root, data.size(), rank_));
    if (rank_ != root && !data.empty())
      std::memcpy(data.data(), hub_.inputs[static_cast<std::size_t>(root)], data.size());
    hub_.meet.arrive_and_wait();
  }

  void barrier() override { hub_.meet.arrive_and_wait(); }

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
    hub_.meet.arrive_and_wait();
    std::vector<T> copy(values.begin(), values.end());
    reduce(std::span<T>(copy), hub_.inputs, op);
    hub_.meet.arrive_and_wait();
    std::copy(copy.begin(), copy.end(), values.begin());
  }

  ThreadsHub::Shared& hub_;
  int rank_, ranks_;
};

}  // namespace

ThreadsHub::ThreadsHub(int ranks) : ranks_(ranks) {
  if (ranks < 1 || ranks > 16)
    throw InvalidArgument(fmt::format("a threads hub of {} ranks (1 to 16)", ranks));
  shared_ = std::make_unique<Shared>(ranks);
  for (int r = 0; r < ranks; ++r)
    endpoints_.push_back(std::make_unique<ThreadsTransport>(*shared_, r, ranks));
}

ThreadsHub::~ThreadsHub() = default;

Transport& ThreadsHub::endpoint(int rank) { return *endpoints_.at(static_cast<std::size_t>(rank)); }

}  // namespace hdsm::cluster::detail
