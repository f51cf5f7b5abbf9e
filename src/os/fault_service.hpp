// Resolves page faults on a helper thread. A fault handler may only do async-signal-safe work, but
// resolving a fault of a shared object takes locks, allocates and waits for device copies. So the
// handler hands the fault to this service (a lock-free push, and a futex wake where the service
// sleeps) and waits until the service thread has run the real resolver, spinning first and then
// sleeping on a futex (os::spin_until). The faulting thread never runs runtime code
// in the handler; the service thread never touches the user view, so it cannot fault there itself.
#pragma once

#include "os/fault.hpp"

#include <hdsm/export.h>

#include <atomic>
#include <cstdint>
#include <thread>

HDSM_VISIBLE_BEGIN
namespace hdsm::os {

class FaultService {
 public:
  /// `resolver(context, ...)` runs on the service thread, one fault at a time; an exception it
  /// throws is reported on stderr and refuses the fault.
  FaultService(FaultResolver resolver, void* context);
  /// Stops the thread; no submit() may be running or start afterwards (unregister the range first).
  ~FaultService();
  FaultService(const FaultService&) = delete;
  FaultService& operator=(const FaultService&) = delete;

  /// Async-signal-safe: runs the resolver on the service thread and returns its answer.
  bool submit(void* address, FaultAccess access) noexcept;

 private:
  struct Request {
    void* address;
    FaultAccess access;
    bool result = false;
    std::uint32_t done = 0;  // 0, kWaiting or kDone, accessed through atomic_ref (futex word)
    Request* next = nullptr;
  };

  void run();

  static constexpr std::uint32_t kWaiting = 1;  // the faulting thread sleeps on Request::done
  static constexpr std::uint32_t kDone = 2;

  FaultResolver resolver_;
  void* context_;
  std::atomic<Request*> head_{nullptr};
  alignas(4) std::uint32_t sequence_ = 0;  // bumped on every submission and on stop (futex word)
  std::atomic<bool> stop_{false};
  std::atomic<bool> service_sleeping_{false};  // the service thread sleeps (or is about to) on sequence_
  std::thread thread_;
};

}  // namespace hdsm::os

HDSM_VISIBLE_END
