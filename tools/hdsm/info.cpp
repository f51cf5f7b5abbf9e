// `hdsm info`: the devices, a measured link bandwidth per device (the copy engine's probe), the
// memory model each device gets and why, the peer matrix and the active non-default configuration.
#include "commands.hpp"
#include "common.hpp"
#include "runtime/internal.hpp"
#include "table.hpp"
#include "transfer/probe.hpp"

#include <hdsm/hdsm.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace hdsm::tool {
namespace {

constexpr std::size_t kProbeBytes = 16 * MiB;
constexpr int kProbeCopies = 3;

/// What one probe copy may take by the device's stated link rate: a modelled link of 1e-6 GB/s
/// would have taken the 16 MiB probe a day, with no word.
constexpr double kProbeSeconds = 0.25;

/// Whether a probe copy of 64 KiB would take longer than kProbeSeconds by the stated link rate.
bool too_slow_to_probe(const DeviceProperties& p) {
  return p.link_gbps > 0 && p.link_gbps * 1e9 * kProbeSeconds < 65536;
}

/// The copy engine's probe (the figures HDSM_COPY_PROBE plans with), on at most kProbeBytes, and
/// fewer where the stated link rate would make a copy take longer than kProbeSeconds.
transfer::LinkRates probe_link(Device& device) {
  const DeviceProperties& p = device.properties();
  const std::size_t free_bytes = p.memory_bytes - device.memory_used();
  std::size_t bytes = std::min(kProbeBytes, free_bytes);
  if (p.link_gbps > 0) bytes = std::min(bytes, static_cast<std::size_t>(p.link_gbps * 1e9 * kProbeSeconds));
  if (bytes == 0) throw std::runtime_error(fmt::format("{} has no free memory to probe with", device.name()));
  return transfer::measure_link(device, bytes, kProbeCopies);
}

void print_peer_matrix(std::span<Device* const> devices) {
  std::size_t width = 4;  // "PEER", "HOST"
  for (const Device* d : devices) width = std::max(width, display_width(d->name()));
  auto cell = [&](std::string_view text) { return fmt::format("{:<{}}", text, width + 2); };

  auto trimmed = [](std::string line) { return line.erase(line.find_last_not_of(' ') + 1); };
  std::string header = "  " + cell("");
  for (const Device* d : devices) header += cell(d->name());
  fmt::print("Peer access (row device reading column device's memory):\n{}\n", trimmed(header));
  for (const Device* row : devices) {
    std::string line = "  " + cell(row->name());
    for (const Device* col : devices)
      line += cell(row == col ? "X" : row->can_access_peer(*col) ? "PEER" : "HOST");
    fmt::print("{}\n", trimmed(line));
  }
  fmt::print("  X = same device, PEER = direct device-to-device copy, HOST = staged through host memory\n");
}

void print_configuration(const Config& config) {
  const auto changed = changed_knobs(config);
  if (changed.empty()) {
    fmt::print("Configuration: every knob at its default (`hdsm config` lists them)\n");
    return;
  }
  fmt::print("Configuration (knobs that differ from their defaults):\n");
  Table table({"variable", "value", "default"});
  for (const auto& k : changed)
    table.add_row({k.name, display_value(k.type, k.value), display_value(k.type, k.default_value)});
  fmt::print("{}", table.text("  "));
}

}  // namespace

/// The environment's configuration, with the OpenCL and CUDA devices opened too unless HDSM_OPENCL
/// or HDSM_CUDA say otherwise: info lists every device there is, and for a backend that has none
/// prints why. Each backend left at auto is tried on its own (CUDA first: without a driver it fails
/// at once), and the runtime of the last successful try is kept when no later one replaces it.
std::unique_ptr<Runtime> runtime_with_every_backend() {
  Config config = Config::from_environment();
  std::unique_ptr<Runtime> runtime;
  for (const auto& [knob, backend] : {std::pair{"HDSM_CUDA", "CUDA"}, std::pair{"HDSM_OPENCL", "OpenCL"}}) {
    if (config.get(knob) != "auto") continue;
    try {
      Config trial(config);
      trial.set(knob, "on");
      try {
        runtime = std::make_unique<Runtime>(trial);
      } catch (const NoDevice&) {
        // Where the backend opens alone (no other backend, the sim default device), what is missing
        // is another backend's device or the default one HDSM_DEVICE names: the backend's note must
        // not say why another has none, and the runtime at the end gives that error.
        Config alone(trial);
        alone.set("HDSM_DEVICE", "sim");
        for (const char* other : {"HDSM_CUDA", "HDSM_OPENCL"})
          if (std::string_view(other) != knob) alone.set(other, "off");
        (void)Runtime(alone);
        runtime.reset();
      }
      config = std::move(trial);
    } catch (const NoDevice& e) {
      fmt::print(stderr, "hdsm: note: no {} devices listed: {}\n", backend, e.what());
    }
  }
  if (!runtime) runtime = std::make_unique<Runtime>(config);
  // A backend that opened with no device at all (an ICD whose platform lists none, PoCL that cannot
  // start in this environment) gets its note too.
  for (const auto& [knob, backend, kind] : {std::tuple{"HDSM_CUDA", "CUDA", Backend::cuda},
                                            std::tuple{"HDSM_OPENCL", "OpenCL", Backend::opencl}}) {
    if (config.get(knob) != "on") continue;
    const auto devices = runtime->devices();
    if (std::none_of(devices.begin(), devices.end(),
                     [&](const Device* d) { return d->properties().backend == kind; }))
      fmt::print(stderr, "hdsm: note: no {} devices listed: the {} backend opened and found no device\n",
                 backend, backend);
  }
  return runtime;
}

