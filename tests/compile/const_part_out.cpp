// expect: out() of a part of a const container
#include <hdsm/hdsm.hpp>

void write_to_const_part(const hdsm::Vector<float>& v) {
  auto k = hdsm::per_thread("k", [](const hdsm::Thread&, float*) {});
  hdsm::launch(0, k, hdsm::cover(1), hdsm::out(v.range(0, 1)));
}
