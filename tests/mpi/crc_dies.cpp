// crc over MPI: ranks that part ways end the job with a message, or say that they wait, never a
// silent hang. Run by ctest on two ranks with HDSM_CRC_TIMEOUT short:
//  - "alone": rank 1 throws between regions and catches it outside its runtime, whose end then waits
//    for rank 0, which sits in the program's own MPI_Barrier: after the timeout rank 1 ends the job
//    with a message naming it (the test passes on that message);
//  - "late_call": rank 0 has host work longer than the timeout before a region that rank 1 is
//    already in: rank 1 says it has waited, naming the call, goes on waiting, and the program ends
//    normally (the test passes on rank 1's two messages, in order).
#include <hdsm/crc.hpp>

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

int main(int argc, char** argv) {
  namespace crc = hdsm::crc;
  const bool late_call = argc > 1 && std::strcmp(argv[1], "late_call") == 0;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    crc::Options o = crc::Options::from_environment();
    o.transport = crc::Transport::mpi;
    crc::Runtime rt(o);
    if (late_call) {
      if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      rt.run([] { crc::barrier(); });
    } else {
      if (rank == 1) throw std::runtime_error("rank 1 gives up");
      MPI_Barrier(MPI_COMM_WORLD);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d caught: %s\n", rank, e.what());
  }
  std::fprintf(stderr, "rank %d ended its runtime\n", rank);
  MPI_Finalize();
  return 0;
}
