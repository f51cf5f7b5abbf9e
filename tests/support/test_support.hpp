// What several test programs share: test data patterns, a fast sim configuration, the set-up of death
// tests and private scratch directories.
#pragma once

#include <hdsm/config.hpp>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <unistd.h>

namespace hdsm::test {

/// Byte i of the test pattern `salt`: it changes with the index within a page and from page to page
/// (so a block or chunk moved to the wrong place shows) and with the salt.
constexpr unsigned char pattern_byte(std::uint64_t i, std::uint64_t salt) {
  return static_cast<unsigned char>(i * 131 + salt * 17 + (i >> 10));
}

/// n bytes of the pattern `salt`, from index `first` on.
inline std::vector<unsigned char> pattern(std::size_t n, std::uint64_t salt, std::size_t first = 0) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = pattern_byte(first + i, salt);
  return v;
}

/// Sim devices without the link model (copies at memory speed, no latency) and with poisoning, so a
/// test that reads data nobody moved sees garbage; shared memory in 1 GiB segments of `block`
/// blocks under `protocol`. Tests set more knobs on the result.
inline Config fast_sim_config(const std::string& protocol = "rolling", const std::string& block = "4KiB",
                              const std::string& memory = "64MiB") {
  Config c = Config::defaults();
  c.set("HDSM_SIM_MEMORY", memory)
      .set("HDSM_SIM_LINK_GBPS", "0")
      .set("HDSM_SIM_LATENCY_US", "0")
      .set("HDSM_SIM_POISON", "1")
      .set("HDSM_ARENA_SEGMENT", "1GiB")
      .set("HDSM_BLOCK_SIZE", block)
      .set("HDSM_PROTOCOL", protocol);
  return c;
}

/// SIGSEGV and SIGBUS back to their default action (a death test's child, before hdsm installs its
/// handler, which then saves no handler to pass foreign faults to).
inline void default_fault_disposition() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGSEGV, &dfl, nullptr);
  ::sigaction(SIGBUS, &dfl, nullptr);
}

/// Recursion deep enough to overflow any thread's stack (1 KiB a level, up to 1 GiB).
inline int recurse_deeply(int depth) {
  volatile char frame[1024];
  frame[0] = static_cast<char>(depth);
  if (depth > (1 << 20)) return frame[0];
  return recurse_deeply(depth + 1) + frame[0];
}

/// The sanitizer runtimes install a SIGSEGV handler at start-up, which hdsm would chain foreign
/// faults to (reporting and exiting their own way); a death test's child starts from the default
/// disposition instead, so it dies of the signal as a plain build does.
inline void default_disposition_under_sanitizers() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  default_fault_disposition();
#endif
}

/// Under ASan, OpenCL runs only in the ctest entries that turn LeakSanitizer off
/// (<program>.opencl_without_lsan for conformance, runtime, apps, container and skeleton): PoCL's
/// worker threads outlive
/// main, and LeakSanitizer's stop-the-world tracer now and then crashes on them at exit, after
/// every test passed.
inline bool opencl_only_without_lsan() {
#if defined(__SANITIZE_ADDRESS__)
  return std::getenv("HDSM_TEST_OPENCL_WITHOUT_LSAN") == nullptr;
#else
  return false;
#endif
}

/// A private directory (mode 0700) under the test's working directory (the build tree, not a
/// world-writable place), named after `tag` and the process, removed with its contents at the end.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag)
      : path_(std::filesystem::current_path() / (tag + "." + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directory(path_);
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  /// The regular files directly inside, by name.
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_))
      if (e.is_regular_file()) out.push_back(e.path().filename().string());
    return out;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace hdsm::test
