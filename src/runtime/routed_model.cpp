#include "runtime/routed_model.hpp"

#include <hdsm/error.hpp>

#include "device/host_mapping.hpp"
#include "device/managed.hpp"
#include "runtime/adsm_model.hpp"
#include "runtime/host_mapped.hpp"
#include "runtime/knobs.hpp"
#include "runtime/runtime_impl.hpp"
#include "runtime/unified.hpp"
#include "transfer/copy_engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>

namespace hdsm::detail {

std::vector<ModelChoice> choose_models(std::string_view protocol, std::span<Device* const> devices) {
  std::vector<ModelChoice> out;
  for (Device* d : devices) {
    const DeviceProperties& p = d->properties();
    const bool maps = dynamic_cast<HostMapping*>(d) != nullptr;
    if (protocol == "batch" || protocol == "lazy" || protocol == "rolling") {
      out.push_back({std::string(protocol), fmt::format("HDSM_PROTOCOL={}", protocol)});
    } else if (protocol == "um") {
      if (dynamic_cast<ManagedMemory*>(d) == nullptr && maps)
        out.push_back({"host-mapped", fmt::format("HDSM_PROTOCOL=um: {} has no unified memory; its kernels "
                                                  "use host memory in place instead",
                                                  to_string(p.backend))});
      else
        out.push_back({"um", "HDSM_PROTOCOL=um"});
    } else if (protocol == "host-mapped") {
      out.push_back({"host-mapped", "HDSM_PROTOCOL=host-mapped"});
    } else if (p.shares_host_memory && maps) {
      out.push_back({"host-mapped", fmt::format("auto: shares host memory ({}); rolling from the first "
                                                "allocation the platform refuses to map",
                                                p.host_memory_source)});
    } else {
      out.push_back({"rolling", "auto: memory of its own, copied to and from"});
    }
  }
  return out;
}

namespace {

bool is_adsm(const std::string& model) { return model != "um" && model != "host-mapped"; }

UmAdvice um_advice(const Config& config) {
  const std::string& advice = config.get(knob_name(Knob::um_advice));
  return advice == "device" ? UmAdvice::device : advice == "host" ? UmAdvice::host : UmAdvice::none;
}

}  // namespace

std::unique_ptr<MemoryModel> make_memory_model(RuntimeImpl& rt) {
  const auto& choices = rt.model_choices;
  const auto any = [&](auto pred) { return std::any_of(choices.begin(), choices.end(), pred); };
  const bool any_um = any([](const ModelChoice& c) { return c.model == "um"; });
  const bool any_mapped = any([](const ModelChoice& c) { return c.model == "host-mapped"; });
  const bool any_adsm = any([](const ModelChoice& c) { return is_adsm(c.model); });
  const bool fallback = rt.config.get(knob_name(Knob::protocol)) == "auto" && any_mapped;
  if (int{any_um} + int{any_mapped} + int{any_adsm} > 1 || fallback)
    return std::make_unique<RoutedModel>(rt, fallback);
  if (any_um)
    return std::make_unique<UnifiedModel>(rt.devices, rt.default_device,
                                          rt.config.boolean(knob_name(Knob::um_prefetch)),
                                          um_advice(rt.config), rt.self);
  if (any_mapped) return std::make_unique<HostMappedModel>(rt.devices, rt.default_device, rt.self);
  return std::make_unique<AdsmModel>(rt);
}

RoutedModel::RoutedModel(RuntimeImpl& rt, bool fallback)
    : rt_(rt),
      fallback_(fallback),
      adsm_(std::make_unique<AdsmModel>(rt)),
      routes_(std::make_unique<std::atomic<MemoryModel*>[]>(rt.devices.size())) {
  for (std::size_t d = 0; d < rt.devices.size(); ++d) {
    const std::string& model = rt.model_choices[d].model;
    MemoryModel* m = adsm_.get();
    if (model == "um") {
      if (!um_)
        um_ = std::make_unique<UnifiedModel>(rt.devices, rt.default_device,
                                             rt.config.boolean(knob_name(Knob::um_prefetch)),
                                             um_advice(rt.config), rt.self);
      m = um_.get();
    } else if (model == "host-mapped") {
      if (!mapped_)
        mapped_ = std::make_unique<HostMappedModel>(rt.devices, rt.default_device, rt.self, fallback);
      m = mapped_.get();
    }
    routes_[d].store(m, std::memory_order_relaxed);
  }
}

RoutedModel::~RoutedModel() {
  // Each model waits for its calls and frees its objects; the ADSM model last, as it was made first.
  mapped_.reset();
  um_.reset();
  adsm_.reset();
}

const char* RoutedModel::name(const MemoryModel* m) const {
  return m == mapped_.get() ? "host-mapped" : m == um_.get() ? "um" : "copying (ADSM)";
}

MemoryModel* RoutedModel::owner(const void* p) const {
  if (adsm_->mediates(p)) return adsm_.get();
  if (mapped_ && mapped_->find(p)) return mapped_.get();
  if (um_ && um_->find(p)) return um_.get();
  return nullptr;
}

void* RoutedModel::alloc(std::size_t bytes, unsigned device) {
  if (device >= rt_.devices.size())
    throw InvalidArgument(
        fmt::format("alloc on device {}: this runtime has {} devices", device, rt_.devices.size()));
  MemoryModel* m = routes_[device].load(std::memory_order_acquire);
  if (m != mapped_.get() || !fallback_) return m->alloc(bytes, device);
  try {
    return m->alloc(bytes, device);
  } catch (const MappingRefused& e) {
    // The device said it shares host memory, but its platform will not map it: copy instead. A new
    // object holds nothing yet, so nothing is lost; objects mapped before stay mapped.
    std::string reason = e.what();
    std::replace(reason.begin(), reason.end(), '\n', ' ');
    MemoryModel* expected = mapped_.get();
    if (routes_[device].compare_exchange_strong(expected, adsm_.get(), std::memory_order_acq_rel)) {
      {
        std::lock_guard lock(rt_.model_choices_mutex);
        rt_.model_choices[device] = {"rolling", fmt::format("auto: fell back from host-mapped: {}", reason)};
      }
      std::fprintf(stderr, "hdsm: %s cannot map host memory (%s); its objects are copied (rolling) instead\n",
                   rt_.devices[device]->name().c_str(), reason.c_str());
    }
    return adsm_->alloc(bytes, device);
  }
}

void RoutedModel::free(void* p) {
  if (p == nullptr) return;
  MemoryModel* m = owner(p);
  (m != nullptr ? m : adsm_.get())->free(p);
}

void* RoutedModel::device_address(const void* p) const {
  MemoryModel* m = owner(p);
  return (m != nullptr ? m : adsm_.get())->device_address(p);
}

void RoutedModel::call(const Kernel& kernel, const Launch& launch, std::span<const CallArg> args) {
  MemoryModel* chosen = nullptr;
  std::size_t first = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].kind == CallArg::Kind::value) continue;
    MemoryModel* m = owner(args[i].pointer);
    if (m == nullptr) continue;
    if (chosen == nullptr) {
      chosen = m;
      first = i;
    } else if (m != chosen) {
      throw InvalidArgument(fmt::format(
          "call({}): argument {} is an object of the {} model and argument {} one of the {} model; one call "
          "takes "
          "objects of one memory model (HDSM_PROTOCOL gives each device one: `hdsm info` shows which)",
          kernel.name, first, name(chosen), i, name(m)));
    }
  }
  if (chosen == nullptr) chosen = routes_[rt_.default_device].load(std::memory_order_acquire);
  chosen->call(kernel, launch, args);
}

