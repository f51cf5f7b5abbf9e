// The table find_body searches: every .cu file's bodies.
#include "apps/cuda/bodies.hpp"

#include <cstring>

namespace hdsm::apps::cuda {

Lookup find_body(const char* name) {
  const Bodies files[] = {vecadd_bodies(), stencil_bodies(), cp_bodies(),   mri_bodies(), sad_bodies(),
                          tpacf_bodies(),  pns_bodies(),     rpes_bodies(), fft_bodies(), mergesort_bodies()};
  for (const Bodies& file : files)
    for (std::size_t i = 0; i < file.count; ++i)
      if (std::strcmp(file.begin[i].name, name) == 0) return file.begin[i].lookup;
  return nullptr;
}

}  // namespace hdsm::apps::cuda
