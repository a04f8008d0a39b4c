#pragma once
// SVG line plots of run curves, drawn by gnuplot (`set terminal svg`) run as a subprocess.
#include <string>
#include <vector>

namespace leap::report {

/// One line of a plot: (x, y) points and the legend title.
struct Series {
  std::string title;
  std::vector<double> x, y;
};

/// One plot to draw.
struct PlotSpec {
  std::string file;    ///< output file name (…​.svg) inside the plot folder
  std::string title;
  std::string xlabel, ylabel;
  std::vector<Series> lines;  ///< lines without points are left out
};

/// The gnuplot program used ($LEAP_GNUPLOT, else `gnuplot`).
std::string gnuplot_program();

/// True when gnuplot can be run.
bool gnuplot_available();

/// Writes each plot with data as `<dir>/<file>` (data and the gnuplot script go to `<dir>/data/`).
/// Returns the files written. Throws leap::Error naming the plot and gnuplot's output when
/// gnuplot fails or is missing.
std::vector<std::string> write_plots(const std::string& dir, const std::vector<PlotSpec>& plots);

}  // namespace leap::report