void RoutedModel::sync() {
  std::exception_ptr first;
  for (MemoryModel* m : {static_cast<MemoryModel*>(adsm_.get()), static_cast<MemoryModel*>(um_.get()),
                         static_cast<MemoryModel*>(mapped_.get())}) {
    if (m == nullptr) continue;
    try {
      m->sync();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

// Host-mapped and unified objects are memory the host touches directly: plain memory to the ADSM
// model's copy and fill, once the calls that use them are done.
bool RoutedModel::mediates(const void* p) const { return adsm_->mediates(p); }
void RoutedModel::check(const void* p, std::size_t n, const char* call) const {
  adsm_->check(p, n, call);
  if (mapped_) mapped_->check(p, n, call);
  if (um_) um_->check(p, n, call);
}
void RoutedModel::copy(void* dst, const void* src, std::size_t n, std::vector<Event>* pending) {
  std::vector<DirectModel::BulkGuard> guards;
  const std::array<DirectModel*, 2> direct{mapped_.get(), um_.get()};
  for (DirectModel* m : direct)
    if (m != nullptr) {
      m->check(dst, n, "memcpy");
      m->check(src, n, "memcpy");
      m->settle({{dst, n}, {src, n}});
      guards.push_back(m->guard_bulk(dst, src, n));
    }
  const std::size_t before = pending != nullptr ? pending->size() : 0;
  adsm_->copy(dst, src, n, pending);
  // memcpy_async between an ADSM object and one of these returns with the device transfers under
  // way, after the guards: the direct model orders its later calls, frees and copies after them.
  if (pending == nullptr || pending->size() == before) return;
  const Event done = transfer::all_of(
      std::vector<Event>(pending->begin() + static_cast<std::ptrdiff_t>(before), pending->end()));
  for (DirectModel* m : direct)
    if (m != nullptr) m->note_copy(dst, src, n, done);
}
void RoutedModel::fill(void* dst, std::uint8_t value, std::size_t n) {
  std::vector<DirectModel::BulkGuard> guards;
  for (DirectModel* m : {static_cast<DirectModel*>(mapped_.get()), static_cast<DirectModel*>(um_.get())})
    if (m != nullptr) {
      m->check(dst, n, "memset");
      m->settle({{dst, n}});
      guards.push_back(m->guard_bulk(dst, nullptr, n));
    }
  adsm_->fill(dst, value, n);
}
void RoutedModel::before_direct_io(const void* p, std::size_t n, const char* call) {
  for (DirectModel* m : {static_cast<DirectModel*>(mapped_.get()), static_cast<DirectModel*>(um_.get())})
    if (m != nullptr) m->before_direct_io(p, n, call);
}
coherence::SharedSpace* RoutedModel::space() noexcept { return adsm_->space(); }

}  // namespace hdsm::detail
