// The centralized-release-consistency applications (seed 002's evaluation): C++ ports of STREAM,
// jacobi, md, EP, IS and CG on hdsm::crc, each in a plain version (crc::read and crc::write only) and an
// optimized one (localized access, the read-only and single-writer variants on page-aligned
// shares, a chosen page size), beside an OpenMP version on the same number of threads and a serial
// reference they are checked against.
#pragma once

#include "apps/app.hpp"

#include <hdsm/crc.hpp>

#include <cstddef>
#include <span>
#include <string_view>

namespace hdsm::apps::crc_apps {

enum class Version { plain, optimized };

struct CrcApp {
  std::string_view name;
  std::string_view pattern;  // one line: what is shared and how the workers use it
  std::size_t optimized_page_size;
  /// Runs the app in the runtime's workers (the page size is the caller's for plain, the app's own
  /// for optimized), returns what the home reads back.
  Output (*run)(hdsm::crc::Runtime& runtime, Version version, Scale scale);
  Output (*run_openmp)(int threads, Scale scale);
  Output (*run_reference)(Scale scale);
  double tolerance;  // largest relative difference from the reference that is still correct
};

/// stream, jacobi, md, ep, is, cg.
std::span<const CrcApp> crc_apps();
/// Sets an optimized version's page size on `runtime`: `page` where the local store holds four
/// frames of it at least (the runs an app holds together, STREAM's three, stay valid), else the
/// largest smaller one that it does, down to 128 B; returns it.
std::size_t set_optimized_page(hdsm::crc::Runtime& runtime, std::size_t page);
const CrcApp* find_crc_app(std::string_view name);

}  // namespace hdsm::apps::crc_apps
