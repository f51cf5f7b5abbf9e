// Which memory model each device gets (HDSM_PROTOCOL), and the model that routes a runtime's objects
// and calls when its devices get different ones: under auto, a device that shares host memory gets
// host-mapped and a discrete one rolling; under um, an OpenCL device (which has no unified memory)
// gets host-mapped. An object belongs to the model of the device it was allocated for; a call goes
// to the model of its objects (one model per call), a sync to every model. Under auto, a device
// whose host mapping fails falls back to rolling, with a one-line notice.
#pragma once

#include <hdsm/device.hpp>

#include "runtime/memory_model.hpp"

#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hdsm::detail {

struct RuntimeImpl;
class AdsmModel;
class UnifiedModel;
class HostMappedModel;

/// What HDSM_PROTOCOL gives one device.
struct ModelChoice {
  std::string model;  // batch, lazy, rolling, um or host-mapped
  std::string why;    // "auto: shares host memory (CL_DEVICE_TYPE_CPU)"
};

/// What `protocol` gives each device, and why.
std::vector<ModelChoice> choose_models(std::string_view protocol, std::span<Device* const> devices);

/// The memory model of a runtime with these choices: the one model every device gets, or a
/// RoutedModel over several (or where a device may fall back).
std::unique_ptr<MemoryModel> make_memory_model(RuntimeImpl& rt);

class RoutedModel final : public MemoryModel {
 public:
  /// `fallback`: a device whose host mapping fails falls back to the ADSM model (auto).
  RoutedModel(RuntimeImpl& rt, bool fallback);
  ~RoutedModel() override;
  RoutedModel(const RoutedModel&) = delete;
  RoutedModel& operator=(const RoutedModel&) = delete;

  void* alloc(std::size_t bytes, unsigned device) override;
  void free(void* p) override;
  void* device_address(const void* p) const override;
  /// InvalidArgument when the call passes objects of two models.
  void call(const Kernel& kernel, const Launch& launch, std::span<const CallArg> args) override;
  void sync() override;
  bool mediates(const void* p) const override;
  void check(const void* p, std::size_t n, const char* call) const override;
  void copy(void* dst, const void* src, std::size_t n, std::vector<Event>* pending) override;
  void fill(void* dst, std::uint8_t value, std::size_t n) override;
  void before_direct_io(const void* p, std::size_t n, const char* call) override;
  coherence::SharedSpace* space() noexcept override;
  AdsmModel* adsm() noexcept override { return adsm_.get(); }

 private:
  /// The model whose object holds p; nullptr for other memory.
  MemoryModel* owner(const void* p) const;
  const char* name(const MemoryModel* m) const;

  RuntimeImpl& rt_;
  bool fallback_;
  std::unique_ptr<AdsmModel> adsm_;
  std::unique_ptr<UnifiedModel> um_;
  std::unique_ptr<HostMappedModel> mapped_;
  std::unique_ptr<std::atomic<MemoryModel*>[]> routes_;  // by device
};

}  // namespace hdsm::detail
