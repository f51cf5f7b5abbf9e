// expect: compiles
#include <hdsm/skeletons.hpp>

HDSM_USER_FUNCTION(add3, float, (float a, float b, float c), { return a + b + c; })

void right(hdsm::Vector<float>& out, hdsm::Vector<float>& x, hdsm::Vector<float>& y) {
  hdsm::Map<add3>{}(out, x, y, 1);    // two inputs and a uniform (int converts to float)
  hdsm::Map<add3>{}(out, x, y, out);  // three inputs
}
