// expect: std::is_const_v<C>
#include <hdsm/hdsm.hpp>

void write_to_const(const hdsm::Vector<float>& v) {
  auto k = hdsm::per_thread("k", [](const hdsm::Thread&, float*) {});
  hdsm::launch(0, k, hdsm::cover(1), hdsm::out(v));
}
