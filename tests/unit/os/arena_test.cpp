// The shared-object arena: O(1) address arithmetic, user and shadow views of the same memory,
// independent protections, and memory given back or kept on release.
#include <hdsm/error.hpp>

#include "os/arena.hpp"
#include "os/mapping.hpp"
#include "support/death_style.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using hdsm::os::Arena;

constexpr std::size_t kSegment = std::size_t{1} << 30;  // 1 GiB

TEST(Arena, SegmentsAreAlignedAndAddressesAreArithmetic) {
  Arena a(3, kSegment);
  EXPECT_EQ(a.segments(), 3u);
  EXPECT_EQ(a.segment_bytes(), kSegment);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.user(0, 0)) % kSegment, 0u);
  for (unsigned s = 0; s < 3; ++s) {
    for (std::size_t off : {std::size_t{0}, std::size_t{12345}, kSegment - 1}) {
      const std::byte* p = a.user(s, off);
      ASSERT_TRUE(a.contains(p));
      EXPECT_EQ(a.segment_of(p), s);
      EXPECT_EQ(a.offset_of(p), off);
      EXPECT_EQ(a.shadow_of(p), a.shadow(s, off));
    }
  }
  EXPECT_FALSE(a.contains(a.user(0, 0) - 1));
  EXPECT_FALSE(a.contains(a.user(0, 0) + 3 * kSegment));
  EXPECT_FALSE(a.contains(nullptr));
  EXPECT_FALSE(a.contains(a.shadow(0, 0)));
  int local = 0;
  EXPECT_FALSE(a.contains(&local));
}

TEST(Arena, UserAndShadowViewsShareMemory) {
  Arena a(2, kSegment);
  const std::size_t page = hdsm::os::page_size();
  a.protect(1, 4 * page, 2 * page, PROT_READ | PROT_WRITE);
  auto* user = reinterpret_cast<char*>(a.user(1, 4 * page));
  auto* shadow = reinterpret_cast<char*>(a.shadow(1, 4 * page));
  std::strcpy(user, "written through the user view");
  EXPECT_STREQ(shadow, "written through the user view");
  std::strcpy(shadow + page, "and through the shadow");
  EXPECT_STREQ(user + page, "and through the shadow");
  // Segments are separate memory.
  a.protect(0, 4 * page, page, PROT_READ);
  EXPECT_EQ(reinterpret_cast<const char*>(a.user(0, 4 * page))[0], 0);
}

TEST(Arena, ShadowStaysWritableWhileUserViewIsProtected) {
  // The child of a fast (fork) death test has no arena views at all (MADV_DONTFORK): it re-runs the
  // test instead, so that the access dies of the protection it checks.
  const hdsm::test::DeathTestStyle style("threadsafe");
  Arena a(1, kSegment);
  const std::size_t page = hdsm::os::page_size();
  a.protect(0, 0, page, PROT_READ);
  auto* shadow = reinterpret_cast<int*>(a.shadow(0, 0));
  shadow[7] = 42;  // the runtime's copies never fault
  EXPECT_EQ(reinterpret_cast<const int*>(a.user(0, 0))[7], 42);
  EXPECT_DEATH(reinterpret_cast<volatile int*>(a.user(0, 0))[7] = 1, "");  // the user view is read-only
}

TEST(Arena, ReleaseGivesMemoryBackAndReadsZero) {
  // The child of a fast (fork) death test has no arena views at all (MADV_DONTFORK): it re-runs the
  // test instead, so that the access dies of the protection it checks.
  const hdsm::test::DeathTestStyle style("threadsafe");
  Arena a(1, kSegment);
  const std::size_t bytes = 8 << 20;
  a.protect(0, 0, bytes, PROT_READ | PROT_WRITE);
  std::memset(a.user(0, 0), 0x7F, bytes);
  EXPECT_GE(a.resident_bytes(0), bytes);
  a.release(0, 0, bytes);
  EXPECT_LT(a.resident_bytes(0), bytes / 8);
  EXPECT_EQ(static_cast<unsigned char>(*a.shadow(0, 4096)), 0u);
  EXPECT_DEATH(static_cast<void>(*reinterpret_cast<volatile char*>(a.user(0, 0))), "");  // inaccessible again
}

