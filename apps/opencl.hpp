// What the apps' OpenCL C kernel bodies share. Every app sets the OpenCL body next to its host body
// (the __kernel function is named as the Kernel; arguments in order: buffers as __global pointers,
// values by value with the same layout). Constants both bodies use reach the OpenCL C source as
// #defines made from the C++ constants, so the two cannot drift apart.
#pragma once

#include <hdsm/kernel.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace hdsm::apps {

/// `kernel` with `source` as its OpenCL C body. Floating-point contraction is off, as in the host
/// bodies (compiled without FMA), so float expressions round alike on both.
Kernel with_opencl(std::string_view source, Kernel kernel);

/// "#define NAME value\n" for an OpenCL C source: floats as exact hexadecimal float literals,
/// unsigned values with a u suffix.
std::string cl_define(std::string_view name, float value);
std::string cl_define(std::string_view name, std::uint32_t value);
std::string cl_define(std::string_view name, int value);

}  // namespace hdsm::apps
