// expect: in/out/inout annotate pointer arguments; this kernel parameter is a value
#include <hdsm/hdsm.hpp>

void call(hdsm::Runtime& rt, int* p) {
  auto k = hdsm::per_thread("k", [](const hdsm::Thread&, int) {});
  rt.call(k, hdsm::cover(1), hdsm::in(p));
}