// A caller that closes the range itself (the cluster, through its protection map) must not pay a
// second mprotect: release then leaves the user view's protection alone, and handles the memory as
// always.
TEST(Arena, ReleaseLeavesTheUserViewToACallerThatClosedIt) {
  Arena a(1, kSegment);
  const std::size_t bytes = 8 << 20;
  a.protect(0, 0, bytes, PROT_READ | PROT_WRITE);
  std::memset(a.user(0, 0), 0x7F, bytes);
  a.release(0, 0, bytes, Arena::Closing::caller);
  EXPECT_LT(a.resident_bytes(0), bytes / 8);
  // Still readable: release did not touch the protection (a real caller would have closed it).
  EXPECT_EQ(*reinterpret_cast<volatile char*>(a.user(0, 4096)), 0);
}

TEST(Arena, ReleasedMemoryIsKeptUpToTheLimitAndReadsZeroWhenReused) {
  // The child of a fast (fork) death test has no arena views at all (MADV_DONTFORK): it re-runs the
  // test instead, so that the access dies of the protection it checks.
  const hdsm::test::DeathTestStyle style("threadsafe");
  const std::size_t mib = 1 << 20;
  Arena a(1, kSegment, 8 * mib);
  a.protect(0, 0, 16 * mib, PROT_READ | PROT_WRITE);
  std::memset(a.user(0, 0), 0x7F, 16 * mib);
  a.release(0, 0, 2 * mib);
  a.release(0, 2 * mib, 4 * mib);  // joins the first: one kept range of 6 MiB
  EXPECT_EQ(a.kept_bytes(), 6 * mib);
  EXPECT_GE(a.resident_bytes(0), 16 * mib);  // nothing given back
  a.release(0, 6 * mib, 4 * mib);            // beyond the limit: given back
  EXPECT_EQ(a.kept_bytes(), 6 * mib);
  EXPECT_LT(a.resident_bytes(0), 13 * mib);
  EXPECT_EQ(static_cast<unsigned char>(*a.shadow(0, 7 * mib)), 0u);
  EXPECT_DEATH(static_cast<void>(*reinterpret_cast<volatile char*>(a.user(0, 0))), "");  // inaccessible

  // A new object over part of both released ranges: the kept part is zeroed, the rest of the kept
  // range keeps its bytes until reused, and the given-back part reads zero anyway.
  a.reuse(0, 5 * mib, 2 * mib);
  EXPECT_EQ(a.kept_bytes(), 5 * mib);
  for (std::size_t at = 5 * mib; at < 7 * mib; at += 4096)
    ASSERT_EQ(static_cast<unsigned char>(*a.shadow(0, at)), 0u) << at;
  EXPECT_EQ(static_cast<unsigned char>(*a.shadow(0, 5 * mib - 1)), 0x7Fu);
  a.reuse(0, 0, 2 * mib);
  a.reuse(0, 3 * mib, mib);
  EXPECT_EQ(a.kept_bytes(), 2 * mib);
  for (std::size_t at : {std::size_t{0}, 2 * mib - 1, 3 * mib, 4 * mib - 1})
    EXPECT_EQ(static_cast<unsigned char>(*a.shadow(0, at)), 0u) << at;
  EXPECT_EQ(static_cast<unsigned char>(*a.shadow(0, 2 * mib)), 0x7Fu);  // the kept middle
  EXPECT_EQ(static_cast<unsigned char>(*a.shadow(0, 4 * mib)), 0x7Fu);
}

