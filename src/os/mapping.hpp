// Anonymous memory mappings with checked system calls.
#pragma once

#include <hdsm/export.h>

#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

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

/// InvalidArgument: a table of `n` entries of `entry_bytes` does not fit the address space.
[[noreturn]] void refuse_table(std::size_t n, std::size_t entry_bytes, const std::string& what);

/// A table of `n` T that reads as zeros until written: a reserved mapping in which nothing is
/// constructed, so that a table sized for a whole address space (a directory entry per page, a bit
/// per page) costs memory only for the pages of it that are written. T's all-zero bytes must be the
/// value a fresh entry has (integers, pointers, structs of them, std::atomic of them).
template <class T>
class ZeroedTable {
  static_assert(std::is_trivially_destructible_v<T> && std::is_standard_layout_v<T>);

 public:
  ZeroedTable() = default;
  /// `what` names the table in error messages.
  ZeroedTable(std::size_t n, std::string what) : mapping_(map(n, std::move(what))), size_(n) {}

  T& operator[](std::size_t i) { return data()[i]; }
  const T& operator[](std::size_t i) const { return data()[i]; }
  T* data() { return reinterpret_cast<T*>(mapping_.data()); }
  const T* data() const { return reinterpret_cast<const T*>(mapping_.data()); }
  std::size_t size() const { return size_; }

 private:
  static Mapping map(std::size_t n, std::string what) {
    if (n == 0) return {};
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) refuse_table(n, sizeof(T), what);
    return Mapping(n * sizeof(T), std::move(what));
  }
  Mapping mapping_;
  std::size_t size_ = 0;
};

}  // namespace hdsm::os

HDSM_VISIBLE_END
