// hdsm::cluster::Session: MPI's start and end around one node of the cluster runtime.
#include "cluster/mpi/mpi_transport.hpp"
#include "cluster/node.hpp"
#include "mpi/finalize_hook.hpp"
#include "os/process.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>
#include <mpi.h>

#include <atomic>
#include <cstdio>

namespace hdsm::cluster {
namespace {
std::atomic<bool> session_open{false};
std::atomic<bool> session_finalized_mpi{false};  // a session that initialized MPI finalized it at its end
}  // namespace

struct Session::Impl {
  os::Origin origin;  // a child of fork() may not end the parent's session
  bool owns_mpi = false;
  int level = MPI_THREAD_SINGLE;  // what MPI provides
  std::unique_ptr<detail::MpiTransport> transport;
  std::unique_ptr<detail::Node> node;
  std::unique_ptr<mpi::FinalizeHook> hook;  // ends the session at the program's MPI_Finalize
  // Kept from the start: the session's node is gone after the program's MPI_Finalize.
  int rank = 0, ranks = 1;
  bool lazy = false;
};

Session::Session() : impl_(std::make_unique<Impl>()) { open(nullptr, nullptr, std::nullopt); }
Session::Session(int* argc, char*** argv) : impl_(std::make_unique<Impl>()) {
  open(argc, argv, std::nullopt);
}
Session::Session(Options options) : impl_(std::make_unique<Impl>()) {
  open(nullptr, nullptr, std::move(options));
}
Session::Session(int* argc, char*** argv, Options options) : impl_(std::make_unique<Impl>()) {
  open(argc, argv, std::move(options));
}

void Session::open(int* argc, char*** argv, std::optional<Options> given) {
  if (session_open.exchange(true)) throw InvalidArgument("a cluster session is open already: one at a time");
  std::exception_ptr malformed;
  Options options;
  if (given) {
    options = std::move(*given);
  } else {
    try {
      options = Options::from_environment();
    } catch (...) {
      malformed = std::current_exception();
    }
  }
  try {
    int initialized = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized != 0)
      throw InvalidArgument(fmt::format(
          "cluster::Session after MPI_Finalize ({}), and MPI cannot start again in a process: for sessions "
          "one after another, the program calls MPI_Init_thread (MPI_THREAD_MULTIPLE) before the first and "
          "MPI_Finalize after the last",
          session_finalized_mpi.load() ? "the previous session initialized MPI, so it finalized it at its end"
                                       : "the program's"));
    if (initialized == 0) {
      if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        throw Error(Errc::system, "cluster: MPI_Init_thread failed");
      impl_->owns_mpi = true;
    } else {
      MPI_Query_thread(&provided);
    }
    impl_->level = provided;
    const bool multiple = provided >= MPI_THREAD_MULTIPLE;
    impl_->transport = std::make_unique<detail::MpiTransport>(MPI_COMM_WORLD, provided, options.timeout);
    if (!multiple && impl_->transport->rank() == 0 && impl_->transport->ranks() > 1)
      std::fprintf(
          stderr,
          "hdsm cluster: the MPI library gives %s, not MPI_THREAD_MULTIPLE: all MPI calls stay on the main "
          "thread, and lazy update and private pages are off (every kernel boundary is eager, every page "
          "shared)\n",
          detail::thread_level_name(provided));
    // A malformed knob joins a collective before it is thrown: every rank of the job takes part in
    // it, whichever constructor it used, so that one rank's bad value stops all of them.
    if (impl_->transport->ranks() > 1) {
      std::uint64_t failed[1] = {malformed ? static_cast<std::uint64_t>(impl_->transport->rank()) + 1 : 0};
      impl_->transport->allreduce(failed, detail::ReduceOp::max);
      if (!malformed && failed[0] != 0)
        throw InvalidArgument(fmt::format(
            "cluster: rank {} found a malformed HDSM_* knob (its message is in its output), so no "
            "rank starts",
            failed[0] - 1));
    }
    if (malformed) std::rethrow_exception(malformed);
    impl_->node = std::make_unique<detail::Node>(*impl_->transport, std::move(options));
    detail::set_session_node(impl_->node.get());
    impl_->rank = impl_->node->rank();
    impl_->ranks = impl_->node->ranks();
    impl_->lazy = impl_->node->lazy_available();
    impl_->hook = std::make_unique<mpi::FinalizeHook>([impl = impl_.get()] {
      // An MPI_Finalize at exit() from a kernel, on one of the rank's threads: left to the process's
      // end, as the session's own end would leave it.
      if (!impl->origin.may_tear_down()) return;
      detail::set_session_node(nullptr);
      impl->node.reset();  // the end's collective, with every rank in MPI_Finalize
      impl->transport.reset();
    });
  } catch (...) {
    impl_->node.reset();
    impl_->transport.reset();
    if (impl_->owns_mpi) {
      MPI_Finalize();
      session_finalized_mpi.store(true);
    }
    session_open.store(false);
    throw;
  }
}

Session::~Session() {
  detail::set_session_node(nullptr);
  // In a child of fork() the rank's threads and MPI are the parent's; from an exit() in a kernel,
  // one of the rank's threads runs this. Ending the session would wait forever (or for the other
  // ranks): the process's end takes it all, and mpirun sees the rank go.
  if (!impl_->origin.may_tear_down()) {
    if (impl_->hook) impl_->hook->disarm();  // an MPI_Finalize at exit must not end it either
    (void)impl_.release();                   // NOLINT(bugprone-unused-return-value)
    session_open.store(false);
    return;
  }
  impl_->hook.reset();  // without ending anything; after the program's MPI_Finalize, that ended it all
  impl_->node.reset();
  impl_->transport.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (impl_->owns_mpi && finalized == 0) {
    int main = 0;
    MPI_Is_thread_main(&main);
    // MPI_Finalize belongs on the thread that initialized MPI, whatever the thread level.
    if (main != 0) {
      MPI_Finalize();
      session_finalized_mpi.store(true);
    } else {
      std::fprintf(stderr,
                   "hdsm cluster: the session ends on a thread that did not initialize MPI, which gives %s: "
                   "MPI_Finalize is left undone\n",
                   detail::thread_level_name(impl_->level));
    }
  }
  session_open.store(false);
}

int Session::rank() const { return impl_->rank; }
int Session::ranks() const { return impl_->ranks; }
bool Session::lazy_available() const { return impl_->node != nullptr && impl_->lazy; }

}  // namespace hdsm::cluster