int run_info(const InfoOptions& options) {
  const std::unique_ptr<Runtime> owned = runtime_with_every_backend();
  Runtime& runtime = *owned;
  const auto devices = runtime.devices();
  fmt::print("hdsm {}: {} device{}, default {}\n\n", version(), devices.size(),
             devices.size() == 1 ? "" : "s", runtime.default_device().name());

  std::vector<std::string> header{"#",          "name",         "backend", "memory", "copy engines",
                                  "peer group", "link (model)", "latency"};
  if (options.probe) {
    header.emplace_back("H2D measured");
    header.emplace_back("D2H measured");
  }
  Table table(header);
  for (std::size_t c : {0, 4, 5, 6, 7}) table.align_right(c);
  if (options.probe) {
    table.align_right(8);
    table.align_right(9);
  }

  std::vector<std::string> failures;
  std::vector<std::string> notes;  // said, not failed
  for (Device* device : devices) {
    const DeviceProperties& p = device->properties();
    std::vector<std::string> row{fmt::format("{}", p.index),
                                 p.name,
                                 std::string(to_string(p.backend)),
                                 format_bytes(p.memory_bytes),
                                 fmt::format("{}", p.copy_engines),
                                 p.peer_group >= 0 ? fmt::format("{}", p.peer_group) : std::string("none"),
                                 link_text(p),
                                 fmt::format("{} us", p.latency_us)};
    if (options.probe && too_slow_to_probe(p)) {
      row.emplace_back("skipped");
      row.emplace_back("skipped");
      notes.push_back(
          fmt::format("link probe of {} skipped: its link is modelled at {} GB/s, at which a "
                      "64 KiB copy takes over {} s",
                      p.name, p.link_gbps, kProbeSeconds));
    } else if (options.probe) {
      try {
        const transfer::LinkRates probe = probe_link(*device);
        row.push_back(format_gbps(probe.h2d_gbps));
        row.push_back(format_gbps(probe.d2h_gbps));
      } catch (const std::exception& e) {
        row.emplace_back("failed");
        row.emplace_back("failed");
        failures.push_back(fmt::format("link probe of {} failed: {}", p.name, e.what()));
      }
    }
    table.add_row(std::move(row));
  }
  fmt::print("{}", table.text());
  for (Device* device : devices)
    if (!device->properties().description.empty())
      fmt::print("  {}: {}\n", device->name(), device->properties().description);
  if (options.probe)
    fmt::print(
        "  measured: median of {} pinned copies of {} each way (less where a link is modelled slower) after "
        "a "
        "warm-up copy (1 GB/s = 1e9 B/s)\n",
        kProbeCopies, format_bytes(kProbeBytes));
  fmt::print("\nmemory model of each device's shared objects (HDSM_PROTOCOL={}):\n",
             runtime.config().get("HDSM_PROTOCOL"));
  const auto choices = detail::model_choices(runtime);
  for (std::size_t i = 0; i < choices.size() && i < devices.size(); ++i)
    fmt::print("  {}: {} ({})\n", devices[i]->name(), choices[i].model, choices[i].why);
  fmt::print("\n");
  print_peer_matrix(devices);
  fmt::print("\n");
  // The program's knobs, not the HDSM_OPENCL=on and HDSM_CUDA=on info sets to list every device.
  print_configuration(Config::from_environment());

  for (const auto& note : notes) fmt::print(stderr, "hdsm: note: {}\n", note);
  for (const auto& failure : failures) fmt::print(stderr, "hdsm: error: {}\n", failure);
  return failures.empty() ? 0 : kExitFailure;
}

}  // namespace hdsm::tool
