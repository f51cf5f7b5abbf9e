// expect: a skeleton's output cannot be a part of a const container
#include <hdsm/skeletons.hpp>

HDSM_USER_FUNCTION(twice_q, float, (float a), { return 2 * a; })

void f(const hdsm::Matrix<float>& out, hdsm::Vector<float>& in) { hdsm::Map<twice_q>{}(out.row(0), in); }
