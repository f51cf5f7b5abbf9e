// The threads transport: workers are threads of this process. Each worker has a lock-free
// single-producer single-consumer mailbox to the home and one reply slot; the home copies pages
// straight into and out of the workers' local stores (the local addresses travel in the requests).
// Every wait spins first, then sleeps: a spinning hand-off costs about a microsecond on a virtual
// machine, a futex wake-up tens.
#pragma once

#include "crc/transport.hpp"

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace hdsm::crc::detail {

class ThreadsTransport {
 public:
  /// How a wait for the other side spins: `ns` before it sleeps, the first `quiet_ns` of them
  /// without yielding the core.
  struct Spin {
    std::uint64_t ns = 0;
    std::uint64_t quiet_ns = 0;
  };
  /// `workers` mailboxes over the shared space at `base`.
  ThreadsTransport(int workers, std::byte* base, Spin spin);
  ~ThreadsTransport();

  HomeLink& home();
  WorkerLink& worker(int w);

  /// The page size of the write-backs the home reads (set between regions).
  void set_page_size(std::size_t bytes);
  /// The directory's page versions, which the workers read to copy pages themselves on read misses
  /// (set between regions; nullptr: the home copies).
  void set_versions(const std::atomic<std::uint32_t>* versions);

  struct Mailbox;
  struct Doorbell;
  class Home;
  class Worker;

 private:
  std::unique_ptr<Doorbell> bell_;
  std::vector<std::unique_ptr<Mailbox>> boxes_;
  std::unique_ptr<Home> home_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace hdsm::crc::detail
