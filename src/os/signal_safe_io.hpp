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

/// One message composed in a buffer and written with one write(2), so that threads reporting at once
/// do not interleave their pieces. A line longer than the buffer ends in "...".
class Line {
 public:
  Line& str(const char* text) noexcept {
    while (*text != '\0') put(*text++);
    return *this;
  }
  Line& hex(std::uintptr_t value) noexcept {
    char buf[2 * sizeof(value)];
    std::size_t n = 0;
    do {
      buf[n++] = "0123456789abcdef"[value & 0xf];
      value >>= 4;
    } while (value != 0);
    put('0');
    put('x');
    while (n > 0) put(buf[--n]);
    return *this;
  }
  Line& decimal(std::uint64_t value) noexcept {
    char buf[20];
    std::size_t n = 0;
    do {
      buf[n++] = static_cast<char>('0' + value % 10);
      value /= 10;
    } while (value != 0);
    while (n > 0) put(buf[--n]);
    return *this;
  }
  /// Writes what was composed (ending a cut line in "...\n") and empties the buffer.
  void write() noexcept {
    if (cut_) {
      static constexpr char kEnd[] = "...\n";
      for (std::size_t i = 0; i < sizeof(kEnd) - 1; ++i) buf_[kSize - (sizeof(kEnd) - 1) + i] = kEnd[i];
      n_ = kSize;
    }
    write_all(buf_, n_);
    n_ = 0;
    cut_ = false;
  }

 private:
  static constexpr std::size_t kSize = 1024;
  void put(char c) noexcept {
    if (n_ < kSize)
      buf_[n_++] = c;
    else
      cut_ = true;
  }
  char buf_[kSize];
  std::size_t n_ = 0;
  bool cut_ = false;
};

}  // namespace hdsm::os::signal_safe
