// The text of an errno value, safe from any thread (std::strerror may share one buffer between
// threads).
#pragma once

#include <string>
#include <system_error>

namespace hdsm::os {

inline std::string errno_text(int error) { return std::generic_category().message(error); }

}  // namespace hdsm::os
