// expect: output k's elements are what the user function's k-th parameter points to
#include <hdsm/skeletons.hpp>

HDSM_USER_FUNCTION(two, void, (float* a, int* b, float x), {
  *a = x;
  *b = (int)x;
})

void wrong(hdsm::Vector<float>& a, hdsm::Vector<float>& b, hdsm::Vector<float>& x) {
  hdsm::Map<two>{}(a, b, x);
}
