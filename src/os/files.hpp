// Whole-file writes: every byte or an error, and a file replaced whole or not at all. The program
// cache keeps compiled kernels with them, and `hdsm bench` its results.
#pragma once

#include <hdsm/export.h>

#include <string>
#include <string_view>

#include <sys/types.h>

HDSM_VISIBLE_BEGIN
namespace hdsm::os {

/// Writes all of `data` to `fd` (again after EINTR and short writes); false with errno set.
bool write_all(int fd, std::string_view data) noexcept;

/// Writes `content` to a new file in `path`'s folder (O_EXCL | O_NOFOLLOW, permissions `mode` less the
/// umask) and renames it over `path`: a reader sees the old file or the whole new one, never part of
/// it (a full disk, an interrupt), and a symbolic link planted at `path` is replaced, not followed.
/// Nothing is left behind on failure. Returns the failure, naming the call and the file, or "".
std::string replace_file(const std::string& path, std::string_view content, mode_t mode);

}  // namespace hdsm::os
HDSM_VISIBLE_END
