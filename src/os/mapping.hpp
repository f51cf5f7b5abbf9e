// Anonymous memory mappings with checked system calls.
#pragma once

#include <hdsm/export.h>

#include <cstddef>
#include <string>

HDSM_VISIBLE_BEGIN
namespace hdsm::os {

std::size_t page_size() noexcept;
/// The machine's memory in bytes (sysconf), 0 where it is not known.
std::size_t physical_memory_bytes() noexcept;

/// A private anonymous read/write mapping, reserved without committing swap (MAP_NORESERVE).
class Mapping {
 public:
  Mapping() = default;
  /// `what` names the mapping in error messages ("memory of sim0"). `populate` pre-faults pages.
  Mapping(std::size_t bytes, std::string what, bool populate = false);
  /// Pre-faults the first `bytes` (their pages, zero-filled) and nothing past them.
  void populate(std::size_t bytes);
  ~Mapping();
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  /// Give the whole pages inside [offset, offset+bytes) back to the kernel; they read as zero
  /// afterwards.
  void release_pages(std::size_t offset, std::size_t bytes);

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::string what_;
};

}  // namespace hdsm::os

HDSM_VISIBLE_END
