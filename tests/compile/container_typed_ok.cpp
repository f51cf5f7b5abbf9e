// expect: compiles
#include <hdsm/hdsm.hpp>

#include <cstdint>

void typed(hdsm::Vector<float>& v, hdsm::Matrix<float>& m) {
  auto k = hdsm::per_thread("k", [](const hdsm::Thread&, const float*, float*, std::uint64_t) {});
  hdsm::launch(0, k, hdsm::cover(1), hdsm::in(v), hdsm::out(m.row(0)), 8);
  hdsm::call(k, hdsm::cover(1), hdsm::in(v.begin() + 1, v.end()), hdsm::inout(m.submatrix(0, 0, 1, 1)), 8u);
}
