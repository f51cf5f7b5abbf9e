// A program that initializes MPI with MPI_THREAD_FUNNELED promises that only its main thread calls
// MPI. A cluster session opened on another thread, and a launch from another thread where it needs
// MPI (on more than one rank), are refused with hdsm::Unsupported before any MPI call, on every
// rank alike, instead of breaking MPI's rules; the main thread's calls work. Exits 0 when they do.
#include <hdsm/cluster.hpp>
#include <hdsm/error.hpp>

#include <mpi.h>

#include <cstdio>
#include <string>
#include <thread>

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
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return all == 0 ? 0 : 1;
}
