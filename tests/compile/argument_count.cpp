// expect: the number of arguments differs from the kernel's parameters
#include <hdsm/hdsm.hpp>

void call(hdsm::Runtime& rt, int* p) {
  auto k = hdsm::per_thread("k", [](const hdsm::Thread&, int*, int) {});
  rt.call(k, hdsm::cover(1), p);
}
