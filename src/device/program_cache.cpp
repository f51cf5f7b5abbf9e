#include "device/program_cache.hpp"

#include "os/errno_text.hpp"
#include "os/files.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <span>
#include <string_view>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace hdsm {
namespace {

using os::errno_text;

// File layout: magic, key length, key, binary length, binary, then a checksum of everything before
// it (lengths and checksum as little-endian u64). A binary damaged past its header, which the
// lengths cannot catch, crashed PoCL in clCreateProgramWithBinary on every run; with the checksum it
// is a miss, rebuilt and replaced. Files of the first layout ("...PRG1", no checksum) are misses too.
constexpr char kMagic[8] = {'H', 'D', 'S', 'M', 'P', 'R', 'G', '2'};
constexpr std::size_t kFixedBytes = 32;  // magic, two lengths, checksum

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}
std::uint64_t fnv1a(std::span<const unsigned char> bytes) {
  return fnv1a(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

std::string default_directory() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): hdsm never changes the environment
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/')
    return std::string(xdg) + "/hdsm";
  // NOLINTNEXTLINE(concurrency-mt-unsafe): as above
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/')
    return std::string(home) + "/.cache/hdsm";
  return {};
}

void put_u64(std::vector<unsigned char>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}
std::uint64_t get_u64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace

ProgramCache::ProgramCache(const std::string& dir)
    : dir_(dir == "off"  ? ""
           : dir.empty() ? default_directory()
                         : dir) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  if (!dir_.empty() && !usable_directory(false)) dir_.clear();
}

void ProgramCache::warn(const std::string& what) const {
  if (warned_.exchange(true)) return;
  // Once per process and message: every runtime (and every backend of one, and `hdsm info`'s trial
  // runtimes) has a cache of its own, and each said the same about the same directory.
  static std::mutex mutex;
  static auto* said = new std::set<std::string>;  // never destroyed: a late runtime may still warn
  {
    const std::lock_guard lock(mutex);
    if (!said->insert(what).second) return;
  }
  std::fprintf(stderr, "hdsm: program cache: %s; kernels are built from source\n", what.c_str());
}

// A directory that does not exist yet is fine until the first store creates it.
bool ProgramCache::usable_directory(bool create) const {
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      warn(fmt::format("stat({}): {}", dir_, errno_text(errno)));
      return false;
    }
    if (!create) return true;
    for (std::size_t at = dir_.find('/', 1);; at = dir_.find('/', at + 1)) {
      const std::string part = dir_.substr(0, at);
      if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
        warn(fmt::format("mkdir({}): {}", part, errno_text(errno)));
        return false;
      }
      if (at == std::string::npos) break;
    }
    if (::stat(dir_.c_str(), &st) != 0) {
      warn(fmt::format("stat({}): {}", dir_, errno_text(errno)));
      return false;
    }
  }
  if (!S_ISDIR(st.st_mode)) {
    warn(fmt::format("{} is not a directory", dir_));
    return false;
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    warn(fmt::format("{} belongs to another user or others may write to it (mode {:o})", dir_,
                     st.st_mode & 07777));
    return false;
  }
  return true;
}

std::string ProgramCache::path_for(std::string_view key) const {
  return fmt::format("{}/{:016x}.bin", dir_, fnv1a(key));
}

std::optional<std::vector<unsigned char>> ProgramCache::load(std::string_view key) const {
  if (!enabled()) return std::nullopt;
  const std::string path = path_for(key);
  // O_NONBLOCK: a FIFO planted under the name would block the open until a writer came (a regular
  // file's reads are not affected); the S_ISREG check below then skips it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno != ENOENT) warn(fmt::format("open({}): {}", path, errno_text(errno)));
    return std::nullopt;
  }
  std::optional<std::vector<unsigned char>> result;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    warn(fmt::format("fstat({}): {}", path, errno_text(errno)));
  } else if (S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
             st.st_size >= static_cast<off_t>(kFixedBytes) &&
             static_cast<std::uint64_t>(st.st_size) <= kMaxEntryBytes) {
    std::vector<unsigned char> file(static_cast<std::size_t>(st.st_size));
    std::size_t got = 0;
    while (got < file.size()) {
      const ssize_t r = ::read(fd, file.data() + got, file.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) warn(fmt::format("read({}): {}", path, errno_text(errno)));
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
    const std::uint64_t key_bytes = got == file.size() ? get_u64(file.data() + 8) : 0;
    const std::size_t summed = file.size() - 8;
    if (got == file.size() && std::memcmp(file.data(), kMagic, 8) == 0 && key_bytes == key.size() &&
        key_bytes <= file.size() - kFixedBytes &&
        std::memcmp(file.data() + 16, key.data(), key.size()) == 0 &&
        get_u64(file.data() + summed) == fnv1a(std::span<const unsigned char>(file.data(), summed))) {
      const std::size_t at = 16 + key.size();
      const std::uint64_t binary_bytes = get_u64(file.data() + at);
      if (binary_bytes == summed - at - 8)
        result.emplace(file.begin() + static_cast<std::ptrdiff_t>(at + 8),
                       file.begin() + static_cast<std::ptrdiff_t>(summed));
    }
  }
  ::close(fd);
  return result;
}

void ProgramCache::store(std::string_view key, std::span<const unsigned char> binary) const {
  if (!enabled() || binary.empty() || key.size() + binary.size() + kFixedBytes > kMaxEntryBytes) return;
  if (!usable_directory(true)) return;
  std::vector<unsigned char> file(kMagic, kMagic + 8);
  file.reserve(kFixedBytes + key.size() + binary.size());
  put_u64(file, key.size());
  file.insert(file.end(), key.begin(), key.end());
  put_u64(file, binary.size());
  file.insert(file.end(), binary.begin(), binary.end());
  put_u64(file, fnv1a(std::span<const unsigned char>(file)));

  const std::string failure = os::replace_file(
      path_for(key), std::string_view(reinterpret_cast<const char*>(file.data()), file.size()), 0600);
  if (!failure.empty()) warn(failure);
}

}  // namespace hdsm
