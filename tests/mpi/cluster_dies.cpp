// Ranks that part ways must end the job with a message, not hang. Run by ctest:
//  - no argument: rank 1 dies between two launches while rank 0 waits in the next one; mpirun must
//    exit non-zero (WILL_FAIL) well within the timeout;
//  - "alone": rank 1 throws between two launches and catches it outside its session, whose end
//    then waits for rank 0, which has host work longer than HDSM_CLUSTER_TIMEOUT before its next
//    launch: after the timeout rank 1 ends the job with a message naming it (the test passes on that
//    message);
//  - "apart": the same, but rank 0 launches at once: its launch meets rank 1's end and fails with
//    an error naming both calls, and the program ends normally (the test passes on rank 0's error);
//  - "late": rank 0 has host work left after the last launch, longer than HDSM_CLUSTER_TIMEOUT:
//    rank 1, at its session's end with no exception in flight, says so and goes on waiting, and the
//    program ends normally (the test passes on rank 1's two messages, in order);
//  - "late_call": the same in a call: rank 0 has host work before a cluster::sync that rank 1 is
//    already in; rank 1 says it has waited past the timeout and goes on waiting (politely: its wait
//    polls with growing pauses rather than holding a core), and the program ends normally.
#include <hdsm/cluster.hpp>

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

int main(int argc, char** argv) {
  namespace cl = hdsm::cluster;
  const bool apart = argc > 1 && std::strcmp(argv[1], "apart") == 0;
  const bool alone = apart || (argc > 1 && std::strcmp(argv[1], "alone") == 0);
  const bool late_call = argc > 1 && std::strcmp(argv[1], "late_call") == 0;
  const bool late = late_call || (argc > 1 && std::strcmp(argv[1], "late") == 0);
  cl::Options o = cl::Options::from_environment();
  o.space_bytes = std::size_t{1} << 30;
  o.threads = 1;
  int rank = -1;
  try {
    cl::Session session(&argc, &argv, o);
    rank = session.rank();
    int* a = cl::alloc<int>(1024);
    const auto k = hdsm::per_thread("touch", [](const hdsm::Thread& t, int* p) { p[t.global_x()] = 1; });
    cl::launch(k, hdsm::cover(1024), a);
    if (late) {
      if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      if (late_call) cl::sync();
    } else {
      if (rank == 1) {
        if (alone) throw std::runtime_error("rank 1 gives up");
        std::fprintf(stderr, "rank 1 dies now\n");
        _exit(3);
      }
      if (alone && !apart) std::this_thread::sleep_for(std::chrono::milliseconds(5000));
      cl::launch(k, hdsm::cover(1024), a);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "caught: %s\n", e.what());
  }
  if (late) std::fprintf(stderr, "rank %d ended its session\n", rank);
  return 0;
}
