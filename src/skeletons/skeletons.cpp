// What the skeleton templates share: the host backend's parallel loop on the runtime's executor and
// the choice of devices.
#include <hdsm/error.hpp>
#include <hdsm/skeletons.hpp>

#include "exec/executor.hpp"
#include "runtime/internal.hpp"
#include "runtime/runtime_impl.hpp"

#include <fmt/format.h>

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

namespace hdsm::detail {

void check_aliasing(const char* prefix, const char* function, std::span<const SliceId> outputs,
                    std::span<const SliceId> inputs) {
  const auto name = [&] { return std::string(prefix) + function + ">"; };
  for (std::size_t a = 0; a < outputs.size(); ++a)
    for (std::size_t b = a + 1; b < outputs.size(); ++b)
      if (outputs[a].overlaps(outputs[b]))
        throw InvalidArgument(fmt::format("{}: outputs {} and {} {}", name(), a, b,
                                          outputs[a] == outputs[b] ? "are the same vector" : "overlap"));
  for (std::size_t i = 0; i < inputs.size(); ++i)
    for (std::size_t o = 0; o < outputs.size(); ++o)
      if (inputs[i].overlaps(outputs[o]) && inputs[i] != outputs[o])
        throw InvalidArgument(fmt::format(
            "{}: input {} (elements {} to {}) overlaps output {} (elements {} to {}) at other elements: an "
            "element may be updated in place, not read at another index",
            name(), i, inputs[i].first, inputs[i].first + inputs[i].n - 1, o, outputs[o].first,
            outputs[o].first + outputs[o].n - 1));
}

std::size_t host_chunks(Runtime& runtime, std::size_t n,
                        FunctionRef<void(std::size_t, std::size_t, std::size_t)> body) {
  exec::Executor& executor = impl_of(runtime).executor;
  const std::size_t chunks = host_chunk_count(runtime, n);
  const std::size_t chunk = (n + chunks - 1) / chunks;
  const Launch launch{Dim3{static_cast<std::uint32_t>(chunks)}, Dim3{1}};
  executor.for_each_block(launch, [&](const BlockRun& run) {
    const std::size_t first = std::size_t{run.block.x} * chunk;
    if (first >= n) return;
    try {
      body(run.block.x, first, std::min(n, first + chunk));
    } catch (const std::exception&) {
      throw;
    } catch (abi::__forced_unwind&) {  // a cancelled thread's unwinding goes on
      throw;
    } catch (...) {
      // `throw 42` in a user function: a KernelFailure, as on the devices, not the bare value.
      throw KernelFailure(
          "a skeleton's user function on the host backend threw an exception that is not a std::exception");
    }
  });
  return chunks;
}

void host_for(Runtime& runtime, std::size_t n, FunctionRef<void(std::size_t, std::size_t)> body) {
  host_chunks(runtime, n, [&](std::size_t, std::size_t first, std::size_t last) { body(first, last); });
}

std::size_t host_chunk_count(Runtime& runtime, std::size_t n) {
  // A few chunks per worker balance uneven chunks; at least 4096 elements each keep the overhead low.
  constexpr std::size_t kMinChunk = 4096;
  return std::clamp<std::size_t>(n / kMinChunk, 1, std::size_t{impl_of(runtime).executor.workers()} * 4);
}

std::vector<unsigned> skeleton_devices(Runtime& runtime, const std::vector<unsigned>& chosen) {
  const std::size_t count = runtime.devices().size();
  for (unsigned d : chosen)
    if (d >= count)
      throw InvalidArgument(fmt::format("skeleton call on device {}: the runtime has {} device{} (0 to {})",
                                        d, count, count == 1 ? "" : "s", count - 1));
  if (!chosen.empty()) return chosen;
  const std::string& spec = runtime.config().get("HDSM_SKELETON_DEVICES");
  const Device& home = runtime.default_device();
  if (spec == "default") return {static_cast<unsigned>(home.properties().index)};
  std::vector<unsigned> out;
  if (spec == "all") {
    // Every device of the default device's backend: the ones a kernel body of that backend runs on.
    for (const Device* d : runtime.devices())
      if (d->properties().backend == home.properties().backend) out.push_back(d->properties().index);
    return out;
  }
  for (std::size_t at = 0; at <= spec.size();) {
    const std::size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string item = spec.substr(at, comma - at);
    unsigned d = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), d);
    if (item.empty() || ec != std::errc{} || end != item.data() + item.size() || d >= count)
      throw ConfigError(
          fmt::format("HDSM_SKELETON_DEVICES={}: '{}' is not a device index of this runtime "
                      "(0..{}); accepted: default, all, or indices such as 0,1",
                      spec, item, count - 1));
    out.push_back(d);
    at = comma + 1;
  }
  return out;
}

