// Typed, O(1) access to the knobs of src/runtime/knobs.def.
#pragma once

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

/// Sets the process-wide wait policy (os/spin_wait.hpp) from HDSM_WAIT_POLICY and
/// HDSM_WAIT_SPIN_US: every runtime that starts threads does, before they wait.
void apply_wait_policy(const Config& config);

}  // namespace hdsm
