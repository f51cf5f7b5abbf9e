// A runtime's MPI part ended by the program's MPI_Finalize, for the usual shape of an MPI program:
// MPI_Init; a runtime in a local variable; MPI_Finalize; return. The runtime's destructor runs after
// MPI_Finalize there, too late for the collectives that end it, and Open MPI aborts the job.
// MPI_Finalize deletes MPI_COMM_SELF's attributes first, while MPI still works (MPI 3.1 §8.7.1), so an
// attribute there ends the runtime in time. Header-only: the cluster and crc engines share it.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <utility>

namespace hdsm::mpi {

class FinalizeHook {
 public:
  /// `end` runs at most once: at MPI_Finalize, if this is still alive then.
  explicit FinalizeHook(std::function<void()> end) : end_(std::move(end)) {
    if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &on_delete, &keyval_, this) != MPI_SUCCESS) {
      keyval_ = MPI_KEYVAL_INVALID;
      return;
    }
    if (PMPI_Comm_set_attr(MPI_COMM_SELF, keyval_, this) != MPI_SUCCESS) PMPI_Comm_free_keyval(&keyval_);
  }
  /// Removes the attribute without running `end` (unless MPI is finalized: then it ran).
  ~FinalizeHook() {
    int finalized = 0;
    PMPI_Finalized(&finalized);
    if (keyval_ == MPI_KEYVAL_INVALID || finalized != 0) return;
    end_ = nullptr;
    PMPI_Comm_delete_attr(MPI_COMM_SELF, keyval_);
    PMPI_Comm_free_keyval(&keyval_);
  }
  FinalizeHook(const FinalizeHook&) = delete;
  FinalizeHook& operator=(const FinalizeHook&) = delete;

  /// Whether MPI_Finalize ran `end`.
  bool fired() const { return fired_; }

 private:
  static int on_delete(MPI_Comm, int, void*, void* extra) {
    auto* self = static_cast<FinalizeHook*>(extra);
    if (!self->end_) return MPI_SUCCESS;
    self->fired_ = true;
    const std::function<void()> end = std::exchange(self->end_, nullptr);
    try {
      end();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hdsm: ending a runtime at MPI_Finalize failed: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "hdsm: ending a runtime at MPI_Finalize failed\n");
    }
    return MPI_SUCCESS;
  }

  std::function<void()> end_;
  int keyval_ = MPI_KEYVAL_INVALID;
  bool fired_ = false;
};

}  // namespace hdsm::mpi
