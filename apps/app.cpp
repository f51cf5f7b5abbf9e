#include "apps/app.hpp"

#include "apps/parboil/parboil.hpp"

#include <fmt/format.h>

#include <array>
#include <cmath>

namespace hdsm::apps {

std::span<const App> parboil_apps() {
  static const std::array<App, 7> apps{parboil::cp(),    parboil::mri_q(), parboil::mri_fhd(), parboil::sad(),
                                       parboil::tpacf(), parboil::pns(),   parboil::rpes()};
  return apps;
}

const App* find_app(std::string_view name) {
  for (const App& app : parboil_apps())
    if (app.name == name) return &app;
  return nullptr;
}

std::string compare(const Output& got, const Output& want, double tolerance) {
  if (got.values.size() != want.values.size())
    return fmt::format("{} values, expected {}", got.values.size(), want.values.size());
  for (std::size_t i = 0; i < got.values.size(); ++i) {
    const double g = got.values[i], w = want.values[i];
    const double allowed = tolerance * std::max(1.0, std::fabs(w));
    if (!(std::fabs(g - w) <= allowed))  // also catches NaN
      return fmt::format("value {} is {}, expected {} (tolerance {})", i, g, w, tolerance);
  }
  return {};
}

}  // namespace hdsm::apps
