#include "os/fault_service.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cstdio>
#include <exception>

namespace hdsm::os {

namespace {

std::atomic_ref<std::uint32_t> word(std::uint32_t& w) { return std::atomic_ref<std::uint32_t>(w); }

void futex_wait(std::uint32_t& w, std::uint32_t expected) noexcept {
  ::syscall(SYS_futex, &w, FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake(std::uint32_t& w) noexcept {
  ::syscall(SYS_futex, &w, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace

FaultService::FaultService(FaultResolver resolver, void* context)
    : resolver_(resolver), context_(context), thread_([this] { run(); }) {}

FaultService::~FaultService() {
  stop_.store(true, std::memory_order_release);
  word(sequence_).fetch_add(1, std::memory_order_release);
  futex_wake(sequence_);
  thread_.join();
}

bool FaultService::submit(void* address, FaultAccess access) noexcept {
  Request request{address, access};
  Request* head = head_.load(std::memory_order_relaxed);
  do {
    request.next = head;
  } while (
      !head_.compare_exchange_weak(head, &request, std::memory_order_release, std::memory_order_relaxed));
  word(sequence_).fetch_add(1, std::memory_order_release);
  futex_wake(sequence_);
  while (word(request.done).load(std::memory_order_acquire) == 0) futex_wait(request.done, 0);
  return request.result;
}

void FaultService::run() {
  for (;;) {
    const std::uint32_t seen = word(sequence_).load(std::memory_order_acquire);
    Request* batch = head_.exchange(nullptr, std::memory_order_acquire);
    if (batch == nullptr) {
      if (stop_.load(std::memory_order_acquire)) return;
      futex_wait(sequence_, seen);
      continue;
    }
    while (batch != nullptr) {
      Request* next = batch->next;  // the request dies once `done` is set
      try {
        batch->result = resolver_(context_, batch->address, batch->access);
      } catch (const std::exception& error) {
        std::fprintf(stderr, "hdsm: resolving the fault at %p failed: %s\n", batch->address, error.what());
        batch->result = false;
      }
      word(batch->done).store(1, std::memory_order_release);
      futex_wake(batch->done);
      batch = next;
    }
  }
}

}  // namespace hdsm::os
