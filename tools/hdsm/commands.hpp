// The subcommands of the hdsm tool. Each returns the process exit code; errors it cannot handle
// itself propagate (UsageError: exit 2, anything else: exit 1, see main.cpp).
#pragma once

#include <hdsm/runtime.hpp>

#include <memory>
#include <string>
#include <vector>

namespace hdsm::tool {

struct InfoOptions {
  bool probe = true;  // measure the host link of every device
};

struct BenchOptions {
  std::vector<std::string> suites;  // empty: all
  bool quick = false;
  bool um = false;     // unified memory columns in the adsm suite on any device (always on CUDA)
  std::string device;  // index or name; empty: the runtime's default device
  std::string out = "report";
  bool list = false;
};

int run_info(const InfoOptions& options);
/// A runtime of the environment's configuration with the OpenCL and CUDA devices opened too where
/// their knobs are at auto: every device `hdsm info` lists.
std::unique_ptr<Runtime> runtime_with_every_backend();
int run_config(bool markdown);
int run_bench(const BenchOptions& options);

/// docs/configuration.md as `hdsm config --markdown` prints it.
std::string configuration_markdown();

}  // namespace hdsm::tool
