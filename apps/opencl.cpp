#include "apps/opencl.hpp"

#include <fmt/format.h>

namespace hdsm::apps {

Kernel with_opencl(std::string_view source, Kernel kernel) {
  kernel.opencl_source = fmt::format("#pragma OPENCL FP_CONTRACT OFF\n{}", source);
  return kernel;
}

std::string cl_define(std::string_view name, float value) {
  return fmt::format("#define {} {:a}f\n", name, value);
}
std::string cl_define(std::string_view name, std::uint32_t value) {
  return fmt::format("#define {} {}u\n", name, value);
}
std::string cl_define(std::string_view name, int value) {
  return fmt::format("#define {} {}\n", name, value);
}

}  // namespace hdsm::apps
