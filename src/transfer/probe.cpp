#include "transfer/probe.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

namespace hdsm::transfer {

namespace {

/// The median seconds of `copies` runs of `once` after one untimed run.
double median_seconds(int copies, const std::function<void()>& once) {
  once();
  std::vector<double> seconds(static_cast<std::size_t>(std::max(copies, 1)));
  for (double& s : seconds) {
    const auto begin = std::chrono::steady_clock::now();
    once();
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

constexpr std::size_t kSmallestProbe = std::size_t{64} << 10;

double gbps(std::size_t bytes, double seconds) { return static_cast<double>(bytes) / seconds / 1e9; }

}  // namespace

LinkRates measure_link(Device& device, std::size_t bytes, int copies) {
  struct Buffers {  // freed however the probe ends
    Device& device;
    void* host = nullptr;
    DeviceBuffer buffer;
    ~Buffers() {
      try {
        if (buffer) device.free(buffer);
        if (host != nullptr) device.free_pinned(host);
      } catch (const std::exception&) {  // the probe's own error, if any, is the one to report
      }
    }
  } b{device};
  b.host = device.alloc_pinned(bytes);
  b.buffer = device.alloc(bytes);
  std::memset(b.host, 0x5a, bytes);
  const std::unique_ptr<Queue> queue = device.create_queue();
  LinkRates rates;
  rates.h2d_gbps = gbps(bytes, median_seconds(copies, [&] {
                          queue->copy_to_device(b.buffer, 0, b.host, bytes);
                          queue->synchronize();
                        }));
  rates.d2h_gbps = gbps(bytes, median_seconds(copies, [&] {
                          queue->copy_to_host(b.host, b.buffer, 0, bytes);
                          queue->synchronize();
                        }));
  return rates;
}

double measure_host_copy(std::size_t bytes, int copies) {
  std::vector<std::byte> a(bytes, std::byte{1}), b(bytes);
  return gbps(bytes, median_seconds(copies, [&] {
                std::memcpy(b.data(), a.data(), bytes);
                asm volatile("" ::: "memory");  // keep every copy
              }));
}

Topology measured_topology(std::span<Device* const> devices, Topology topology, std::size_t bytes,
                           int copies) {
  topology.host_gbps = measure_host_copy(bytes, copies);
  for (std::size_t d = 0; d < devices.size() && d < topology.devices.size(); ++d) {
    const DeviceProperties& p = devices[d]->properties();
    const std::size_t room = (p.memory_bytes - std::min(p.memory_bytes, devices[d]->memory_used())) / 2;
    if (room < kSmallestProbe) continue;  // keeps its stated rates
    const LinkRates rates = measure_link(*devices[d], std::min(bytes, room), copies);
    topology.devices[d].h2d_gbps = rates.h2d_gbps;
    topology.devices[d].d2h_gbps = rates.d2h_gbps;
  }
  return topology;
}

}  // namespace hdsm::transfer
