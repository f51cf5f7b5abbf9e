// The process-wide SIGSEGV/SIGBUS dispatcher: page faults inside registered address ranges go to
// that range's resolver (which fetches data or marks blocks dirty and changes the protection);
// every other fault goes to the handler that was installed before hdsm, or kills the process.
#pragma once

#include <hdsm/export.h>
#include <csignal>

#include <cstddef>
#include <cstdint>

HDSM_VISIBLE_BEGIN
namespace hdsm::os {

enum class FaultAccess { read, write, unknown };

const char* to_string(FaultAccess access) noexcept;

/// Runs inside the signal handler, so it must be async-signal-safe (mprotect, memcpy, atomics; no
/// locks, no allocation). Returns true when it made the access legal (the faulting instruction is
/// retried) and false when the address is not its business (the fault is then foreign).
///
/// `access` is FaultAccess::unknown where the hardware does not tell (every architecture but
/// x86-64 here). A resolver then maps the page read-only first: an instruction that writes faults
/// a second time, on a read-only page, and the resolver makes it writable then.
using FaultResolver = bool (*)(void* context, void* address, FaultAccess access);

/// For tests of the resolvers' paths on other architectures: while on, every fault reaches its
/// resolver as FaultAccess::unknown, as where the hardware does not tell reads from writes.
void report_unknown_access(bool on) noexcept;

/// For the message of a fault that ends the process (a resolver's, or the dispatcher's own): the first
/// thread to claim the report writes it, and claims again from that thread return true. Any other
/// thread (several can die of one bug at once) waits until the report ends, at most 2 s, and gets
/// false: it prints nothing, so the process ends with one clean message. Async-signal-safe.
bool claim_fatal_report() noexcept;
/// The claiming thread's report is written: the threads waiting in claim_fatal_report() go on.
void end_fatal_report() noexcept;

/// How many ranges can be registered at the same time.
inline constexpr int kMaxFaultRanges = 16;

/// Installs the dispatcher for SIGSEGV and SIGBUS once per process; later calls do nothing. Saves the
/// handlers installed before it, to which foreign faults are passed. Thread-safe; covers threads
/// created before and after it (signal dispositions are per process).
void install_fault_handler();

/// sigaction() of SIGSEGV or SIGBUS while hdsm's dispatcher is the process's action: `act` (if any)
/// becomes the handler hdsm passes foreign faults to, and `old` (if any) gets the one before; true.
/// hdsm's handler stays first, so a library that installs its own later (LLVM's crash handler in
/// PoCL's compiler) no longer takes shared memory's faults. False for any other signal or action:
/// the caller asks libc. Async-signal-safe with respect to the calling thread.
bool chain_fault_signal(int sig, const struct sigaction* act, struct sigaction* old) noexcept;

/// Sends faults in [begin, begin+bytes) to `resolver(context, ...)`; installs the dispatcher if it
/// is not installed yet. Throws InvalidArgument for an empty range or one that overlaps a registered
/// range, Unsupported when all kMaxFaultRanges slots are taken. Returns the id for unregistering.
int register_fault_range(void* begin, std::size_t bytes, FaultResolver resolver, void* context);

/// How many of the kMaxFaultRanges slots are free now (for optional registrations that should leave
/// room for ranges that cannot do without one).
int free_fault_ranges();

/// Stops dispatching to the range; returns once no resolver call for it is running on any thread,
/// so the context may be freed afterwards. Must not be called from that range's resolver. Throws
/// InvalidPointer for an id that is not registered.
void unregister_fault_range(int id);

/// Faults resolved since the start (or the last reset), by access kind. Resolvers time themselves
/// (SharedSpace reports its handler time): timing here too would add two clock reads to every fault.
struct FaultStats {
  std::uint64_t reads = 0;
  std::uint64_t writes = 0;
  std::uint64_t unknown = 0;
};

FaultStats fault_stats() noexcept;
void reset_fault_stats() noexcept;

}  // namespace hdsm::os

HDSM_VISIBLE_END
