#include "apps/cuda.hpp"

#ifdef HDSM_APPS_CUDA
#include "apps/cuda/bodies.hpp"
#endif

#include <stdexcept>

namespace hdsm::apps {

#ifdef HDSM_APPS_CUDA

Kernel with_cuda(Kernel kernel) {
  kernel.cuda_lookup = cuda::find_body(kernel.name.c_str());
  if (kernel.cuda_lookup == nullptr)
    throw std::logic_error("app kernel '" + kernel.name +
                           "' has no CUDA body in apps/cuda (see apps/cuda.hpp)");
  return kernel;
}

bool have_cuda_bodies() { return true; }

#else

Kernel with_cuda(Kernel kernel) { return kernel; }

bool have_cuda_bodies() { return false; }

#endif

}  // namespace hdsm::apps
