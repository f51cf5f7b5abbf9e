// Rank 1 dies between two launches while rank 0 waits in the next one: the job must end with a
// message from mpirun (this program never exits 0), not hang. Run by ctest with WILL_FAIL.
#include <hdsm/cluster.hpp>

#include <unistd.h>
#include <cstdio>

int main(int argc, char** argv) {
  namespace cl = hdsm::cluster;
  cl::Options o = cl::Options::from_environment();
  o.space_bytes = std::size_t{1} << 30;
  o.threads = 1;
  cl::Session session(&argc, &argv, o);
  int* a = cl::alloc<int>(1024);
  const auto k = hdsm::per_thread("touch", [](const hdsm::Thread& t, int* p) { p[t.global_x()] = 1; });
  cl::launch(k, hdsm::cover(1024), a);
  if (session.rank() == 1) {
    std::fprintf(stderr, "rank 1 dies now\n");
    _exit(3);
  }
  cl::launch(k, hdsm::cover(1024), a);
  return 0;
}
