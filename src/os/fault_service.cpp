#include "os/fault_service.hpp"
#include "os/process.hpp"
#include "os/signal_safe_io.hpp"

#include <hdsm/error.hpp>

#include <system_error>

#include "os/futex.hpp"
#include "os/protection.hpp"
#include "os/spin_wait.hpp"

#include <cstdio>
#include <exception>
#include <new>

namespace hdsm::os {

namespace {

constexpr long kPatienceSeconds = 60;

std::atomic_ref<std::uint32_t> word(std::uint32_t& w) { return std::atomic_ref<std::uint32_t>(w); }

}  // namespace

FaultService::FaultService(FaultResolver resolver, void* context) : resolver_(resolver), context_(context) {
  try {
    thread_ = service_thread([this] { run(); });  // the program's handlers never run on it
  } catch (const std::system_error& e) {
    throw SystemError("pthread_create", "the fault service's thread", e.code().value());
  }
}

FaultService::~FaultService() {
  stop_.store(true, std::memory_order_seq_cst);
  word(sequence_).fetch_add(1, std::memory_order_seq_cst);
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
  word(sequence_).fetch_add(1, std::memory_order_seq_cst);
  // seq_cst pairs with the service's: it either sees this request before it sleeps or is counted
  // in service_sleeping_ here.
  if (service_sleeping_.load(std::memory_order_seq_cst)) futex_wake(sequence_);
  // Spin, then sleep: done goes 0 -> kWaiting (this thread sleeps) -> kDone, or 0 -> kDone.
  auto done = word(request.done);
  if (!spin_until([&] { return done.load(std::memory_order_acquire) == kDone; })) {
    std::uint32_t expected = 0;
    if (done.compare_exchange_strong(expected, kWaiting, std::memory_order_acq_rel)) {
      bool said = false;
      while (done.load(std::memory_order_acquire) != kDone)
        if (!futex_wait_for(request.done, kWaiting, kPatienceSeconds) && !said) {
          // A fault is resolved in microseconds; a minute is a fault waiting for the device work on
          // its object (a long kernel), a page from another rank that does not answer, or one that
          // will never be resolved: a signal handler that touched shared memory on a thread
          // interrupted inside hdsm, which holds the lock the service waits for. Said once (with the
          // usual causes first); the wait goes on.
          said = true;
          signal_safe::Line()
              .str("hdsm: a fault at ")
              .hex(reinterpret_cast<std::uintptr_t>(address))
              .str(" has waited ")
              .decimal(kPatienceSeconds)
              .str(
                  " s for hdsm's fault service: for the device work on its object (a long kernel), "
                  "or a page another rank holds; or, if a signal handler touched shared memory, forever: "
                  "the thread it interrupted may hold the lock the service needs (hdsm is not "
                  "async-signal-safe; take such signals on a thread that makes no hdsm calls)\n")
              .write();
        }
    }
  }
  return request.result;
}

void FaultService::run() {
  for (;;) {
    Request* batch = head_.exchange(nullptr, std::memory_order_acquire);
    if (batch == nullptr) {
      if (stop_.load(std::memory_order_acquire)) return;
      const std::uint32_t seen = word(sequence_).load(std::memory_order_acquire);
      if (spin_until([&] { return head_.load(std::memory_order_relaxed) != nullptr || stop_.load(); }))
        continue;
      service_sleeping_.store(true, std::memory_order_seq_cst);
      if (head_.load(std::memory_order_seq_cst) == nullptr && !stop_.load(std::memory_order_seq_cst))
        futex_wait(sequence_, seen);
      service_sleeping_.store(false, std::memory_order_relaxed);
      continue;
    }
    while (batch != nullptr) {
      Request* next = batch->next;  // the request dies once `done` is set
      try {
        batch->result = resolver_(context_, batch->address, batch->access);
      } catch (const std::bad_alloc& error) {
        // Usually the process's mappings: at vm.max_map_count malloc's own mmap fails too, so they
        // are counted without allocating.
        const MappingCount c = count_mappings();
        if (c.used_known && c.used + 64 >= c.limit)
          std::fprintf(
              stderr,
              "hdsm: resolving the fault at %p failed: out of memory (%s); the process is out of kernel "
              "mappings (%zu in use, vm.max_map_count %zu): %s\n",
              batch->address, error.what(), c.used, c.limit, kOutOfMappingsAdvice);
        else
          std::fprintf(stderr, "hdsm: resolving the fault at %p failed: out of memory (%s)\n", batch->address,
                       error.what());
        batch->result = false;
      } catch (const std::exception& error) {
        std::fprintf(stderr, "hdsm: resolving the fault at %p failed: %s\n", batch->address, error.what());
        batch->result = false;
      }
      // The request (on the faulting thread's stack) may be gone once done is kDone: the futex
      // word's address is only used by a wake that the sleeping waiter is still there for.
      if (word(batch->done).exchange(kDone, std::memory_order_acq_rel) == kWaiting) futex_wake(batch->done);
      batch = next;
    }
  }
}

}  // namespace hdsm::os
