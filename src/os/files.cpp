#include "os/files.hpp"

#include "os/errno_text.hpp"

#include <fmt/format.h>

#include <cerrno>

#include <fcntl.h>
#include <unistd.h>

namespace hdsm::os {

bool write_all(int fd, std::string_view data) noexcept {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;  // a write that takes nothing would loop forever
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

std::string replace_file(const std::string& path, std::string_view content, mode_t mode) {
  const std::size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string temporary;
  int fd = -1;
  // A hidden name of this process; another writer's (or a crash's) leftover under it is skipped.
  for (unsigned attempt = 0; fd < 0; ++attempt) {
    temporary = fmt::format("{}.{}.{}.{}", folder, name, ::getpid(), attempt);
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0 && (errno != EEXIST || attempt == 100))
      return fmt::format("open of {} failed: {}", temporary, errno_text(errno));
  }
  const bool written = write_all(fd, content);
  const int write_error = errno;
  const bool closed = ::close(fd) == 0;
  const int close_error = errno;
  std::string failure;
  if (!written)
    failure = fmt::format("write of {} failed: {}", temporary, errno_text(write_error));
  else if (!closed)
    failure = fmt::format("close of {} failed: {}", temporary, errno_text(close_error));
  else if (::rename(temporary.c_str(), path.c_str()) != 0)
    failure = fmt::format("rename of {} to {} failed: {}", temporary, path, errno_text(errno));
  if (!failure.empty()) ::unlink(temporary.c_str());
  return failure;
}

}  // namespace hdsm::os
