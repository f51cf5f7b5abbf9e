// The Parboil-like apps of seed 000, Table 2; each is defined in its own file.
#pragma once

#include "apps/app.hpp"

namespace hdsm::apps::parboil {

App cp();
App mri_q();
App mri_fhd();
App sad();
App tpacf();
App pns();
App rpes();

/// tpacf's multi-pass CPU initialisation of the shared points and one DD call (seed 000, Fig. 12:
/// rolling size x block size); returns the DD histogram.
Output tpacf_init_adsm(Runtime& rt, int device, Scale scale);

}  // namespace hdsm::apps::parboil
