#include "apps/multi.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <exception>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>

namespace hdsm::apps {

void Team::arrive_and_wait() {
  std::unique_lock lock(mutex_);
  if (aborted_) throw Aborted{};
  const std::size_t generation = generation_;
  if (++waiting_ == members_) {
    waiting_ = 0;
    ++generation_;
    arrived_.notify_all();
    return;
  }
  arrived_.wait(lock, [&] { return aborted_ || generation_ != generation; });
  if (generation_ == generation) throw Aborted{};
}

void Team::abort() {
  std::lock_guard lock(mutex_);
  aborted_ = true;
  arrived_.notify_all();
}

void run_team(std::size_t members, const std::function<void(std::size_t, Team&)>& body) {
  Team team(members);
  std::mutex error_mutex;
  std::exception_ptr error;
  const auto member = [&](std::size_t m) {
    try {
      body(m, team);
    } catch (const Team::Aborted&) {  // another member failed: its error is the one to report
    } catch (...) {
      {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
      }
      team.abort();
    }
  };
  std::vector<std::thread> others;
  others.reserve(members - 1);
  for (std::size_t m = 1; m < members; ++m) others.emplace_back(member, m);
  member(0);
  for (auto& t : others) t.join();
  if (error) std::rethrow_exception(error);
}

std::uint32_t power_of_two_chunk(std::string_view app, std::size_t size, std::size_t devices) {
  if (!std::has_single_bit(size) || !std::has_single_bit(devices) || size / devices < 2)
    throw std::invalid_argument(
        fmt::format("{}: {} values over {} devices: both must be powers of two, at least 2 "
                    "values a device",
                    app, size, devices));
  return static_cast<std::uint32_t>(size / devices);
}

MultiRun multi_run(Output output, const ExchangeTimer& total, std::span<const ExchangeTimer> members) {
  MultiRun run{std::move(output), total.seconds(), 0};
  for (const ExchangeTimer& t : members) run.exchange_seconds = std::max(run.exchange_seconds, t.seconds());
  return run;
}

void wait_for_device(Runtime& runtime, const void* p) {
  unsigned char byte = 0;
  runtime.memcpy(&byte, p, 1);
}

HostStagedExchange::HostStagedExchange(std::span<Device* const> devices, std::size_t bytes) {
  for (Device* d : devices) buffers_.push_back(std::make_unique<PinnedBuffer>(*d, bytes));
}

void HostStagedExchange::trade(std::size_t me, int partner, Queue& queue, DeviceBuffer src,
                               std::size_t src_offset, DeviceBuffer dst, std::size_t dst_offset,
                               std::size_t bytes, Team& team) {
  if (partner >= 0) {
    queue.copy_to_host(staging(me), src, src_offset, bytes);
    queue.synchronize();
  }
  team.arrive_and_wait();  // every partner's data is in its host buffer
  if (partner >= 0) {
    queue.copy_to_device(dst, dst_offset, staging(static_cast<std::size_t>(partner)), bytes);
    queue.synchronize();
  }
  team.arrive_and_wait();  // every host buffer has been read
}

std::span<const MultiApp> multi_device_apps() {
  static const MultiApp all[] = {stencil_multi_app(), fft_app(), mergesort_app()};
  return all;
}

const MultiApp* find_multi_app(std::string_view name) {
  for (const MultiApp& app : multi_device_apps())
    if (app.name == name) return &app;
  return nullptr;
}

}  // namespace hdsm::apps
