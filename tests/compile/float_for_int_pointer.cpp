// expect: the argument is not a pointer that converts to the kernel's pointer parameter
#include <hdsm/hdsm.hpp>

void call(hdsm::Runtime& rt, float* f) {
  auto k = hdsm::per_thread("k", [](const hdsm::Thread&, int*) {});
  rt.call(k, hdsm::cover(1), f);
}