TEST(Arena, ReusingKeptAddressSpaceWithoutMemoryAllocatesNone) {
  const std::size_t mib = 1 << 20;
  Arena a(1, kSegment, 64 * mib);
  a.protect(0, 0, 32 * mib, PROT_READ | PROT_WRITE);
  reinterpret_cast<volatile char*>(a.user(0, 0))[16 * mib] = 1;  // one page of 32 MiB holds memory
  a.release(0, 0, 32 * mib);
  EXPECT_EQ(a.kept_bytes(), 32 * mib);
  a.reuse(0, 0, 32 * mib);
  EXPECT_EQ(a.kept_bytes(), 0u);
  EXPECT_LT(a.resident_bytes(0), mib);  // the holes were not written
  EXPECT_EQ(static_cast<unsigned char>(*a.shadow(0, 16 * mib)), 0u);
}

// Resident pages and holes interleaved in one kept range (every third page written, and one run of
// 64): reuse zeroes each written page and writes no hole, also for a range that starts and ends
// inside such runs.
TEST(Arena, ReuseZeroesResidentPagesBetweenHolesAndAllocatesNoHole) {
  const std::size_t page = hdsm::os::page_size(), pages = 600;
  Arena a(1, kSegment, 64 << 20);
  a.protect(0, 0, pages * page, PROT_READ | PROT_WRITE);
  auto* user = reinterpret_cast<volatile unsigned char*>(a.user(0, 0));
  const auto written = [](std::size_t p) { return p % 3 == 0 || (p >= 300 && p < 364); };
  for (std::size_t p = 0; p < pages; ++p)
    if (written(p)) user[p * page + p % page] = 0xA5;
  const std::uint64_t before = a.resident_bytes(0);
  a.release(0, 0, pages * page);
  a.reuse(0, 301 * page, 200 * page);  // from inside the run of 64 to past it
  a.reuse(0, 0, 301 * page);
  a.reuse(0, 501 * page, (pages - 501) * page);
  EXPECT_EQ(a.kept_bytes(), 0u);
  EXPECT_EQ(a.resident_bytes(0), before);  // no hole was written
  for (std::size_t p = 0; p < pages; ++p)
    ASSERT_EQ(static_cast<unsigned char>(*a.shadow(0, p * page + p % page)), 0u) << "page " << p;
}

// Reuse zeroes outside the arena's lock: threads readying disjoint parts of one kept range at once
// each get zeros, and the kept set ends up empty (TSan checks the bookkeeping).
TEST(Arena, ConcurrentReusesOfOneKeptRangeZeroTheirParts) {
  const std::size_t mib = 1 << 20, part = 4 * mib;
  constexpr std::size_t kParts = 4;
  Arena a(1, kSegment, 64 * mib);
  a.protect(0, 0, kParts * part, PROT_READ | PROT_WRITE);
  std::memset(a.user(0, 0), 0x5A, kParts * part);
  a.release(0, 0, kParts * part);
  ASSERT_EQ(a.kept_bytes(), kParts * part);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < kParts; ++i)
    threads.emplace_back([&a, i, part] { a.reuse(0, i * part, part); });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(a.kept_bytes(), 0u);
  for (std::size_t at = 0; at < kParts * part; at += 4096)
    ASSERT_EQ(static_cast<unsigned char>(*a.shadow(0, at)), 0u) << at;
}

