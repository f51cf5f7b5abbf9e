// SVG plots of suite results, drawn by gnuplot fed through a pipe (no temporary files).
#pragma once

#include "suite.hpp"

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace hdsm::tool {

/// The points of a plot, one series per distinct value of its series column, sorted by x. For a
/// categorical x, x is the index of the row's name in `categories` (in order of first appearance).
struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;
};
struct PlotData {
  std::vector<PlotSeries> series;
  std::vector<std::string> categories;
};
PlotData plot_data(const Results& results, const Plot& plot);

/// True when a `gnuplot` executable is on the PATH.
bool gnuplot_available();

/// The gnuplot script that draws `plot` from `results` as SVG on gnuplot's standard output.
std::string gnuplot_script(const Results& results, const Plot& plot);

/// Draw one plot with gnuplot into `svg` (written whole or not at all); throws std::runtime_error
/// naming the plot when gnuplot cannot be started, fails, hangs, or writes no complete document.
void render_svg(const Results& results, const Plot& plot, const std::filesystem::path& svg);

}  // namespace hdsm::tool
