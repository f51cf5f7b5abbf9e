// Writers to standard error that are async-signal-safe (write(2) only: no locks, no allocation, no
// stdio), for messages printed from inside the SIGSEGV dispatcher and its resolvers.
#pragma once

#include <unistd.h>
#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace hdsm::os::signal_safe {

inline void write_all(const char* text, std::size_t n) noexcept {
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, text, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // nothing sensible to do about a failing stderr inside a signal handler
    text += w;
    n -= static_cast<std::size_t>(w);
  }
}

inline void write_str(const char* text) noexcept {
  std::size_t n = 0;
  while (text[n] != '\0') ++n;
  write_all(text, n);
}

inline void write_hex(std::uintptr_t value) noexcept {
  char buf[2 + 2 * sizeof(value)];
  char* p = buf + sizeof(buf);
  do {
    *--p = "0123456789abcdef"[value & 0xf];
    value >>= 4;
  } while (value != 0);
  *--p = 'x';
  *--p = '0';
  write_all(p, static_cast<std::size_t>(buf + sizeof(buf) - p));
}

inline void write_decimal(std::uint64_t value) noexcept {
  char buf[20];
  char* p = buf + sizeof(buf);
  do {
    *--p = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  write_all(p, static_cast<std::size_t>(buf + sizeof(buf) - p));
}

}  // namespace hdsm::os::signal_safe
