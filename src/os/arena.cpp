#include "os/arena.hpp"

#include <hdsm/error.hpp>

#include "os/mapping.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <iterator>
#include <string_view>
#include <utility>

namespace hdsm::os {
namespace {

// Reserve `bytes` of address space aligned to `align` (inaccessible, no memory committed).
std::uintptr_t reserve_aligned(std::size_t bytes, std::size_t align, const std::string& what) {
  const std::size_t total = bytes + align;
  void* p = ::mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw SystemError("mmap", fmt::format("{} ({} of address space)", what, format_bytes(total)), errno);
  const auto raw = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t aligned = (raw + align - 1) & ~(std::uintptr_t{align} - 1);
  // Trim the unaligned head and the tail; failures here only leave address space reserved.
  if (aligned > raw) ::munmap(p, aligned - raw);
  if (const std::uintptr_t end = raw + total, used = aligned + bytes; end > used)
    ::munmap(reinterpret_cast<void*>(used), end - used);
  return aligned;
}

// Reserve [at, at + bytes) exactly, failing with EEXIST where anything is mapped in it.
std::uintptr_t reserve_at(std::uintptr_t at, std::size_t bytes, const std::string& what) {
  void* want = reinterpret_cast<void*>(at);
  void* p = ::mmap(want, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                   -1, 0);
  if (p == MAP_FAILED)
    throw SystemError("mmap", fmt::format("{} ({} at {})", what, format_bytes(bytes), want), errno);
  if (p != want) {  // a kernel before 4.17 takes MAP_FIXED_NOREPLACE as a hint
    ::munmap(p, bytes);
    throw SystemError("mmap", fmt::format("{} ({} at {})", what, format_bytes(bytes), want), EEXIST);
  }
  return at;
}

}  // namespace

Arena::Arena(unsigned segments, std::size_t segment_bytes, std::size_t keep_bytes)
    : Arena(segments, segment_bytes, keep_bytes, 0) {}

Arena::Arena(unsigned segments, std::size_t segment_bytes, std::size_t keep_bytes, std::uintptr_t user_at)
    : segments_(segments), keep_limit_(keep_bytes), kept_(segments) {
  if (segments == 0) throw InvalidArgument("an arena needs at least one segment");
  if (!std::has_single_bit(segment_bytes) || segment_bytes < page_size())
    throw InvalidArgument(fmt::format("arena segment size {} must be a power of two of at least one page",
                                      format_bytes(segment_bytes)));
  if (segment_bytes > (std::size_t{1} << 46) / segments)
    throw InvalidArgument(fmt::format("arena of {} segments of {} exceeds the address space", segments,
                                      format_bytes(segment_bytes)));
  shift_ = static_cast<unsigned>(std::countr_zero(segment_bytes));
  user_bytes_ = std::uintptr_t{segments} << shift_;
  try {
    if (user_at % segment_bytes != 0)
      throw InvalidArgument(fmt::format("arena user view at {:#x} is not aligned to its segment size {}",
                                        user_at, format_bytes(segment_bytes)));
    user_begin_ = user_at != 0
                      ? reserve_at(user_at, user_bytes_, "user view of the shared-object arena")
                      : reserve_aligned(user_bytes_, segment_bytes, "user view of the shared-object arena");
    shadow_begin_ = reserve_aligned(user_bytes_, segment_bytes, "shadow view of the shared-object arena");
    for (unsigned s = 0; s < segments; ++s) {
      const std::string what = fmt::format("arena segment {}", s);
      int fd = ::memfd_create(fmt::format("hdsm segment {}", s).c_str(), MFD_CLOEXEC);
      if (fd < 0) throw SystemError("memfd_create", what, errno);
      // In a process started with a standard descriptor closed (a daemon's 2>&-), the memfd would be
      // that descriptor, and every message to stderr (hdsm's or the program's) would be written into
      // the segment: into the first shared objects. Above 2 it stays out of their way.
      if (fd <= STDERR_FILENO) {
        const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
        const int error = errno;
        ::close(fd);
        if (moved < 0) throw SystemError("fcntl(F_DUPFD_CLOEXEC)", what, error);
        fd = moved;
      }
      memfds_.push_back(fd);
      if (::ftruncate(fd, static_cast<off_t>(segment_bytes)) != 0)
        throw SystemError("ftruncate", what, errno);
      if (::mmap(user(s, 0), segment_bytes, PROT_NONE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd, 0) ==
          MAP_FAILED)
        throw SystemError("mmap", "user view of " + what, errno);
      if (::mmap(shadow(s, 0), segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE,
                 fd, 0) == MAP_FAILED)
        throw SystemError("mmap", "shadow view of " + what, errno);
    }
    // A child of fork() gets neither view: the memfd is shared, so its stores would land in the
    // parent's objects, behind the parent's protocol. It faults instead, and the dispatcher says why.
    if (::madvise(reinterpret_cast<void*>(user_begin_), user_bytes_, MADV_DONTFORK) != 0)
      throw SystemError("madvise(MADV_DONTFORK)", "user view of the shared-object arena", errno);
    if (::madvise(reinterpret_cast<void*>(shadow_begin_), user_bytes_, MADV_DONTFORK) != 0)
      throw SystemError("madvise(MADV_DONTFORK)", "shadow view of the shared-object arena", errno);
  } catch (...) {
    teardown();
    throw;
  }
}

Arena::~Arena() { teardown(); }

void Arena::teardown() noexcept {
  if (user_begin_ != 0) ::munmap(reinterpret_cast<void*>(user_begin_), user_bytes_);
  if (shadow_begin_ != 0) ::munmap(reinterpret_cast<void*>(shadow_begin_), user_bytes_);
  for (int fd : memfds_) ::close(fd);
  user_begin_ = shadow_begin_ = 0;
  memfds_.clear();
}

void Arena::check_range(unsigned segment, std::size_t offset, std::size_t bytes, const char* what) const {
  const std::size_t page = page_size();
  if (segment >= segments_)
    throw InvalidArgument(
        fmt::format("{}: segment {} of an arena with {} segments", what, segment, segments_));
  if (offset % page != 0 || bytes % page != 0)
    throw InvalidArgument(
        fmt::format("{}: range at offset {} of {} bytes is not page-aligned", what, offset, bytes));
  if (offset > segment_bytes() || bytes > segment_bytes() - offset)
    throw InvalidArgument(fmt::format("{}: range at offset {} of {} runs past the end of segment {} ({})",
                                      what, offset, format_bytes(bytes), segment,
                                      format_bytes(segment_bytes())));
}

void Arena::protect(unsigned segment, std::size_t offset, std::size_t bytes, int prot) {
  check_range(segment, offset, bytes, "protect");
  if (bytes != 0 && ::mprotect(user(segment, offset), bytes, prot) != 0)
    throw SystemError(
        "mprotect",
        fmt::format("user view of arena segment {} at offset {} ({})", segment, offset, format_bytes(bytes)),
        errno);
}

void Arena::release(unsigned segment, std::size_t offset, std::size_t bytes, Closing closing) {
  check_range(segment, offset, bytes, "release");
  if (bytes == 0) return;
  if (closing == Closing::arena) protect(segment, offset, bytes, PROT_NONE);
  {
    std::lock_guard lock(kept_mutex_);
    if (bytes <= keep_limit_ - std::min(keep_limit_, kept_total_))
      return keep(segment, offset, offset + bytes);
  }
  punch(segment, offset, bytes);
}

void Arena::keep(unsigned segment, std::size_t begin, std::size_t end) {
  auto& kept = kept_[segment];
  kept_total_ += end - begin;
  // Join the neighbours, so the map stays as small as the free space is fragmented.
  if (const auto next = kept.find(end); next != kept.end()) {
    end = next->second;
    kept.erase(next);
  }
  if (auto after = kept.lower_bound(begin); after != kept.begin()) {
    const auto prev = std::prev(after);
    if (prev->second == begin) {
      begin = prev->first;
      kept.erase(prev);
    }
  }
  kept.emplace(begin, end);
}

void Arena::reuse(unsigned segment, std::size_t offset, std::size_t bytes) {
  check_range(segment, offset, bytes, "reuse");
  const std::size_t end = offset + bytes;
  // The kept parts of the range are taken under the lock and zeroed after it, so threads that
  // allocate or free elsewhere do not wait for the memset: the range is the caller's alone.
  std::vector<std::pair<std::size_t, std::size_t>> taken;
  {
    std::lock_guard lock(kept_mutex_);
    auto& kept = kept_[segment];
    auto it = kept.upper_bound(offset);
    if (it != kept.begin()) --it;
    while (it != kept.end() && it->first < end) {
      const std::size_t begin = it->first, stop = it->second;
      if (stop <= offset) {
        ++it;
        continue;
      }
      const std::size_t from = std::max(begin, offset), to = std::min(stop, end);
      taken.emplace_back(from, to);
      kept_total_ -= to - from;
      it = kept.erase(it);
      if (begin < from) kept.emplace(begin, from);
      if (to < stop) it = kept.emplace(to, stop).first;
    }
  }
  for (std::size_t i = 0; i < taken.size(); ++i) {
    try {
      zero_resident(segment, taken[i].first, taken[i].second - taken[i].first);
    } catch (...) {
      // What was not zeroed goes back to the kept set, so the next object there zeroes it.
      std::lock_guard lock(kept_mutex_);
      for (std::size_t j = i; j < taken.size(); ++j) keep(segment, taken[j].first, taken[j].second);
      throw;
    }
  }
}

std::size_t Arena::kept_bytes() const {
  std::lock_guard lock(kept_mutex_);
  return kept_total_;
}

void Arena::punch(unsigned segment, std::size_t offset, std::size_t bytes) {
  if (::fallocate(memfds_[segment], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(bytes)) != 0)
    throw SystemError("fallocate(PUNCH_HOLE)",
                      fmt::format("arena segment {} at offset {} ({})", segment, offset, format_bytes(bytes)),
                      errno);
}

// Zero the pages of a range that hold memory; holes read as zero already, and writing them would
// only allocate memory. mincore finds the resident pages at a cost bounded by the range: lseek's
// SEEK_HOLE, used before, walks every resident page from the range's first up to the next hole,
// wherever that lies, which was 0.5 ms for each small object placed in front of 25 MiB of kept
// memory. A page mincore calls absent is a hole or swapped out; SEEK_DATA, which skips holes
// without visiting them, finds the swapped ones, and the rest of such a run is zeroed with them
// (rare: only swap gets there, and only what the object spans).
void Arena::zero_resident(unsigned segment, std::size_t offset, std::size_t bytes) {
  const int fd = memfds_[segment];
  const std::size_t page = page_size();
  constexpr std::size_t kChunkPages = 4096;
  unsigned char resident[kChunkPages];
  const auto fail = [&](const char* call, std::size_t at) {
    return SystemError(call,
                       fmt::format("arena segment {} at offset {} ({} from offset {})", segment, at,
                                   format_bytes(bytes), offset),
                       errno);
  };
  for (std::size_t chunk = offset; chunk < offset + bytes;) {
    const std::size_t pages = std::min(kChunkPages, (offset + bytes - chunk) / page);
    std::byte* base = shadow(segment, chunk);
    if (::mincore(base, pages * page, resident) != 0) throw fail("mincore", chunk);
    for (std::size_t i = 0; i < pages;) {
      const bool in_memory = (resident[i] & 1) != 0;
      std::size_t j = i + 1;
      while (j < pages && ((resident[j] & 1) != 0) == in_memory) ++j;
      if (in_memory) {
        std::memset(base + i * page, 0, (j - i) * page);
      } else {
        const auto from = static_cast<off_t>(chunk + i * page), to = static_cast<off_t>(chunk + j * page);
        const off_t data = ::lseek(fd, from, SEEK_DATA);
        if (data < 0 && errno != ENXIO) throw fail("lseek(SEEK_DATA)", static_cast<std::size_t>(from));
        if (data >= 0 && data < to)
          std::memset(shadow(segment, static_cast<std::size_t>(data)), 0,
                      static_cast<std::size_t>(to - data));
      }
      i = j;
    }
    chunk += pages * page;
  }
}

std::uint64_t Arena::resident_bytes(unsigned segment) const {
  check_range(segment, 0, 0, "resident_bytes");
  struct stat st {};
  if (::fstat(memfds_[segment], &st) != 0)
    throw SystemError("fstat", fmt::format("arena segment {}", segment), errno);
  return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

namespace {

// Below 4 GiB live the program's own text and heap on some layouts, and MAP_32BIT's mappings.
constexpr std::uintptr_t kLowestPlacement = std::uintptr_t{1} << 32;
// Above 2^47 the address space needs a hint the kernel's 5-level paging asks for explicitly.
constexpr std::uintptr_t kHighestPlacement = std::uintptr_t{1} << 47;
constexpr std::uintptr_t kStackGuard = std::uintptr_t{1} << 30;
constexpr std::uintptr_t kLargestStack = std::uintptr_t{64} << 30;

std::string read_whole(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw SystemError("open", path, errno);
  std::string text;
  char buffer[16384];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      throw SystemError("read", path, error);
    }
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

// How far the main thread's stack may grow below its mapping.
std::uintptr_t stack_reach() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_STACK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return kLargestStack;
  return std::min<std::uintptr_t>(limit.rlim_cur, kLargestStack);
}

}  // namespace

std::vector<AddressRange> unmapped_ranges(const char* maps_file) {
  const std::string text = read_whole(maps_file);
  const std::uintptr_t below_stack = stack_reach() + kStackGuard;
  std::vector<AddressRange> mapped;
  std::uintptr_t ceiling = kHighestPlacement;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end_of_line = text.find('\n', at);
    if (end_of_line == std::string::npos) end_of_line = text.size();
    const std::string_view line(text.data() + at, end_of_line - at);
    at = end_of_line + 1;
    AddressRange r;
    const char* const first = line.data();
    const char* const last = first + line.size();
    const auto [dash, e1] = std::from_chars(first, last, r.begin, 16);
    const bool begin_ok = e1 == std::errc() && dash != last && *dash == '-';
    if (!begin_ok || std::from_chars(dash + 1, last, r.end, 16).ec != std::errc() || r.end < r.begin)
      throw SystemError("read", fmt::format("{}: a line that is not a mapping: \"{}\"", maps_file, line),
                        EINVAL);
    mapped.push_back(r);
    if (line.ends_with("[stack]") && r.begin > below_stack)
      ceiling = std::min(ceiling, r.begin - below_stack);
  }
  std::sort(mapped.begin(), mapped.end(),
            [](const AddressRange& x, const AddressRange& y) { return x.begin < y.begin; });
  std::vector<AddressRange> free;
  std::uintptr_t from = kLowestPlacement;
  for (const AddressRange& r : mapped) {
    if (r.begin >= ceiling) break;
    if (r.begin > from) free.push_back({from, r.begin});
    from = std::max(from, r.end);
  }
  if (from < ceiling) free.push_back({from, ceiling});
  return free;
}

std::vector<AddressRange> common_ranges(std::span<const AddressRange> a, std::span<const AddressRange> b) {
  std::vector<AddressRange> both;
  for (std::size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    const std::uintptr_t begin = std::max(a[i].begin, b[j].begin);
    const std::uintptr_t end = std::min(a[i].end, b[j].end);
    if (begin < end) both.push_back({begin, end});
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return both;
}

std::uintptr_t highest_fit(std::span<const AddressRange> ranges, std::size_t bytes, std::size_t align) {
  for (auto r = ranges.rbegin(); r != ranges.rend(); ++r) {
    if (r->end - r->begin < bytes) continue;
    const std::uintptr_t at = (r->end - bytes) & ~(std::uintptr_t{align} - 1);
    if (at >= r->begin && at != 0) return at;
  }
  return 0;
}

}  // namespace hdsm::os
