// The skeleton tests' OpenCL runtime: the default device is OpenCL, or the test is skipped (no device
// here, or ASan's run outside skeleton.opencl_without_lsan).
#pragma once

#include <hdsm/hdsm.hpp>

#include "support/test_support.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace hdsm::test {

/// A runtime on the OpenCL device (with `config`'s other settings), or nullptr with `why` set to the
/// reason to skip.
inline std::unique_ptr<Runtime> opencl_runtime(std::string& why, Config config = Config::defaults()) {
  if (opencl_only_without_lsan()) {
    why = "OpenCL under ASan runs in skeleton.opencl_without_lsan";
    return nullptr;
  }
  try {
    return std::make_unique<Runtime>(config.set("HDSM_DEVICE", "opencl"));
  } catch (const NoDevice& e) {
    why = e.what();
    return nullptr;
  }
}

}  // namespace hdsm::test
