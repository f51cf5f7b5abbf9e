// The on-disk program cache: entries round-trip, another key or a damaged file is a miss, and a
// directory others may write to is refused (its binaries would run as code).
#include "device/program_cache.hpp"

#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sys/stat.h>

namespace {

using hdsm::ProgramCache;
namespace fs = std::filesystem;

const std::vector<unsigned char> kBinary = {1, 2, 3, 0, 255, 7};

TEST(ProgramCache, StoredBinaryLoadsUnderTheSameKeyOnly) {
  hdsm::test::ScratchDir dir("program_cache");
  const ProgramCache cache(dir.path().string());
  ASSERT_TRUE(cache.enabled());
  EXPECT_FALSE(cache.load("device A\nsource").has_value());
  cache.store("device A\nsource", kBinary);
  EXPECT_EQ(dir.files().size(), 1u) << "one file, no temporary left behind";
  EXPECT_EQ(cache.load("device A\nsource"), kBinary);
  EXPECT_FALSE(cache.load("device B\nsource").has_value());
  // A second cache object (another process) sees the entry.
  EXPECT_EQ(ProgramCache(dir.path().string()).load("device A\nsource"), kBinary);
  // Storing again replaces the entry.
  cache.store("device A\nsource", std::vector<unsigned char>{9});
  EXPECT_EQ(cache.load("device A\nsource"), std::vector<unsigned char>{9});
}

TEST(ProgramCache, EntryWhoseFileNameCollidesButKeyDiffersIsAMiss) {
  hdsm::test::ScratchDir dir("program_cache");
  const ProgramCache cache(dir.path().string());
  cache.store("key one", kBinary);
  // Move the entry to where another key's file would be: its stored key still says "key one".
  fs::rename(cache.path_for("key one"), cache.path_for("key two"));
  EXPECT_FALSE(cache.load("key two").has_value());
}

TEST(ProgramCache, DamagedEntriesAreMisses) {
  hdsm::test::ScratchDir dir("program_cache");
  const ProgramCache cache(dir.path().string());
  cache.store("key", kBinary);
  const std::string path = cache.path_for("key");
  const auto size = fs::file_size(path);
  fs::resize_file(path, size - 1);  // truncated
  EXPECT_FALSE(cache.load("key").has_value());
  fs::resize_file(path, size + 5);  // trailing garbage
  EXPECT_FALSE(cache.load("key").has_value());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "not a cache entry";
  EXPECT_FALSE(cache.load("key").has_value());
  fs::resize_file(path, 0);
  EXPECT_FALSE(cache.load("key").has_value());
  // A byte of the binary flipped, lengths intact: the checksum makes it a miss (PoCL crashed on
  // such a binary, on every run until the file was deleted).
  cache.store("key", kBinary);
  ASSERT_EQ(cache.load("key"), kBinary);
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(fs::file_size(path) - 8 - 2));  // inside the binary
    f.put('\x5a');
  }
  EXPECT_FALSE(cache.load("key").has_value());
  // And the rebuilt entry replaces it.
  cache.store("key", kBinary);
  EXPECT_EQ(cache.load("key"), kBinary);
}

// A FIFO under an entry's name is a miss at once: the open does not wait for a writer.
TEST(ProgramCache, FifoUnderAnEntrysNameIsAMissNotAHang) {
  hdsm::test::ScratchDir dir("program_cache");
  const ProgramCache cache(dir.path().string());
  ASSERT_EQ(::mkfifo(cache.path_for("key").c_str(), 0600), 0);
  EXPECT_FALSE(cache.load("key").has_value());
  // Storing replaces it with the entry.
  cache.store("key", kBinary);
  EXPECT_EQ(cache.load("key"), kBinary);
}

TEST(ProgramCache, CreatesMissingDirectoriesPrivately) {
  hdsm::test::ScratchDir dir("program_cache");
  const fs::path nested = dir.path() / "a" / "b";
  const ProgramCache cache(nested.string() + "/");
  ASSERT_TRUE(cache.enabled());
  EXPECT_FALSE(fs::exists(nested)) << "nothing is created before the first store";
  cache.store("key", kBinary);
  EXPECT_EQ(cache.load("key"), kBinary);
  struct stat st {};
  ASSERT_EQ(::stat(nested.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(ProgramCache, OffDisablesIt) {
  const ProgramCache cache("off");
  EXPECT_FALSE(cache.enabled());
  cache.store("key", kBinary);  // a no-op
  EXPECT_FALSE(cache.load("key").has_value());
}

TEST(ProgramCache, DefaultLocationFollowsXdgThenHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved_xdg = xdg ? xdg : "";
  ::setenv("XDG_CACHE_HOME", "/nonexistent-xdg", 1);
  EXPECT_EQ(ProgramCache("").directory(), "/nonexistent-xdg/hdsm");
  ::unsetenv("XDG_CACHE_HOME");
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') {
    EXPECT_EQ(ProgramCache("").directory(), std::string(home) + "/.cache/hdsm");
  }
  if (xdg != nullptr) ::setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
}

TEST(ProgramCache, RefusesADirectoryOthersMayWriteTo) {
  hdsm::test::ScratchDir dir("program_cache");
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_all | fs::perms::others_all);
  testing::internal::CaptureStderr();
  const ProgramCache cache(dir.path().string());
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(cache.enabled());
  EXPECT_NE(warning.find("others may write"), std::string::npos) << warning;
  cache.store("key", kBinary);
  EXPECT_TRUE(dir.files().empty());
  // Another cache on the same directory (another runtime, another backend) does not say it again.
  testing::internal::CaptureStderr();
  const ProgramCache again(dir.path().string());
  EXPECT_FALSE(again.enabled());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(ProgramCache, FailedStoreWarnsOnceAndLeavesNoTemporary) {
  hdsm::test::ScratchDir dir("program_cache");
  const ProgramCache cache(dir.path().string());
  fs::create_directory(cache.path_for("key"));  // rename() onto a directory fails, even for root
  testing::internal::CaptureStderr();
  cache.store("key", kBinary);
  cache.store("key", kBinary);
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("rename of "), std::string::npos) << warning;
  EXPECT_EQ(warning.find("rename of ", warning.find("rename of ") + 1), std::string::npos)
      << "warned twice: " << warning;
  EXPECT_TRUE(dir.files().empty()) << "a temporary file was left behind";
  EXPECT_FALSE(cache.load("key").has_value());
}

TEST(ProgramCache, StoreIntoAFileInsteadOfADirectoryWarns) {
  hdsm::test::ScratchDir dir("program_cache");
  const fs::path file = dir.path() / "plain";
  std::ofstream(file) << "x";
  testing::internal::CaptureStderr();
  const ProgramCache cache(file.string());
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(cache.enabled());
  EXPECT_NE(warning.find("not a directory"), std::string::npos) << warning;
}

}  // namespace
