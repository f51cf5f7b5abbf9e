// crc on MPI ranks, linked with hdsm::mpi under the linker's --as-needed (Debian's and Ubuntu's
// default): the program calls nothing in libhdsm_mpi, which the linker therefore drops; libhdsm
// loads it itself.
#include <hdsm/crc.hpp>

#include <cstdio>

namespace crc = hdsm::crc;

int main() {
  crc::Options o = crc::Options::from_environment();
  o.transport = crc::Transport::mpi;
  crc::Runtime rt(o);
  long* total = rt.alloc<long>(1);
  rt.run([&] {
    crc::lock(0);
    crc::write(total, crc::read(total) + 1);
    crc::unlock(0);
  });
  if (rt.is_home()) {
    if (*total != rt.workers())
      return std::printf("consumer_crc_mpi: %ld of %d workers\n", *total, rt.workers()), 1;
    std::printf("consumer_crc_mpi: %d worker(s) ok\n", rt.workers());
  }
  return 0;
}
