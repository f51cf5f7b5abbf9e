// The hdsm command: `info`, `config` and `bench`.
#include "commands.hpp"
#include "common.hpp"

#include "os/errno_text.hpp"

#include <hdsm/hdsm.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <string_view>

#include <fcntl.h>
#include <unistd.h>

namespace {

int run(int argc, char** argv) {
  using namespace hdsm::tool;

  CLI::App app{"hdsm: inspect devices and configuration, run benchmark suites", "hdsm"};
  app.set_version_flag("--version", std::string(hdsm::version()));
  app.require_subcommand(1);

  InfoOptions info;
  CLI::App* info_cmd = app.add_subcommand("info",
                                          "List the devices, their measured link bandwidth, the peer "
                                          "matrix and the non-default configuration");
  bool no_probe = false;
  info_cmd->add_flag("--no-probe", no_probe, "Skip the link bandwidth measurement");

  bool markdown = false;
  CLI::App* config_cmd = app.add_subcommand(
      "config", "List every configuration knob (HDSM_* variable) and check the environment's");
  config_cmd->add_flag("--markdown", markdown, "Print docs/configuration.md");

  BenchOptions bench;
  CLI::App* bench_cmd =
      app.add_subcommand("bench", "Run benchmark suites and write CSV, JSON, SVG and report.md");
  bench_cmd->add_option("suite", bench.suites, "Suites to run (default: all; see --list)");
  bench_cmd->add_flag("-q,--quick", bench.quick, "Fewer sizes and shorter timing (a smoke run)");
  bench_cmd->add_option(
      "-d,--device", bench.device,
      "Device: a backend with an optional index (sim, opencl, opencl:1, cuda), a device name (sim1) or an "
      "index (default: the runtime's default device)");
  bench_cmd->add_flag(
      "--um", bench.um,
      "adsm suite: also run the Parboil apps on unified memory (HDSM_PROTOCOL=um, without and with "
      "HDSM_UM_PREFETCH), as it always does on a CUDA device; on sim devices this checks the columns, "
      "not unified memory's speed");
  bench_cmd->add_option("-o,--out", bench.out, "Output folder, created if missing")->capture_default_str();
  bench_cmd->add_flag("-l,--list", bench.list, "List the suites and exit");

  // A first word that is no subcommand (a typo: `hdsm infoo`) is named as such; CLI11 alone says only
  // that a subcommand is required.
  const auto is_subcommand = [&](std::string_view word) {
    for (const CLI::App* c : {info_cmd, config_cmd, bench_cmd})
      if (c->get_name() == word) return true;
    return false;
  };
  if (argc > 1 && argv[1][0] != '-' && !is_subcommand(argv[1])) {
    std::fprintf(stderr, "hdsm: unknown subcommand '%s' (info, config, bench; see --help)\n", argv[1]);
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }

  try {
    if (*info_cmd) {
      info.probe = !no_probe;
      return run_info(info);
    }
    if (*config_cmd) return run_config(markdown);
    if (*bench_cmd) return run_bench(bench);
  } catch (const UsageError& e) {
    fmt::print(stderr, "hdsm: {}\n", e.what());
    return kExitUsage;
  } catch (const hdsm::Error& e) {
    fmt::print(stderr, "hdsm: error ({}): {}\n", hdsm::to_string(e.code()), e.what());
    return kExitFailure;
  } catch (const std::exception& e) {
    fmt::print(stderr, "hdsm: error: {}\n", e.what());
    return kExitFailure;
  }
  return kExitUsage;
}

// A standard descriptor the caller closed (`2>&-`) would be taken by the next file opened, and
// messages meant for stderr would land in a CSV file: put /dev/null there instead.
void open_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd)
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      const int null = open("/dev/null", O_RDWR);
      if (null >= 0 && null != fd) {
        dup2(null, fd);
        close(null);
      }
    }
}

// What went to stdout must have reached it: a summary lost to a full disk or a closed pipe is an
// error, as for any command whose output is the point.
int checked_stdout(int code) {
  errno = 0;
  if (std::fflush(stdout) == 0 && std::ferror(stdout) == 0) return code;
  // An earlier write's failure (ferror) leaves errno as it was then, or unknown: 0 says so.
  const std::string why = errno != 0 ? hdsm::os::errno_text(errno) : std::string("an earlier write failed");
  std::fprintf(stderr, "hdsm: error: writing the standard output failed: %s\n", why.c_str());
  return code == 0 ? 1 : code;
}

}  // namespace

int main(int argc, char** argv) {
  open_standard_descriptors();
  try {
    return checked_stdout(run(argc, argv));
  } catch (const std::exception& e) {  // setting the command line up failed
    std::fprintf(stderr, "hdsm: error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "hdsm: error: an unknown exception\n");
  }
  return 1;
}
