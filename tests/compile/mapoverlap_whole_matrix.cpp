// expect: whole matrices take the matrix form
#include <hdsm/skeletons.hpp>

HDSM_USER_FUNCTION(avg3_m, float, (const float* w), { return (w[-1] + w[0] + w[1]) / 3; })

// A const input cannot take the matrix form, which reads its halo rows through the container; the 1D
// form would run windows across the rows' ends.
void f(hdsm::Matrix<float>& out, const hdsm::Matrix<float>& in) { hdsm::MapOverlap<avg3_m>{}(out, in); }
