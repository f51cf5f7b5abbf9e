#include "apps/opencl.hpp"

#include <fmt/format.h>

namespace hdsm::apps {

std::string opencl_source(std::string_view source) {
  return fmt::format("#pragma OPENCL FP_CONTRACT OFF\n{}", source);
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
