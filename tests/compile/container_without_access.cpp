// expect: say how the kernel uses a container: in(), out() or inout()
#include <hdsm/hdsm.hpp>

void no_access(hdsm::Vector<float>& v, const hdsm::Kernel& k) { hdsm::launch(0, k, hdsm::cover(1), v); }
