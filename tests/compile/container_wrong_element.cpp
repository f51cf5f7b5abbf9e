// expect: the container's elements do not match the kernel's pointer parameter
#include <hdsm/hdsm.hpp>

void wrong_element(hdsm::Vector<float>& v) {
  auto k = hdsm::per_thread("k", [](const hdsm::Thread&, int*) {});
  hdsm::launch(0, k, hdsm::cover(1), hdsm::inout(v));
}