// Swapped-out pages of a kept range: mincore calls them absent, like holes, and reuse must still zero
// them (SEEK_DATA finds them). Getting a page out of memory takes swap and memory pressure, so the
// test runs in a child process confined to a small memory cgroup, where the machine allows it: root,
// active swap, and a memory controller (cgroup v1 or v2) it may write. Elsewhere it says what was
// missing and skips.
// Writes `text` to an existing file of a cgroup (never creates one: a plain folder is no cgroup).
bool write_cgroup_file(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// A memory cgroup of 32 MiB made for this process, or "" where the machine has none to give.
std::string swap_test_cgroup() {
  if (::geteuid() != 0) return {};
  std::ifstream swaps("/proc/swaps");
  std::string line;
  int lines = 0;
  while (std::getline(swaps, line)) ++lines;
  if (lines < 2) return {};
  struct Root {
    const char* path;
    unsigned long magic;
    const char* limit;
  };
  for (const Root root : {Root{"/sys/fs/cgroup/memory", CGROUP_SUPER_MAGIC, "/memory.limit_in_bytes"},
                          Root{"/sys/fs/cgroup", CGROUP2_SUPER_MAGIC, "/memory.max"}}) {
    struct statfs fs {};
    if (::statfs(root.path, &fs) != 0 || static_cast<unsigned long>(fs.f_type) != root.magic) continue;
    const std::string dir = std::string(root.path) + "/hdsm-arena-swap-" + std::to_string(::getpid());
    if (::mkdir(dir.c_str(), 0700) != 0) continue;
    if (write_cgroup_file(dir + root.limit, std::to_string(32 << 20))) return dir;
    ::rmdir(dir.c_str());
  }
  return {};
}

TEST(Arena, ReuseZeroesKeptPagesThatWereSwappedOut) {
  const std::string cgroup = swap_test_cgroup();
  if (cgroup.empty())
    GTEST_SKIP()
        << "needs root, active swap and a writable memory cgroup (cgroup v1 or v2) to push pages out";
  struct Removed {
    const std::string& dir;
    ~Removed() {
      if (::rmdir(dir.c_str()) != 0) ADD_FAILURE() << "rmdir " << dir << ": " << std::strerror(errno);
    }
  } removed{cgroup};
  // Exit codes: 0 zeroed, 1 a nonzero byte after reuse, 2 too few pages went out (nothing tested),
  // 3 setup failed, 4 release did not keep the range, 5 the cgroup did not take the process.
  enum Code { kZeroed = 0, kNonzero, kFewOut, kSetup, kNotKept, kNotConfined };
  const pid_t child = ::fork();
  ASSERT_GE(child, 0) << "fork: " << std::strerror(errno);
  if (child == 0) {
    ::alarm(120);  // never outlive a killed parent for long
    if (!write_cgroup_file(cgroup + "/cgroup.procs", std::to_string(::getpid()))) ::_exit(kNotConfined);
    try {
      const std::size_t page = hdsm::os::page_size(), pages = (96 << 20) / page;
      Arena a(1, kSegment, std::size_t{256} << 20);
      a.protect(0, 0, pages * page, PROT_READ | PROT_WRITE);
      // Every fourth page a hole, so runs that mincore calls absent mix swapped pages and holes.
      std::size_t written = 0;
      for (std::size_t p = 0; p < pages; ++p)
        if (p % 4 != 3) {
          std::memset(a.user(0, p * page), 0x5A, page);
          ++written;
        }
      a.release(0, 0, pages * page);
      // Kept, not given back (a shmem file's blocks count its swapped pages): otherwise every page
      // would read zero without the swapped path.
      if (a.kept_bytes() != pages * page || a.resident_bytes(0) < written * page) ::_exit(kNotKept);
      std::vector<unsigned char> resident(pages);
      if (::mincore(a.shadow(0, 0), pages * page, resident.data()) != 0) ::_exit(kSetup);
      std::size_t out = 0;
      for (std::size_t p = 0; p < pages; ++p) out += p % 4 != 3 && (resident[p] & 1) == 0;
      if (out < pages / 4) ::_exit(kFewOut);
      a.reuse(0, 0, pages * page);
      for (std::size_t p = 0; p < pages; ++p)
        for (std::size_t at : {std::size_t{0}, page / 2, page - 1})
          if (*a.shadow(0, p * page + at) != std::byte{0}) ::_exit(kNonzero);
    } catch (...) {
      ::_exit(kSetup);
    }
    ::_exit(kZeroed);
  }
  int status = 0;
  pid_t waited = 0;
  while ((waited = ::waitpid(child, &status, 0)) < 0 && errno == EINTR) {
  }
  ASSERT_EQ(waited, child) << "waitpid: " << std::strerror(errno);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
    GTEST_SKIP() << "the memory cgroup's limit ended the child (its out-of-memory killer)";
  ASSERT_TRUE(WIFEXITED(status)) << "the child died: " << status;
  const int code = WEXITSTATUS(status);
  if (code == kFewOut) GTEST_SKIP() << "the memory cgroup pushed too few pages out of memory";
  if (code == kNotConfined) GTEST_SKIP() << "the cgroup did not take the child (cgroup.procs)";
  EXPECT_NE(code, kSetup) << "the child could not set the arena up";
  EXPECT_NE(code, kNotKept) << "release gave the range back instead of keeping it";
  EXPECT_EQ(code, kZeroed) << "reuse left nonzero bytes in pages that were swapped out";
}

TEST(Arena, BadArgumentsAreTypedErrors) {
  EXPECT_THROW(Arena(0, kSegment), hdsm::InvalidArgument);
  EXPECT_THROW(Arena(1, kSegment + 4096), hdsm::InvalidArgument);
  EXPECT_THROW(Arena(1, 1024), hdsm::InvalidArgument);
  EXPECT_THROW(Arena(1u << 20, std::size_t{1} << 40), hdsm::InvalidArgument);
  Arena a(1, kSegment);
  EXPECT_THROW(a.protect(1, 0, 4096, PROT_READ), hdsm::InvalidArgument);
  EXPECT_THROW(a.protect(0, 100, 4096, PROT_READ), hdsm::InvalidArgument);
  EXPECT_THROW(a.protect(0, kSegment - 4096, 8192, PROT_READ), hdsm::InvalidArgument);
  EXPECT_THROW(a.release(0, 0, 1000), hdsm::InvalidArgument);
}

TEST(Arena, ManyLargeSegmentsCostOnlyAddressSpace) {
  // 17 x 16 GiB per view, like 16 devices plus the host. (ThreadSanitizer's memory layout leaves
  // applications only a few TiB of address space, so larger segments would fail there.)
  Arena a(17, std::size_t{16} << 30);
  EXPECT_EQ(a.resident_bytes(16), 0u);
  a.protect(16, 0, 4096, PROT_READ | PROT_WRITE);
  *reinterpret_cast<int*>(a.user(16, 0)) = 5;
  EXPECT_EQ(*reinterpret_cast<const int*>(a.shadow(16, 0)), 5);
}

// The cluster runtime places global memory at an address free on every rank: each lists its
// unmapped ranges, and the common ones give the address.
using hdsm::os::AddressRange;

// A maps file of the given text, named by /proc/self/fd (no file in a world-writable directory).
struct FakeMaps {
  explicit FakeMaps(const std::string& text) : fd(::memfd_create("maps", MFD_CLOEXEC)) {
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  ~FakeMaps() { ::close(fd); }
  FakeMaps(const FakeMaps&) = delete;
  FakeMaps& operator=(const FakeMaps&) = delete;
  int fd;
  std::string path;
};

TEST(AddressSpace, UnmappedRangesAreTheGapsBetweenMappingsBelowTheStacksReach) {
  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_STACK, &limit), 0);
  const std::uintptr_t reach = limit.rlim_cur == RLIM_INFINITY
                                   ? std::uintptr_t{64} << 30
                                   : std::min<std::uintptr_t>(limit.rlim_cur, std::uintptr_t{64} << 30);
  const std::uintptr_t stack = 0x7ff000000000;
  // Unsorted, one mapping across the 4 GiB floor, two adjacent ones.
  FakeMaps maps(
      "7f0000000000-7f0000100000 r-xp 00000000 08:01 123 /usr/lib/libc.so.6\n"
      "55d000000000-55d000200000 r--p 00000000 08:01 77 /usr/bin/program\n"
      "ff000000-100001000 rw-p 00000000 00:00 0\n"
      "7f0000100000-7f0000200000 rw-p 00000000 00:00 0 \n"
      "7ff000000000-7ff000021000 rw-p 00000000 00:00 0                          [stack]\n"
      "7ffff7fc1000-7ffff7fc5000 r--p 00000000 00:00 0                          [vvar]\n");
  const std::vector<AddressRange> free = hdsm::os::unmapped_ranges(maps.path.c_str());
  const std::vector<AddressRange> expected = {
      {0x100001000, 0x55d000000000},
      {0x55d000200000, 0x7f0000000000},
      {0x7f0000200000, stack - reach - (std::uintptr_t{1} << 30)},
  };
  EXPECT_EQ(free, expected);
}

