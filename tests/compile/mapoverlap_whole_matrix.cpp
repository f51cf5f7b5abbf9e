// expect: a whole matrix takes a matrix form: mo.rows(out, in)
#include <hdsm/skeletons.hpp>

HDSM_USER_FUNCTION(avg3_m, float, (const float* w), { return (w[-1] + w[0] + w[1]) / 3; })

// The 1D form would run windows across the rows' ends: refused, with the matrix forms named.
void f(hdsm::Matrix<float>& out, hdsm::Matrix<float>& in) { hdsm::MapOverlap<avg3_m>{}(out, in); }
