// A runtime's MPI part ended by the program's MPI_Finalize, for the usual shape of an MPI program:
// MPI_Init; a runtime in a local variable; MPI_Finalize; return. The runtime's destructor runs after
// MPI_Finalize there, too late for the collectives that end it, and Open MPI aborts the job.
// MPI_Finalize deletes MPI_COMM_SELF's attributes first, while MPI still works (MPI 3.1 §8.7.1), so an
// attribute there ends the runtime in time. Header-only: the cluster and crc engines share it.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <functional>
#include <utility>

#include <sched.h>

namespace hdsm::mpi {

class FinalizeHook {
 public:
  /// `end` runs at most once: at MPI_Finalize, if this is still alive then.
  explicit FinalizeHook(std::function<void()> end) : end_(std::move(end)) {
    if (const int rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &on_delete, &keyval_, this);
        rc != MPI_SUCCESS) {
      keyval_ = MPI_KEYVAL_INVALID;
      std::fprintf(stderr,
                   "hdsm: MPI_Comm_create_keyval failed (%d): a runtime alive at MPI_Finalize will not be "
                   "ended by it (end it before MPI_Finalize)\n",
                   rc);
      return;
    }
    if (const int rc = PMPI_Comm_set_attr(MPI_COMM_SELF, keyval_, this); rc != MPI_SUCCESS) {
      PMPI_Comm_free_keyval(&keyval_);
      std::fprintf(
          stderr,
          "hdsm: MPI_Comm_set_attr on MPI_COMM_SELF failed (%d): a runtime alive at MPI_Finalize will "
          "not be ended by it (end it before MPI_Finalize)\n",
          rc);
    }
  }
  /// Removes the attribute without running `end`; where MPI_Finalize is running it on another thread
  /// (a program that ends its runtime there meanwhile), waits for it to finish.
  ~FinalizeHook() {
    State armed = State::armed;
    if (!state_.compare_exchange_strong(armed, State::disarmed, std::memory_order_acq_rel)) {
      while (state_.load(std::memory_order_acquire) == State::firing) sched_yield();
      return;  // MPI_Finalize ran `end`: the attribute and the key are gone with MPI
    }
    int finalized = 0;
    PMPI_Finalized(&finalized);
    if (keyval_ == MPI_KEYVAL_INVALID || finalized != 0) return;
    PMPI_Comm_delete_attr(MPI_COMM_SELF, keyval_);  // on_delete finds it disarmed
    PMPI_Comm_free_keyval(&keyval_);
  }
  FinalizeHook(const FinalizeHook&) = delete;
  FinalizeHook& operator=(const FinalizeHook&) = delete;

  /// `end` will not run, and nothing is called (no MPI either): for a runtime left to the process's end
  /// (a child of fork(), an exit() from a task), whose teardown a later MPI_Finalize must not start.
  void disarm() noexcept {
    State armed = State::armed;
    state_.compare_exchange_strong(armed, State::disarmed, std::memory_order_acq_rel);
  }
  /// Whether MPI_Finalize ran (or is running) `end`.
  bool fired() const { return state_.load(std::memory_order_acquire) >= State::firing; }

 private:
  enum class State : int { armed, disarmed, firing, fired };

  static int on_delete(MPI_Comm, int, void*, void* extra) {
    auto* self = static_cast<FinalizeHook*>(extra);
    State armed = State::armed;
    if (!self->state_.compare_exchange_strong(armed, State::firing, std::memory_order_acq_rel))
      return MPI_SUCCESS;  // disarmed: the runtime ended first
    try {
      self->end_();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hdsm: ending a runtime at MPI_Finalize failed: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "hdsm: ending a runtime at MPI_Finalize failed\n");
    }
    self->state_.store(State::fired, std::memory_order_release);
    return MPI_SUCCESS;
  }

  std::function<void()> end_;
  int keyval_ = MPI_KEYVAL_INVALID;
  std::atomic<State> state_{State::armed};
};

}  // namespace hdsm::mpi
