// expect: the annotated pointer does not convert to the kernel's pointer parameter
#include <hdsm/hdsm.hpp>

void call(hdsm::Runtime& rt, double* d) {
  auto k = hdsm::per_thread("k", [](const hdsm::Thread&, const float*) {});
  rt.call(k, hdsm::cover(1), hdsm::in(d));
}