namespace {

// The speeds measured so far, kept with the runtime.
struct Speeds {
  std::mutex mutex;
  std::map<unsigned, double> of;  // device index -> bytes per second
};

// A copy within the device's memory, 8 MiB, best of 3 after a first one: its bandwidth bounds what
// skeleton kernels (which stream their operands) get, and needs no kernel body of any backend.
// Bytes a second of a copy on `device`, with the largest buffers up to 8 MiB that its free memory
// holds (the containers' copies may fill it: the measurement does not evict them); nothing when not
// even two 64 KiB buffers fit.
std::optional<double> measure_speed(Device& device) {
  constexpr std::size_t kMost = std::size_t{8} << 20, kLeast = std::size_t{64} << 10;
  for (std::size_t bytes = kMost; bytes >= kLeast; bytes /= 2) {
    DeviceBuffer a{}, b{};
    try {
      a = device.alloc(bytes);
      b = device.alloc(bytes);
    } catch (const OutOfDeviceMemory&) {
      if (a) device.free(a);
      continue;
    }
    try {
      const std::unique_ptr<Queue> queue = device.create_queue();
      queue->fill(a, 0, bytes, 1);
      queue->synchronize();
      double best = 0;
      for (int round = 0; round < 4; ++round) {
        const auto begin = std::chrono::steady_clock::now();
        queue->copy_on_device(b, 0, a, 0, bytes);
        queue->synchronize();
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - begin;
        if (round > 0 && took.count() > 0) best = std::max(best, static_cast<double>(bytes) / took.count());
      }
      device.free(b);
      device.free(a);
      return best > 0 ? best : 1;
    } catch (...) {
      device.free(b);
      device.free(a);
      throw;
    }
  }
  return std::nullopt;
}

}  // namespace

std::vector<double> device_speeds(Runtime& runtime, const std::vector<unsigned>& devices) {
  auto& speeds = attachment<Speeds>(runtime, "skeletons.speeds", [] { return std::make_shared<Speeds>(); });
  std::lock_guard lock(speeds.mutex);
  std::vector<double> out;
  for (unsigned d : devices) {
    auto it = speeds.of.find(d);
    if (it == speeds.of.end()) {
      const std::optional<double> speed = measure_speed(*runtime.devices()[d]);
      if (!speed) return {};  // a device too full to measure now: an equal split this time
      it = speeds.of.emplace(d, *speed).first;
    }
    out.push_back(it->second);
  }
  return out;
}

Parts skeleton_parts(Runtime& runtime, std::vector<unsigned> devices, const SplitChoice& split,
                     std::size_t n) {
  Parts parts{std::move(devices), {}};
  const std::size_t count = parts.devices.size();
  std::vector<double> weights = split.weights;
  if (!weights.empty()) {
    if (weights.size() != count)
      throw InvalidArgument(
          fmt::format("skeleton call: {} split weight{} for {} device{} (one weight per device of the call)",
                      weights.size(), weights.size() == 1 ? "" : "s", count, count == 1 ? "" : "s"));
    for (double w : weights)
      if (!(w > 0) || !std::isfinite(w))
        throw InvalidArgument(fmt::format("skeleton call: split weight {} is not a positive number", w));
  } else if (split.split.value_or(runtime.config().get("HDSM_SKELETON_SPLIT") == "measured"
                                      ? Split::measured
                                      : Split::equal) == Split::measured &&
             count > 1) {
    weights = device_speeds(runtime, parts.devices);
  }
  parts.bounds.resize(count + 1);
  if (weights.empty()) {
    for (std::size_t p = 0; p < count; ++p) parts.bounds[p] = n / count * p;
  } else {
    double total = 0;
    for (double w : weights) total += w;
    double below = 0;
    for (std::size_t p = 0; p < count; ++p) {
      parts.bounds[p] = std::min(n, static_cast<std::size_t>(static_cast<double>(n) * (below / total)));
      below += weights[p];
    }
  }
  parts.bounds[count] = n;
  return parts;
}

SkeletonBackend skeleton_backend(Runtime& runtime, std::optional<SkeletonBackend> chosen) {
  if (chosen) return *chosen;
  return runtime.config().get("HDSM_SKELETON_BACKEND") == "host" ? SkeletonBackend::host
                                                                 : SkeletonBackend::devices;
}

}  // namespace hdsm::detail

namespace hdsm {

std::vector<std::size_t> Farm::operator()(Runtime& runtime, const std::vector<Task>& tasks) {
  std::vector<FarmPlace> places;
  if (detail::skeleton_backend(runtime, backend_) == SkeletonBackend::devices)
    for (unsigned d : detail::skeleton_devices(runtime, devices_))
      places.push_back({SkeletonBackend::devices, d});
  if (host_ || places.empty()) places.push_back({SkeletonBackend::host, 0});
  std::vector<std::size_t> ran(places.size(), 0);
  std::atomic<std::size_t> next{0};
  std::mutex failed_mutex;
  std::exception_ptr failed;
  const auto work = [&](std::size_t w) {
    for (std::size_t t = next.fetch_add(1); t < tasks.size(); t = next.fetch_add(1)) {
      try {
        tasks[t](places[w]);
      } catch (...) {
        std::lock_guard lock(failed_mutex);
        if (!failed) failed = std::current_exception();
      }
      ++ran[w];
    }
  };
  // The calling thread is the last place's worker; the others get a thread each.
  std::vector<std::thread> workers;
  workers.reserve(places.size() - 1);
  try {
    for (std::size_t w = 0; w + 1 < places.size(); ++w) workers.emplace_back(work, w);
  } catch (const std::system_error& e) {
    next.store(tasks.size());  // the started workers stop after their current task
    for (std::thread& t : workers) t.join();
    throw Error(Errc::system, fmt::format("hdsm::Farm: std::thread for a worker: {}", e.what()));
  }
  work(places.size() - 1);
  for (std::thread& t : workers) t.join();
  if (failed) std::rethrow_exception(failed);
  return ran;
}

}  // namespace hdsm
