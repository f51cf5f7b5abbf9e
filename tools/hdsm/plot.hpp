// SVG plots of suite results, drawn by gnuplot fed through a pipe (no temporary files).
#pragma once

#include "suite.hpp"

#include <filesystem>
#include <string>

namespace hdsm::tool {

/// True when a `gnuplot` executable is on the PATH.
bool gnuplot_available();

/// The gnuplot script that draws `plot` from `results` into `svg`.
std::string gnuplot_script(const Results& results, const Plot& plot, const std::filesystem::path& svg);

/// Draw one plot with gnuplot; throws std::runtime_error naming the plot when gnuplot cannot be
/// started, fails, or leaves no file behind.
void render_svg(const Results& results, const Plot& plot, const std::filesystem::path& svg);

}  // namespace hdsm::tool
