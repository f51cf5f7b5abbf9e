// The subcommands of the hdsm tool. Each returns the process exit code; errors it cannot handle
// itself propagate (UsageError: exit 2, anything else: exit 1, see main.cpp).
#pragma once

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
int run_config(bool markdown);
int run_bench(const BenchOptions& options);

/// docs/configuration.md as `hdsm config --markdown` prints it.
std::string configuration_markdown();

}  // namespace hdsm::tool
