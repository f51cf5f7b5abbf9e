// expect: the argument is not a pointer that converts to the kernel's pointer parameter
#include <hdsm/hdsm.hpp>

void call(hdsm::Runtime& rt, const float* read_only) {
  auto k = hdsm::per_thread("k", [](const hdsm::Thread&, float*) {});
  rt.call(k, hdsm::cover(1), read_only);
}
