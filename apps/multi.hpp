// The multi-device workloads of seed 003 §5.3 (Figs. 9 and 10): a 3D stencil with halo exchange
// (apps/stencil_multi.cpp), a radix-2 FFT (apps/fft.cpp) and a mergesort (apps/mergesort.cpp), each
// over 1, 2 or 4 devices with one host thread per device, as the seed's programs. Every app has
// three versions that compute the same output from the same deterministic input:
//   hdsm      - seed Listing 4: shared objects from alloc on each device, call per device, and the
//               exchange between devices as hdsm::memcpy / memcpy_async of shared objects (the copy
//               engine picks peer DMA or staging through pinned host memory);
//   explicit  - seed Listing 1: device buffers and queues of the Device API, the exchange as a copy
//               to a pinned host buffer, a barrier, and a copy from the partner's host buffer;
//   reference - plain serial C++ on the CPU.
// The kernel bodies (host, OpenCL C, CUDA) are shared by hdsm and explicit.
#pragma once

#include "apps/app.hpp"

#include <hdsm/device.hpp>
#include <hdsm/runtime.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

namespace hdsm::apps {

/// What a multi-device run produced and how long its host threads spent exchanging data.
struct MultiRun {
  Output output;
  double seconds = 0;           // from the first kernel to the results in place (inputs placed before)
  double exchange_seconds = 0;  // the host thread that waited longest for exchanges: its wait
};

struct MultiApp {
  std::string_view name;     // "stencil", "fft", "mergesort"
  std::string_view pattern;  // one line: how the data is split and exchanged
  /// The sizes (elements of the data set) the app runs at this scale, smallest first.
  std::vector<std::size_t> (*sizes)(Scale scale);
  /// Bytes of the data set of that size.
  std::size_t (*bytes)(std::size_t size);
  /// The hdsm version on the runtime's devices `devices` (1, 2 or 4 of them).
  MultiRun (*run_hdsm)(Runtime& runtime, std::span<const unsigned> devices, std::size_t size);
  /// The explicit-copy version on `devices`.
  MultiRun (*run_explicit)(std::span<Device* const> devices, std::size_t size);
  Output (*run_reference)(std::size_t size);
  double tolerance;  // as App::tolerance
};

/// stencil, fft, mergesort.
std::span<const MultiApp> multi_device_apps();
const MultiApp* find_multi_app(std::string_view name);
// Each app's entry (apps/stencil_multi.cpp, apps/fft.cpp, apps/mergesort.cpp).
MultiApp stencil_multi_app();
MultiApp fft_app();
MultiApp mergesort_app();

/// Every value of `data` when there are at most `max` of them, otherwise every k-th (k as small as
/// keeps the output within `max`) and the last one.
template <class T>
Output sampled(std::span<const T> data, std::size_t max = 65536) {
  const std::size_t stride = (data.size() + max - 1) / max;
  Output out;
  for (std::size_t i = 0; i < data.size(); i += stride == 0 ? 1 : stride)
    out.values.push_back(static_cast<double>(data[i]));
  if (stride > 1 && !data.empty()) out.values.push_back(static_cast<double>(data.back()));
  return out;
}

/// A barrier of the host threads of one run (std::barrier, but a thread that fails aborts it, so
/// the others stop waiting and the error reaches the caller instead of a hang).
class Team {
 public:
  explicit Team(std::size_t members) : members_(members) {}
  std::size_t size() const { return members_; }
  /// Wait until every member has arrived; throws Aborted once a member has failed.
  void arrive_and_wait();
  void abort();
  struct Aborted {};

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::size_t members_;
  std::size_t waiting_ = 0;
  std::size_t generation_ = 0;
  bool aborted_ = false;
};

/// Runs body(member, team) on `members` host threads (the calling thread is one of them) and
/// rethrows the first member's error.
void run_team(std::size_t members, const std::function<void(std::size_t member, Team& team)>& body);

/// Returns once the device work issued so far on the device that holds the shared object `p` has
/// finished (a one-byte read through the runtime, which is ordered after that work). The hdsm
/// versions call it before they time an exchange, so the time counts the copies and not the kernels
/// that produce their data; the explicit versions synchronize their queues for the same reason.
void wait_for_device(Runtime& runtime, const void* p);

/// The time a host thread spends waiting for exchanges, summed.
class ExchangeTimer {
 public:
  using Clock = std::chrono::steady_clock;
  void start() { begin_ = Clock::now(); }
  void stop() { total_ += std::chrono::duration<double>(Clock::now() - begin_).count(); }
  double seconds() const { return total_; }

 private:
  Clock::time_point begin_{};
  double total_ = 0;
};

/// The chunk of each device when `app` splits `size` values over `devices` devices: both powers of
/// two, at least 2 values a device (std::invalid_argument naming the app otherwise).
std::uint32_t power_of_two_chunk(std::string_view app, std::size_t size, std::size_t devices);

/// A run's result: its output, the run's time, and the exchange time of the member that waited longest.
MultiRun multi_run(Output output, const ExchangeTimer& total, std::span<const ExchangeTimer> members);

/// Pinned host memory of a device for the explicit versions' staging, freed with the object.
class PinnedBuffer {
 public:
  PinnedBuffer(Device& device, std::size_t bytes) : device_(&device), data_(device.alloc_pinned(bytes)) {}
  ~PinnedBuffer() { device_->free_pinned(data_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* get() const { return data_; }

 private:
  Device* device_;
  void* data_;
};

/// A device buffer freed with the object.
class DeviceArray {
 public:
  DeviceArray(Device& device, std::size_t bytes) : device_(&device), buffer_(device.alloc(bytes)) {}
  ~DeviceArray() { device_->free(buffer_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceBuffer get() const { return buffer_; }

 private:
  Device* device_;
  DeviceBuffer buffer_;
};

/// The explicit versions' device-to-device exchange (seed Listing 1): each member copies its
/// buffer to its own pinned host buffer, waits for the team, then copies its partner's host buffer
/// into its device buffer and waits for the team again (after which the host buffers may be reused).
class HostStagedExchange {
 public:
  /// One pinned buffer of `bytes` per device.
  HostStagedExchange(std::span<Device* const> devices, std::size_t bytes);
  /// Member `me` sends `bytes` from `src` at `src_offset` and receives its partner's into `dst` at
  /// `dst_offset` (partner < 0: it only meets the team). Every member of the team calls it.
  void trade(std::size_t me, int partner, Queue& queue, DeviceBuffer src, std::size_t src_offset,
             DeviceBuffer dst, std::size_t dst_offset, std::size_t bytes, Team& team);
  void* staging(std::size_t member) const { return buffers_[member]->get(); }

 private:
  std::vector<std::unique_ptr<PinnedBuffer>> buffers_;
};

}  // namespace hdsm::apps
