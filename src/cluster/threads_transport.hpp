// The ranks as threads of one process, for the protocol's unit tests without MPI: collectives meet
// at a barrier of the hub, and a page request calls the holder's server directly. Each rank's global
// memory sits at its own address (the ranks share one address space).
#pragma once

#include "cluster/transport.hpp"

#include <hdsm/export.h>

#include <barrier>
#include <memory>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm::cluster::detail {

class ThreadsHub {
 public:
  explicit ThreadsHub(int ranks);
  ~ThreadsHub();
  ThreadsHub(const ThreadsHub&) = delete;
  ThreadsHub& operator=(const ThreadsHub&) = delete;

  int ranks() const { return ranks_; }
  /// The transport of rank `rank` (one per rank, used by that rank's thread).
  Transport& endpoint(int rank);

  struct Shared;

 private:
  int ranks_;
  std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Transport>> endpoints_;
};

}  // namespace hdsm::cluster::detail

HDSM_VISIBLE_END
