// An on-disk cache of compiled kernel programs (OpenCL binaries), so a program is built from source
// once per machine rather than once per process. Entries are files named by a hash of their key
// and holding the whole key, so a hash collision or a stale entry is a miss, never a wrong binary.
// The cache is an optimisation: a failure to read or write it is reported once on stderr (naming
// the call and the path) and the kernel is built from source.
#pragma once

#include <hdsm/export.h>

#include <atomic>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

HDSM_VISIBLE_BEGIN
namespace hdsm {

class ProgramCache {
 public:
  /// Entries larger than this are neither written nor read.
  static constexpr std::size_t kMaxEntryBytes = 256u << 20;

  /// `dir` as HDSM_CACHE_DIR gives it: "off" disables the cache; empty means the default
  /// location, $XDG_CACHE_HOME/hdsm or else $HOME/.cache/hdsm (disabled when neither is set).
  /// The directory is created (mode 0700) on the first store. It must belong to this user and not
  /// be writable by others (its binaries run as code); otherwise the cache stays off, with a warning.
  explicit ProgramCache(const std::string& dir);

  bool enabled() const { return !dir_.empty(); }
  const std::string& directory() const { return dir_; }
  /// The file an entry with this key lives in.
  std::string path_for(std::string_view key) const;

  /// The binary stored under exactly this key, or nothing (no entry, another key, a damaged file).
  std::optional<std::vector<unsigned char>> load(std::string_view key) const;
  /// Store `binary` under `key`, replacing what was there; readers never see a partial file.
  void store(std::string_view key, std::span<const unsigned char> binary) const;

 private:
  bool usable_directory(bool create) const;
  void warn(const std::string& what) const;

  std::string dir_;
  mutable std::atomic<bool> warned_{false};
};

}  // namespace hdsm

HDSM_VISIBLE_END
