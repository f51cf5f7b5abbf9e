// expect: compiles
#include <hdsm/hdsm.hpp>
#include <hdsm/skeletons.hpp>

#include <cstdint>

HDSM_USER_FUNCTION(twice_p, float, (float a), { return 2 * a; })

// Parts of const containers are inputs: of a typed kernel through in(), and of a skeleton.
void read_parts(const hdsm::Vector<float>& v, const hdsm::Matrix<float>& m, hdsm::Vector<float>& out) {
  auto k = hdsm::per_thread("k", [](const hdsm::Thread&, const float*, float*, std::uint64_t) {});
  hdsm::launch(0, k, hdsm::cover(1), hdsm::in(v.range(1, 2)), hdsm::out(out), 8);
  hdsm::call(k, hdsm::cover(1), hdsm::in(m.row(0)), hdsm::inout(out.range(0, 1)), 8u);
  hdsm::call(k, hdsm::cover(1), hdsm::in(m.submatrix(0, 0, 1, 1)), hdsm::out(out), 8u);
  hdsm::Map<twice_p>{}(out.range(0, 2), v.range(1, 2));
  hdsm::Map<twice_p>{}(out.range(0, 2), m.row(1));
}
