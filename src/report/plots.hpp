#pragma once
// SVG line plots of run curves, drawn by gnuplot (`set terminal svg`) run as a subprocess.
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace leap::report {

/// One line of a plot: (x, y) points, an optional band (lo..hi at each x), how it is drawn.
struct Series {
  std::string title;
  std::vector<double> x, y;
  std::vector<double> lo, hi;  ///< band around y (same length as x), e.g. mean ± standard error; empty: none
  enum class Style {
    line,    ///< a solid line, with point markers when the series has few points (<= 60)
    marked,  ///< a dashed line with large square markers (sparse points such as evaluations)
  } style = Style::line;
  int color = 0;  ///< index into the plot palette; series of one arm share it
};

/// One plot to draw.
struct PlotSpec {
  std::string file;    ///< output file name (….svg) inside the plot folder
  std::string title;
  std::string xlabel, ylabel;  ///< axis labels, with units
  std::vector<Series> lines;   ///< lines without points are left out
  std::optional<std::pair<double, double>> yrange;  ///< fixed y range (e.g. [0, 1] for a share)
  std::string caption;         ///< what the plot shows, for the report (HTML figcaption)
};

/// A plot written by write_plots.
struct WrittenPlot {
  std::string path;     ///< the SVG file
  std::string caption;  ///< PlotSpec::caption
};

/// The gnuplot program used ($LEAP_GNUPLOT, else `gnuplot`).
std::string gnuplot_program();

/// True when gnuplot can be run.
bool gnuplot_available();

/// Writes each plot with data as `<dir>/<file>` (data and the gnuplot script go to `<dir>/data/`):
/// 1100 x 560 SVG, the legend below the plot so it takes none of the plot's width. Returns the
/// plots written, in the order of `plots` (a plot without any points is skipped). Throws
/// leap::Error naming the plot and gnuplot's output when gnuplot fails or is missing.
std::vector<WrittenPlot> write_plots(const std::string& dir, const std::vector<PlotSpec>& plots);

}  // namespace leap::report
