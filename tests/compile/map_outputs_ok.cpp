// expect: compiles
#include <hdsm/skeletons.hpp>

HDSM_USER_FUNCTION(two, void, (float* a, int* b, float x, float k), {
  *a = x * k;
  *b = (int)x;
})

void right(hdsm::Vector<float>& a, hdsm::Vector<int>& b, hdsm::Vector<float>& x) {
  hdsm::Map<two>{}(a, b, x, 2.0f);  // two outputs, one input, one uniform
  hdsm::Map<two>{}(a, b, a, 2.0f);  // an output is also the input
}
