#include "os/mapping.hpp"

#include <hdsm/error.hpp>

#include <sys/mman.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>

namespace hdsm::os {

std::size_t page_size() noexcept {
  static const std::size_t size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

std::size_t physical_memory_bytes() noexcept {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  return pages > 0 ? static_cast<std::size_t>(pages) * page_size() : 0;
}

Mapping::Mapping(std::size_t bytes, std::string what, bool populate) : size_(bytes), what_(std::move(what)) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  if (populate) flags |= MAP_POPULATE;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) throw SystemError("mmap", what_ + " (" + format_bytes(bytes) + ")", errno);
  data_ = static_cast<std::byte*>(p);
}

void Mapping::populate(std::size_t bytes) {
  bytes = std::min(bytes, size_);
  if (bytes == 0) return;
  if (::madvise(data_, bytes, MADV_POPULATE_WRITE) == 0) return;
  if (errno != EINVAL)
    throw SystemError("madvise(MADV_POPULATE_WRITE)", what_ + " (" + format_bytes(bytes) + ")", errno);
  // A kernel before 5.14: a write to each page does the same, as the pages are zero.
  volatile std::byte* const pages = data_;
  for (std::size_t at = 0; at < bytes; at += page_size()) pages[at] = std::byte{0};
}

Mapping::~Mapping() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

Mapping::Mapping(Mapping&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      what_(std::move(other.what_)) {}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    what_ = std::move(other.what_);
  }
  return *this;
}

void refuse_table(std::size_t n, std::size_t entry_bytes, const std::string& what) {
  throw InvalidArgument(what + ": " + std::to_string(n) + " entries of " + std::to_string(entry_bytes) +
                        " bytes are more than the address space holds");
}

void Mapping::release_pages(std::size_t offset, std::size_t bytes) {
  const std::size_t page = page_size();
  const std::size_t first = (offset + page - 1) / page * page;
  const std::size_t last = (offset + bytes) / page * page;
  if (last <= first) return;
  if (::madvise(data_ + first, last - first, MADV_DONTNEED) != 0)
    throw SystemError("madvise(MADV_DONTNEED)", what_, errno);
}

}  // namespace hdsm::os
