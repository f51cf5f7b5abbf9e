// expect: compiles
#include <hdsm/skeletons.hpp>

HDSM_USER_FUNCTION(avg3_r, float, (const float* w), { return (w[-1] + w[0] + w[1]) / 3; })

// What the refusal of the 1D form on whole matrices points to.
void f(hdsm::Matrix<float>& out, hdsm::Matrix<float>& in) {
  hdsm::MapOverlap<avg3_r> mo;
  mo.rows(out, in);
  mo.cols(out, in);
  mo(out.row(0), in.row(1));
}
