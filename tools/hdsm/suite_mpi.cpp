// The `mpi` suite: seed 003 Fig. 12, MPI transfers of device-resident data between two ranks (user
// buffer, pinned, hdsm double-buffered). The measurement is an MPI program of its own
// (bench/mpi/mpi_transfer.cpp, linked with libhdsm_mpi) that this suite launches with
// `mpiexec -n 2` and whose CSV lines it collects; the ranks open their runtimes from the
// environment (HDSM_SIM_LINK_GBPS makes the device link the bottleneck, as in the seed).
#include "common.hpp"
#include "suite.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace hdsm::tool {
namespace {

#if defined(HDSM_MPI_TRANSFER)
void run_mpi(SuiteContext& ctx) {
  ctx.results.set_columns({"experiment", "version", "bytes", "seconds", "GBps"});
  for (const auto& [experiment, id] :
       {std::pair{"device -> device", "d2d"}, std::pair{"device -> host", "d2h"},
        std::pair{"host -> device", "h2d"}})
    ctx.results.add_plot({.id = id,
                          .title = fmt::format("MPI {} (seed 003 Fig. 12)", experiment),
                          .x = "bytes",
                          .y = "GBps",
                          .series = "version",
                          .x_label = "bytes",
                          .y_label = "GB/s",
                          .log_x = true,
                          .x_format = ValueFormat::bytes,
                          .where = {{"experiment", experiment}}});
  // Open MPI refuses root and more ranks than cores unless told; other MPIs ignore these.
  // NOLINTNEXTLINE(concurrency-mt-unsafe): set before any thread is started that reads the environment
  ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  // The ranks measure the device this run measures: as HDSM_DEVICE names it, the backend and the
  // index among that backend's devices (the ranks inherit the rest of the environment).
  const DeviceProperties& chosen = ctx.device.properties();
  unsigned index_in_backend = 0;
  for (const Device* d : ctx.runtime.devices())
    if (d->properties().backend == chosen.backend && d->properties().index < chosen.index) ++index_in_backend;
  std::string device = fmt::format("HDSM_DEVICE={}:{}", to_string(chosen.backend), index_in_backend);
  if (chosen.backend == Backend::opencl) device += " HDSM_OPENCL=on";
  if (chosen.backend == Backend::cuda) device += " HDSM_CUDA=on";
  const std::string command =
      fmt::format("{} {} {} -n 2 {} {} 2>&1", device, HDSM_MPIEXEC, HDSM_MPIEXEC_FLAGS,
                  shell_quoted(companion_program(HDSM_MPI_TRANSFER)), ctx.quick ? "--quick" : "");
  ctx.progress.set_total(ctx.quick ? 18 : 36);
  ctx.progress.note(command);
  std::map<std::string, double> seconds;  // "experiment|version|bytes"
  std::vector<std::size_t> sizes;
  std::string measured_device;
  const CommandResult run = run_reporting(
      command, "mpi suite", 5,
      [&](const std::vector<std::string>& f) {
        const std::size_t bytes = std::stoull(f[2]);
        const double s = std::stod(f[3]);
        const double gbps = std::stod(f[4]);
        ctx.progress.start(fmt::format("{} {} {}", f[0], f[1], format_bytes(bytes)));
        ctx.results.add_row({{"experiment", f[0]},
                             {"version", f[1]},
                             {"bytes", static_cast<std::int64_t>(bytes)},
                             {"seconds", s},
                             {"GBps", gbps}});
        ctx.progress.finish(format_gbps(gbps));
        seconds[f[0] + "|" + f[1] + "|" + f[2]] = s;
        if (sizes.empty() || sizes.back() != bytes) sizes.push_back(bytes);
      },
      [&](const std::string& text) {
        if (text.rfind("device,", 0) != 0) return false;
        measured_device = text.substr(7);
        return true;
      });
  if (run.status != 0 || seconds.empty())
    throw std::runtime_error(fmt::format("mpi suite: '{}' failed ({}):\n{}", command,
                                         wait_status_text(run.status), run.other_lines));
  if (measured_device != ctx.device.name())
    throw std::runtime_error(
        fmt::format("mpi suite: the ranks measured device '{}', not {}", measured_device, ctx.device.name()));
  for (std::size_t bytes : sizes) {
    if (bytes < 8 * MiB) continue;
    for (const char* experiment : {"device -> device", "device -> host", "host -> device"}) {
      const auto at = [&](const char* version) {
        return seconds.at(fmt::format("{}|{}|{}", experiment, version, bytes));
      };
      ctx.results.add_summary(
          {fmt::format("{} {}: speed-up of hdsm over the user buffer", experiment, format_bytes(bytes)),
           at("user buffer") / at("hdsm"), "x",
           fmt::format("{}: target >= 1.5 when the link is the bottleneck",
                       verdict(at("user buffer") / at("hdsm") >= 1.5))});
      ctx.results.add_summary(
          {fmt::format("{} {}: speed-up of hdsm over pinned", experiment, format_bytes(bytes)),
           at("pinned") / at("hdsm"), "x", ""});
    }
  }
}
#else
void run_mpi(SuiteContext&) {
  throw std::runtime_error(
      "this hdsm was built without MPI (CMake found no MPI), so the mpi suite is missing");
}
#endif

}  // namespace

Suite mpi_suite() {
  return {"mpi", "seed 003 Fig. 12: MPI transfers of device-resident data between 2 ranks (mpiexec)",
          run_mpi};
}

}  // namespace hdsm::tool
