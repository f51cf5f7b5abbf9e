// Typed, O(1) access to the knobs of src/runtime/knobs.def.
#pragma once

#include <hdsm/export.h>
#include <hdsm/config.hpp>

#include <string_view>

namespace hdsm {

enum class Knob {
#define HDSM_KNOB(id, name, type, def, accepted, lo, hi, desc) id,
#include "runtime/knobs.def"
#undef HDSM_KNOB
};

/// The environment/programmatic name of a knob ("HDSM_SIM_DEVICES").
std::string_view knob_name(Knob knob);

/// InvalidArgument unless `value` lies in `knob`'s range: for an option a program sets in code
/// (`option`, "crc::Options::local_store"), which the knob would have refused; `shown` is the value
/// as the message prints it.
HDSM_VISIBLE_BEGIN
void check_option(std::string_view option, Knob knob, double value, std::string_view shown);
/// check_option for a WaitPolicy (`option`, "cluster::Options::wait"): a Kind it names, and spin_us in
/// HDSM_WAIT_SPIN_US's range.
void check_wait_policy(const WaitPolicy& policy, std::string_view option);
HDSM_VISIBLE_END

/// Sets the process-wide wait policy (os/spin_wait.hpp) from HDSM_WAIT_POLICY and
/// HDSM_WAIT_SPIN_US: every runtime that starts threads does, before they wait.
void apply_wait_policy(const Config& config);
/// A program's WaitPolicy (crc and cluster Options), which its caller checked (check_wait_policy).
HDSM_VISIBLE_BEGIN  // the cluster's library sets it too
    void
    apply_wait_policy(const WaitPolicy& policy);
HDSM_VISIBLE_END

/// ConfigError naming both knobs where one knob's value does not fit another's: a staging pool
/// smaller than its chunk (HDSM_STAGING_BYTES, HDSM_STAGING_CHUNK), an MPI pool smaller than two of
/// its chunks, a crc local store smaller than one page. A runtime checks at its start, and `hdsm
/// config` with the environment's values; each knob alone is checked as it is set.
HDSM_VISIBLE_BEGIN
void check_knob_relations(const Config& config);
HDSM_VISIBLE_END

}  // namespace hdsm
