// A cluster program that calls nothing in libhdsm itself (no kernel): libhdsm_cluster must find
// libhdsm on its own, beside it in the installed tree.
#include <hdsm/cluster.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  hdsm::cluster::Session session(&argc, &argv);
  const std::size_t n = 1000;
  int* global = hdsm::cluster::alloc<int>(n);
  std::vector<int> in(n, 7), out(n, 0);
  hdsm::cluster::memcpy(global, in.data(), n * sizeof(int));
  hdsm::cluster::memcpy(out.data(), global, n * sizeof(int));
  hdsm::cluster::free(global);
  if (out != in) return std::printf("consumer_cluster: wrong result %d\n", out[0]), 1;
  if (session.rank() == 0) std::printf("consumer_cluster: %d rank(s) ok\n", session.ranks());
  return 0;
}
