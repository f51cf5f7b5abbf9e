// The Parboil-like apps of seed 000, Table 2; each is defined in its own file.
#pragma once

#include "apps/app.hpp"
#include "apps/grid.hpp"

namespace hdsm::apps::parboil {

App cp();
App mri_q();
App mri_fhd();
App sad();
App tpacf();
App pns();
App rpes();

/// The apps of seed 004's Table 2 on a GridTarget (the cluster runtime or its one-process baseline),
/// with the same kernels as the adsm and explicit versions; their references are the App's.
Output cp_grid(GridTarget& target, Scale scale);
Output mri_q_grid(GridTarget& target, Scale scale);
Output mri_fhd_grid(GridTarget& target, Scale scale);
Output tpacf_grid(GridTarget& target, Scale scale);

/// tpacf's multi-pass CPU initialisation of the shared points and one DD call (seed 000, Fig. 12:
/// rolling size x block size); returns the DD histogram.
Output tpacf_init_adsm(Runtime& rt, int device, Scale scale);

}  // namespace hdsm::apps::parboil
