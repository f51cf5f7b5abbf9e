// expect: the user function takes one argument per input vector and per uniform
#include <hdsm/skeletons.hpp>

HDSM_USER_FUNCTION(add3, float, (float a, float b, float c), { return a + b + c; })

void wrong_count(hdsm::Vector<float>& out, hdsm::Vector<float>& x) { hdsm::Map<add3>{}(out, x, 1.0f); }