TEST(AddressSpace, UnmappedRangesOfThisProcessHoldNothingMapped) {
  const hdsm::os::Mapping mapping(std::size_t{1} << 20, "a probe");
  const int local = 0;
  const std::vector<AddressRange> free = hdsm::os::unmapped_ranges();
  ASSERT_FALSE(free.empty());
  for (std::size_t i = 0; i < free.size(); ++i) {
    EXPECT_LT(free[i].begin, free[i].end);
    if (i > 0) {
      EXPECT_LT(free[i - 1].end, free[i].begin);
    }
    for (const auto p : {reinterpret_cast<std::uintptr_t>(mapping.data()),
                         reinterpret_cast<std::uintptr_t>(&local), reinterpret_cast<std::uintptr_t>(&free)}) {
      EXPECT_FALSE(p >= free[i].begin && p < free[i].end) << std::hex << p << " is mapped";
    }
  }
  // And an arena goes where the list says.
  const std::uintptr_t at = hdsm::os::highest_fit(free, kSegment, kSegment);
  ASSERT_NE(at, 0u);
  const Arena arena(1, kSegment, 0, at);
  EXPECT_EQ(arena.user_begin(), at);
}

TEST(AddressSpace, CommonRangesAndTheHighestFit) {
  const std::vector<AddressRange> a = {{0x1000, 0x9000}, {0x10000, 0x40000}, {0x50000, 0x60000}};
  const std::vector<AddressRange> b = {{0x0, 0x2000}, {0x8000, 0x20000}, {0x30000, 0x58000}};
  const std::vector<AddressRange> both = {
      {0x1000, 0x2000}, {0x8000, 0x9000}, {0x10000, 0x20000}, {0x30000, 0x40000}, {0x50000, 0x58000}};
  EXPECT_EQ(hdsm::os::common_ranges(a, b), both);
  EXPECT_EQ(hdsm::os::common_ranges(b, a), both);
  EXPECT_TRUE(hdsm::os::common_ranges(a, {}).empty());
  EXPECT_EQ(hdsm::os::highest_fit(both, 0x8000, 0x1000), 0x50000u);
  EXPECT_EQ(hdsm::os::highest_fit(both, 0x9000, 0x1000), 0x37000u);
  EXPECT_EQ(hdsm::os::highest_fit(both, 0x10000, 0x10000), 0x30000u);
  EXPECT_EQ(hdsm::os::highest_fit(both, 0x4000, 0x20000), 0u);  // aligned, each would leave its range
  EXPECT_EQ(hdsm::os::highest_fit(both, 0x10001, 0x1000), 0u);
  EXPECT_EQ(hdsm::os::highest_fit({}, 0x1000, 0x1000), 0u);
}

TEST(AddressSpace, AMapsFileThatIsNotOneIsAnError) {
  FakeMaps maps("7f0000000000-7f0000100000 r-xp 00000000 08:01 123 /usr/lib/libc.so.6\nnot a mapping\n");
  EXPECT_THROW(hdsm::os::unmapped_ranges(maps.path.c_str()), hdsm::SystemError);
  EXPECT_THROW(hdsm::os::unmapped_ranges("/proc/self/no such file"), hdsm::SystemError);
}

}  // namespace
