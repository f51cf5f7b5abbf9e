#include "device/cuda/cudart.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <mutex>
#include <string>
#include <vector>

#include <dlfcn.h>

namespace hdsm::cuda {
namespace {

// The symbol a member names, after the header's macros (cudaMemcpyAsync may be cudaMemcpyAsync_ptsz).
#define HDSM_CUDART_NAME(function) HDSM_CUDART_QUOTE(function)
#define HDSM_CUDART_QUOTE(function) #function

// The runtime of the toolkit libhdsm was built with: its soname (libcudart.so.13 for CUDA 13.x), found
// on the loader's path, else in the toolkit's library folder at build time (HDSM_CUDART_DIR).
const std::string kLibrary = fmt::format("libcudart.so.{}", CUDART_VERSION / 1000);

Cudart table;
std::mutex load_mutex;
bool loaded = false;  // under load_mutex; table is written once, before it is set

void* open_library(std::string& errors) {
  std::vector<std::string> candidates{kLibrary};
#ifdef HDSM_CUDART_DIR
  candidates.push_back(std::string(HDSM_CUDART_DIR) + "/" + kLibrary);
#endif
  for (const std::string& path : candidates) {
    // RTLD_LOCAL: its symbols do not stand in for those of a CUDA runtime the program links itself.
    if (void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    const char* why = ::dlerror();  // NOLINT(concurrency-mt-unsafe): glibc keeps it per thread
    errors += fmt::format("{}{}", errors.empty() ? "" : "; ", why != nullptr ? why : path.c_str());
  }
  return nullptr;
}

}  // namespace

void load_cudart() {
  std::lock_guard lock(load_mutex);
  if (loaded) return;
  std::string errors;
  void* handle = open_library(errors);
  if (handle == nullptr)
    throw NoDevice(
        fmt::format("no CUDA device: the CUDA runtime {} could not be loaded: {}", kLibrary, errors));
  Cudart found;
  const auto symbol = [&](const char* name) {
    void* address = ::dlsym(handle, name);
    if (address == nullptr)
      throw NoDevice(
          fmt::format("no CUDA device: the CUDA runtime {} has no {} (an older CUDA than libhdsm was "
                      "built with?)",
                      kLibrary, name));
    return address;
  };
  try {
#define HDSM_CUDART_LOOKUP(function) \
  found.function = reinterpret_cast<decltype(found.function)>(symbol(HDSM_CUDART_NAME(function)));
    HDSM_CUDART_FUNCTIONS(HDSM_CUDART_LOOKUP)
#undef HDSM_CUDART_LOOKUP
  } catch (...) {
    ::dlclose(handle);
    throw;
  }
  table = found;  // the library stays loaded for the process: its functions are called until exit
  loaded = true;
}

const Cudart& cudart() noexcept { return table; }

}  // namespace hdsm::cuda
