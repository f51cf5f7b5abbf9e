// The message of an exception held in an exception_ptr, for errors passed between threads and
// ranks, where the exception itself cannot go: one wording for what is no std::exception.
#pragma once

#include <exception>
#include <string>

namespace hdsm::os {

/// `error`'s what(), or a sentence saying it is no std::exception; an empty pointer is "".
inline std::string exception_text(const std::exception_ptr& error) {
  if (!error) return {};
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace hdsm::os
