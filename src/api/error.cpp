#include <hdsm/error.hpp>

#include "os/errno_text.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>

namespace hdsm {

const char* to_string(Errc code) noexcept {
  switch (code) {
    case Errc::invalid_argument:
      return "invalid_argument";
    case Errc::invalid_pointer:
      return "invalid_pointer";
    case Errc::out_of_device_memory:
      return "out_of_device_memory";
    case Errc::config:
      return "config";
    case Errc::unsupported:
      return "unsupported";
    case Errc::no_device:
      return "no_device";
    case Errc::kernel_failure:
      return "kernel_failure";
    case Errc::system:
      return "system";
  }
  return "unknown";
}

Error::Error(Errc code, const std::string& message) : std::runtime_error(message), code_(code) {}

OutOfDeviceMemory::OutOfDeviceMemory(const std::string& device, std::size_t requested, std::size_t used,
                                     std::size_t capacity)
    : OutOfDeviceMemory(device, requested, used, capacity, std::string()) {}

namespace {

// What an allocation asked for. SIZE_MAX is what a typed allocation asks for when its element count's
// bytes overflow (detail::bytes_of): said as such, not as a size.
std::string requested_text(std::size_t requested) {
  if (requested == SIZE_MAX)
    return "SIZE_MAX bytes (more than any memory: SIZE_MAX itself, or an element count whose size in bytes "
           "overflows)";
  return fmt::format("{} ({} bytes)", format_bytes(requested), requested);
}

}  // namespace

OutOfDeviceMemory::OutOfDeviceMemory(const std::string& device, std::size_t requested, std::size_t used,
                                     std::size_t capacity, const std::string& remedy)
    : Error(Errc::out_of_device_memory,
            remedy.empty()
                ? fmt::format("out of device memory on {}: cannot allocate {}; {} of {} in use.{}", device,
                              requested_text(requested), format_bytes(used), format_bytes(capacity),
                              // SIZE_MAX fits no memory: no free or knob helps, and its text says so.
                              requested == SIZE_MAX ? "" : " Free device memory, or allocate less.")
                : fmt::format("out of memory in the {}: cannot allocate {}; {} of {} in use.{}", device,
                              requested_text(requested), format_bytes(used), format_bytes(capacity),
                              requested == SIZE_MAX ? std::string() : " Free some or raise " + remedy + ".")),
      requested_(requested),
      used_(used),
      capacity_(capacity) {}

SystemError::SystemError(const std::string& call, const std::string& object, int err)
    : Error(Errc::system,
            fmt::format("{} failed on {}: {} (errno {})", call, object, os::errno_text(err), err)),
      errno_(err) {}

std::string format_bytes(std::size_t bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  if (value == static_cast<double>(static_cast<std::uint64_t>(value)))
    return fmt::format("{} {}", static_cast<std::uint64_t>(value), units[unit]);
  return fmt::format("{:.1f} {}", value, units[unit]);
}

}  // namespace hdsm
