// A program that initializes MPI with MPI_THREAD_FUNNELED promises that only its main thread calls
// MPI. A cluster session opened on another thread, and a launch from another thread where it needs
// MPI (on more than one rank), are refused with hdsm::Unsupported before any MPI call, instead of
// breaking MPI's rules; the main thread's calls work. A session that ends on another thread makes no
// MPI call there (it says so, and leaves its communicators to MPI_Finalize): the calls it would
// make are counted through MPI's profiling interface. Exits 0 when all of that holds.
#include <hdsm/cluster.hpp>
#include <hdsm/error.hpp>

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

namespace {

std::atomic<int> calls_off_main{0};  // the interposed calls below, from a thread other than MPI's

void count_thread() {
  int main = 0;
  PMPI_Is_thread_main(&main);
  if (main == 0) ++calls_off_main;
}

}  // namespace

// The calls a session's end makes (a barrier for the page servers, the communicators' frees).
extern "C" int MPI_Barrier(MPI_Comm comm) {
  count_thread();
  return PMPI_Barrier(comm);
}
extern "C" int MPI_Comm_free(MPI_Comm* comm) {
  count_thread();
  return PMPI_Comm_free(comm);
}

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "cluster_funneled: FAILED: %s\n", what.c_str());
  ++failures;
}

// Runs fn on a new thread; the Unsupported message it threw, or "" when it threw nothing.
template <class F>
std::string refusal_on_another_thread(F&& fn) {
  std::string message;
  std::thread([&] {
    try {
      fn();
    } catch (const hdsm::Unsupported& e) {
      message = e.what();
    }
  }).join();
  return message;
}

}  // namespace

int main(int argc, char** argv) {
  namespace cl = hdsm::cluster;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  if (provided != MPI_THREAD_FUNNELED) {
    std::fprintf(stderr, "cluster_funneled: MPI gives level %d, not MPI_THREAD_FUNNELED\n", provided);
    MPI_Finalize();
    return 1;
  }
  cl::Options o = cl::Options::from_environment();
  o.space_bytes = std::size_t{1} << 30;
  o.threads = 2;
  const std::string opened = refusal_on_another_thread([&] { cl::Session s(o); });
  expect(
      opened.find("a session from a thread that did not initialize MPI, which gives MPI_THREAD_FUNNELED") !=
          std::string::npos,
      "a session on another thread: '" + opened + "'");
  {
    cl::Session session(o);
    int* a = cl::alloc<int>(4096);
    const auto k =
        hdsm::per_thread("fill", [](const hdsm::Thread& t, int* p, int v) { p[t.global_x()] = v; });
    const std::string launched = refusal_on_another_thread([&] { cl::launch(k, hdsm::cover(4096), a, 1); });
    // One rank calls no MPI in a launch: it runs there.
    if (session.ranks() > 1)
      expect(launched.find("from a thread that did not initialize MPI") != std::string::npos,
             "a launch on another thread: '" + launched + "'");
    else
      expect(launched.empty(), "a one-rank launch on another thread: '" + launched + "'");
    cl::launch(k, hdsm::cover(4096), a, 7);
    cl::sync();
    if (session.rank() == 0)
      for (int i = 0; i < 4096; i += 511)
        expect(a[i] == 7, "the main thread's launch wrote a[" + std::to_string(i) + "]");
    cl::free(a);
  }
  // A session that ends on another thread.
  {
    auto session = std::make_unique<cl::Session>(o);
    const int before = calls_off_main.load();
    std::thread([&] { session.reset(); }).join();
    expect(calls_off_main.load() == before, "a session that ended on another thread called MPI there");
  }
  expect(calls_off_main.load() == 0, std::to_string(calls_off_main.load()) + " MPI calls off MPI's thread");
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return all == 0 ? 0 : 1;
}
