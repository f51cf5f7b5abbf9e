#include "coherence/protocol.hpp"
#include "os/fault_path.hpp"

#include <hdsm/error.hpp>

#include <fmt/format.h>

#include <stdexcept>

namespace hdsm::coherence {

namespace {

Transition to(ProtocolKind kind, BlockState next, Transfer transfer = Transfer::none) {
  return {next, protection_of(kind, next), transfer};
}

[[noreturn]] void impossible(const char* event, ProtocolKind kind, BlockState state, const char* detail) {
  throw std::logic_error(fmt::format("coherence: {} cannot happen under the {} protocol on a {} block{}",
                                     event, to_string(kind), to_string(state), detail));
}

}  // namespace

const char* to_string(ProtocolKind kind) noexcept {
  switch (kind) {
    case ProtocolKind::batch:
      return "batch";
    case ProtocolKind::lazy:
      return "lazy";
    case ProtocolKind::rolling:
      return "rolling";
  }
  return "?";
}

const char* to_string(BlockState state) noexcept {
  switch (state) {
    case BlockState::invalid:
      return "invalid";
    case BlockState::read_only:
      return "read_only";
    case BlockState::dirty:
      return "dirty";
  }
  return "?";
}

const char* to_string(KernelUse use) noexcept {
  switch (use) {
    case KernelUse::unknown:
      return "unknown";
    case KernelUse::none:
      return "none";
    case KernelUse::in:
      return "in";
    case KernelUse::out:
      return "out";
    case KernelUse::inout:
      return "inout";
  }
  return "?";
}

const char* to_string(Access access) noexcept { return access == Access::read ? "read" : "write"; }

const char* to_string(Transfer transfer) noexcept {
  switch (transfer) {
    case Transfer::none:
      return "none";
    case Transfer::to_device:
      return "to_device";
    case Transfer::to_host:
      return "to_host";
  }
  return "?";
}

const char* to_string(Side side) noexcept {
  switch (side) {
    case Side::host:
      return "host";
    case Side::device:
      return "device";
    case Side::both:
      return "both";
  }
  return "?";
}

ProtocolKind parse_protocol(std::string_view name) {
  for (const auto kind : {ProtocolKind::batch, ProtocolKind::lazy, ProtocolKind::rolling}) {
    if (name == to_string(kind)) return kind;
  }
  throw ConfigError(fmt::format("unknown coherence protocol '{}'; accepted: batch, lazy, rolling", name));
}

HDSM_FAULT_PATH Protection protection_of(ProtocolKind kind, BlockState state) noexcept {
  if (kind == ProtocolKind::batch) return Protection::read_write;
  switch (state) {
    case BlockState::invalid:
      return Protection::none;
    case BlockState::read_only:
      return Protection::read;
    case BlockState::dirty:
      return Protection::read_write;
  }
  return Protection::none;
}

Transition initial(ProtocolKind kind) noexcept {
  return to(kind, kind == ProtocolKind::batch ? BlockState::dirty : BlockState::read_only);
}

HDSM_FAULT_PATH Transition on_fault(ProtocolKind kind, BlockState state, Access access) {
  const char* const detail = access == Access::read ? " (read access)" : " (write access)";
  if (kind == ProtocolKind::batch) impossible("a fault", kind, state, detail);
  if (state == BlockState::invalid) {
    return to(kind, access == Access::read ? BlockState::read_only : BlockState::dirty, Transfer::to_host);
  }
  if (state == BlockState::read_only && access == Access::write) return to(kind, BlockState::dirty);
  impossible("a fault", kind, state, detail);
}

Transition on_release(ProtocolKind kind, BlockState state, KernelUse use) noexcept {
  switch (use) {
    case KernelUse::none:
      return to(kind, state);
    case KernelUse::in:
      if (state == BlockState::dirty) return to(kind, BlockState::read_only, Transfer::to_device);
      return to(kind, state);
    case KernelUse::out:
      return to(kind, BlockState::invalid);
    case KernelUse::unknown:
    case KernelUse::inout:
      break;
  }
  return to(kind, BlockState::invalid, state == BlockState::dirty ? Transfer::to_device : Transfer::none);
}

Transition on_acquire(ProtocolKind kind, BlockState state, KernelUse use) noexcept {
  if (use == KernelUse::none) return to(kind, state);
  if (kind == ProtocolKind::batch) {
    const bool host_valid = use == KernelUse::in && state != BlockState::invalid;
    return to(kind, BlockState::dirty, host_valid ? Transfer::none : Transfer::to_host);
  }
  if (use == KernelUse::in) return to(kind, state);
  return to(kind, BlockState::invalid);
}

Transition on_evict(ProtocolKind kind, BlockState state) {
  if (kind != ProtocolKind::rolling || state != BlockState::dirty) impossible("an eviction", kind, state, "");
  return to(kind, BlockState::read_only, Transfer::to_device);
}

BulkStep on_bulk_write(ProtocolKind kind, BlockState state, bool whole) noexcept {
  switch (state) {
    case BlockState::invalid:
      return {Side::device, BlockState::invalid};
    case BlockState::read_only:
      if (whole && kind != ProtocolKind::batch) return {Side::device, BlockState::invalid};
      return {Side::both, BlockState::read_only};
    case BlockState::dirty:
      break;
  }
  return {Side::host, BlockState::dirty};
}

Side on_bulk_read(BlockState state) noexcept {
  return state == BlockState::invalid ? Side::device : Side::host;
}

}  // namespace hdsm::coherence
