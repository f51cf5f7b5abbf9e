#include "apps/cuda.hpp"

namespace hdsm::apps {

#ifdef HDSM_APPS_CUDA
bool have_cuda_bodies() { return true; }
#else
bool have_cuda_bodies() { return false; }
#endif

}  // namespace hdsm::apps
