// The ranks as threads of one process, for the protocol's unit tests without MPI: collectives meet
// at a barrier of the hub, and a page request calls the holder's server directly. Each rank's global
// memory sits at its own address (the ranks share one address space). Ranks that diverge (meet in
// different collectives, or with different sizes), a rank that left, or a meeting that does not
// complete within the timeout fail every rank's collective, as MPI's error handler would end the
// job: a test then fails instead of hanging.
#pragma once

#include "cluster/transport.hpp"

#include <hdsm/export.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm::cluster::detail {

class ThreadsHub {
 public:
  explicit ThreadsHub(int ranks, std::chrono::milliseconds timeout = std::chrono::minutes(2));
  ~ThreadsHub();
  ThreadsHub(const ThreadsHub&) = delete;
  ThreadsHub& operator=(const ThreadsHub&) = delete;

  int ranks() const { return ranks_; }
  /// The transport of rank `rank` (one per rank, used by that rank's thread).
  Transport& endpoint(int rank);
  /// Rank `rank` will call no more collectives (its thread failed with `why`): the others' fail.
  void leave(int rank, const std::string& why);

  struct Shared;

 private:
  int ranks_;
  std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Transport>> endpoints_;
};

}  // namespace hdsm::cluster::detail

HDSM_VISIBLE_END
