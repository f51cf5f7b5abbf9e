// Typed errors of hdsm. Every public call that fails throws one of these; the C API maps them to
// hdsm_status codes. Messages name the object, the size and what to do.
#pragma once

#include <hdsm/export.h>

#include <cstddef>
#include <stdexcept>
#include <string>

HDSM_VISIBLE_BEGIN
namespace hdsm {

enum class Errc {
  invalid_argument = 1,  // a size, range or handle that cannot be right (zero size, past the end)
  invalid_pointer,       // freeing or using a pointer/handle that hdsm does not own (or owns no more)
  out_of_device_memory,  // a device allocation above the free capacity
  config,                // an unknown or malformed HDSM_* setting
  unsupported,           // the device cannot do this (no peer path, no body for the backend)
  no_device,             // no device of the requested kind
  kernel_failure,        // a kernel body threw or failed
  system,                // a system call failed
};

/// Short lower-case name of an error code ("out_of_device_memory").
const char* to_string(Errc code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& message);
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& message) : Error(Errc::invalid_argument, message) {}
};

class InvalidPointer : public Error {
 public:
  explicit InvalidPointer(const std::string& message) : Error(Errc::invalid_pointer, message) {}
};

class OutOfDeviceMemory : public Error {
 public:
  OutOfDeviceMemory(const std::string& device, std::size_t requested, std::size_t used, std::size_t capacity);
  /// A space that is not a device's (the shared spaces of crc and the cluster): `remedy` names the
  /// setting that raises its capacity.
  OutOfDeviceMemory(const std::string& device, std::size_t requested, std::size_t used, std::size_t capacity,
                    const std::string& remedy);
  std::size_t requested() const noexcept { return requested_; }
  std::size_t used() const noexcept { return used_; }
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  std::size_t requested_, used_, capacity_;
};

class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message) : Error(Errc::config, message) {}
};

class Unsupported : public Error {
 public:
  explicit Unsupported(const std::string& message) : Error(Errc::unsupported, message) {}
};

class NoDevice : public Error {
 public:
  explicit NoDevice(const std::string& message) : Error(Errc::no_device, message) {}
};

class KernelFailure : public Error {
 public:
  explicit KernelFailure(const std::string& message) : Error(Errc::kernel_failure, message) {}
};

class SystemError : public Error {
 public:
  /// `call` is the failing system call ("mmap"), `object` what it was applied to, `err` the errno.
  SystemError(const std::string& call, const std::string& object, int err);
  int error_number() const noexcept { return errno_; }

 private:
  int errno_;
};

/// Human-readable byte count: "4 KiB", "1.5 GiB", "17 B".
std::string format_bytes(std::size_t bytes);

}  // namespace hdsm

HDSM_VISIBLE_END
