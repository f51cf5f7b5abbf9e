// What the apps' OpenCL C kernel bodies share. Every app sets the OpenCL body next to its host body
// with hdsm::with_opencl (the __kernel function is named as the Kernel; arguments in order: buffers
// as __global pointers, values by value with the same layout). Constants both bodies use reach the OpenCL C
// source as #defines made from the C++ constants, so the two cannot drift apart.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hdsm::apps {

/// An app kernel's OpenCL C body (for hdsm::with_opencl) from its source: floating-point
/// contraction off, as in the host bodies (compiled without FMA), so float expressions round alike on
/// both.
std::string opencl_source(std::string_view source);

/// "#define NAME value\n" for an OpenCL C source: floats as exact hexadecimal float literals,
/// unsigned values with a u suffix.
std::string cl_define(std::string_view name, float value);
std::string cl_define(std::string_view name, std::uint32_t value);
std::string cl_define(std::string_view name, int value);

}  // namespace hdsm::apps
