// The GMAC/ADSM coherence protocols (seed 000, section 4.3, Figure 6) as pure state machines over one
// block: given a protocol, a state and an event they return the next state, the protection the user
// view of the block gets and the transfer to make. They never touch memory or a device; callers apply
// the result (see plan.hpp for whole objects and rolling_window.hpp for rolling-update's FIFO).
//
// States, from the CPU's point of view: invalid = only the accelerator has the block; read_only = both
// have the same version; dirty = the CPU has the newer version.
//
// KernelUse says how one kernel call uses an object: unknown = no annotations (the seed's behaviour:
// every object is released at call and acquired at sync); none = annotated calls that do not name the
// object (untouched); in = the kernel only reads it (the host copy stays valid); out = the kernel only
// writes it, overwriting it (nothing is uploaded, the host copy becomes invalid); inout = as unknown.
//
// Protection is a function of protocol and state: batch never protects (read_write always, it detects
// nothing); lazy and rolling give invalid -> none, read_only -> read, dirty -> read_write.
//
// The complete table. "X / T" = next state X with transfer T (up = to_device, down = to_host, - = none).
//
//   initial            batch: dirty        lazy, rolling: read_only
//
//   on_fault           lazy, rolling (batch: every fault throws std::logic_error)
//     invalid  read    read_only / down
//     invalid  write   dirty / down
//     read_only write  dirty / -
//     read_only read, dirty read, dirty write: std::logic_error (the protection allows the access; the
//     caller filters spurious faults of a degraded ProtectionMap before asking the protocol)
//
//   on_release (at call), the same next states and transfers for all three protocols
//                      unknown, inout      in                  out             none
//     invalid          invalid / -         invalid / -         invalid / -     invalid / -
//     read_only        invalid / -         read_only / -       invalid / -     read_only / -
//     dirty            invalid / up        read_only / up      invalid / -     dirty / -
//
//   on_acquire (at sync)
//     batch            unknown, inout, out in                  none
//       invalid        dirty / down        dirty / down        invalid / -
//       read_only      dirty / down        dirty / -           read_only / -
//       dirty          dirty / down        dirty / -           dirty / -
//     lazy, rolling    unknown, inout, out in                  none
//       invalid        invalid / -         invalid / -         invalid / -
//       read_only      invalid / -         read_only / -       read_only / -
//       dirty          invalid / -         dirty / -           dirty / -
//
//   on_evict           rolling only: dirty -> read_only / up (asynchronous upload); any other state or
//                      protocol: std::logic_error
//
//   bulk operations (memcpy, memset, I/O; seed 000 §4.4): where the operation works and the next
//   state. A "unit" is a block (batch, rolling) or the whole object (lazy); "whole" = the operation
//   overwrites the entire unit. Reads never change the state: invalid -> device, otherwise host.
//     write            lazy, rolling                       batch
//     invalid          device / invalid                    device / invalid
//     read_only whole  device / invalid                    both / read_only
//     read_only part   both / read_only                    both / read_only
//     dirty            host / dirty                        host / dirty
//   "both" writes the host copy (through the shadow view) and the device copy, so the block stays
//   valid on both sides and nothing is fetched or uploaded later. Batch cannot detect CPU reads, so it
//   never makes a host copy invalid outside a call.
//
// Release and acquire are total: a block may be invalid at release (a second call before the sync) and
// read_only or dirty at acquire (the CPU touched the object while the kernel ran, or the call did not
// name it). A kernel that may have written the object wins over CPU writes made while it ran: those are
// a data race under release consistency, and the host copy is dropped (lazy, rolling) or overwritten
// (batch). Batch's read_only only lives between a call that reads the object and the sync; at the sync
// it becomes dirty again because batch cannot see CPU writes.
#pragma once

#include <hdsm/export.h>

#include "os/protection.hpp"

#include <cstdint>
#include <string_view>

HDSM_VISIBLE_BEGIN
namespace hdsm::coherence {

using os::Protection;

enum class ProtocolKind : std::uint8_t { batch, lazy, rolling };
enum class BlockState : std::uint8_t { invalid, read_only, dirty };
enum class KernelUse : std::uint8_t { unknown, none, in, out, inout };
enum class Access : std::uint8_t { read, write };
/// Where a bulk operation works on a block: the host copy (shadow view), the device copy, or both.
enum class Side : std::uint8_t { host, device, both };
/// to_host: fetch the block before the CPU access proceeds (or at the sync); to_device: upload.
enum class Transfer : std::uint8_t { none, to_device, to_host };

const char* to_string(ProtocolKind kind) noexcept;
const char* to_string(BlockState state) noexcept;
const char* to_string(KernelUse use) noexcept;
const char* to_string(Access access) noexcept;
const char* to_string(Transfer transfer) noexcept;
const char* to_string(Side side) noexcept;

/// "batch", "lazy" or "rolling"; anything else throws hdsm::ConfigError naming the value and the choices.
ProtocolKind parse_protocol(std::string_view name);

struct Transition {
  BlockState next;
  Protection protection;
  Transfer transfer;
  bool operator==(const Transition&) const = default;
};

/// The protection the user view of a block in `state` gets under `kind`.
Protection protection_of(ProtocolKind kind, BlockState state) noexcept;

/// State and protection at allocation; the transfer is always none.
Transition initial(ProtocolKind kind) noexcept;
/// A CPU access the block's protection refused. Throws std::logic_error for a fault that cannot happen.
Transition on_fault(ProtocolKind kind, BlockState state, Access access);
/// A kernel call that uses the block's object as `use`.
Transition on_release(ProtocolKind kind, BlockState state, KernelUse use) noexcept;
/// The sync after a call that used the block's object as `use`.
Transition on_acquire(ProtocolKind kind, BlockState state, KernelUse use) noexcept;
struct BulkStep {
  Side side;
  BlockState next;
  bool operator==(const BulkStep&) const = default;
};
/// A bulk operation writes all (`whole`) or part of a unit in `state` (see the table above).
BulkStep on_bulk_write(ProtocolKind kind, BlockState state, bool whole) noexcept;
/// A bulk operation reads a unit in `state`: from the device copy when the host copy is invalid.
Side on_bulk_read(BlockState state) noexcept;
/// Rolling-update pushes a dirty block out of the rolling window. Throws std::logic_error otherwise.
Transition on_evict(ProtocolKind kind, BlockState state);

}  // namespace hdsm::coherence

HDSM_VISIBLE_END
