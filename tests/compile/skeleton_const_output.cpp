// expect: a skeleton's output cannot be a const container
#include <hdsm/skeletons.hpp>

HDSM_USER_FUNCTION(twice_c, float, (float a), { return 2 * a; })

void f(const hdsm::Vector<float>& out, hdsm::Vector<float>& in) { hdsm::Map<twice_c>{}(out, in); }
