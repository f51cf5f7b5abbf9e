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

}  // namespace hdsm
