#include "report/plots.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "util/error.hpp"
#include "util/subprocess.hpp"

namespace leap::report {

namespace fs = std::filesystem;

namespace {

/// A gnuplot single-quoted string ('' is a quote inside).
std::string gq(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("''") : std::string(1, c);
  return o + "'";
}

/// Colours that stay apart for readers with common colour-vision deficiencies (Okabe-Ito).
const char* colour(int i) {
  static const char* palette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"};
  return palette[static_cast<size_t>(i < 0 ? -i : i) % (sizeof(palette) / sizeof(palette[0]))];
}

/// Writes the series' data file: x y [lo hi]. Throws leap::Error when it cannot.
void write_data(const fs::path& f, const Series& s, const std::string& plot) {
  std::ofstream out(f);
  out.precision(10);
  const bool band = s.lo.size() == s.x.size() && s.hi.size() == s.x.size();
  for (size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) {
    out << s.x[k] << " " << s.y[k];
    if (band) out << " " << s.lo[k] << " " << s.hi[k];
    out << "\n";
  }
  if (!out) throw Error("plot " + plot + ": cannot write " + f.string());
}

/// The gnuplot script drawing `p` from the data files `data` (one per drawn series) into `svg`.
std::string plot_script(const PlotSpec& p, const std::vector<std::pair<std::string, const Series*>>& data,
                        const fs::path& svg) {
  std::string gp = "set terminal svg size 1100,560 dynamic font 'sans,13' background rgb 'white'\n"
                   "set output " + gq(svg.string()) + "\nset encoding utf8\n"
                   "set title " + gq(p.title) + " noenhanced\n"
                   "set xlabel " + gq(p.xlabel) + " noenhanced\n"
                   "set ylabel " + gq(p.ylabel) + " noenhanced\n"
                   "set key below horizontal noenhanced spacing 1.2\n"
                   "set grid\nset tics nomirror\nset border 3\n";
  if (p.yrange) gp += "set yrange [" + std::to_string(p.yrange->first) + ":" + std::to_string(p.yrange->second) + "]\n";
  std::vector<std::string> items;
  // Bands first, so that every line is drawn over them.
  for (const auto& [file, s] : data)
    if (!s->lo.empty())
      items.push_back(gq(file) + " using 1:3:4 with filledcurves fc rgb '" + colour(s->color) +
                      "' fs transparent solid 0.18 noborder notitle");
  for (const auto& [file, s] : data) {
    std::string style;
    if (s->style == Series::Style::marked)
      style = "with linespoints dt 2 lw 1.5 pt 5 ps 1.1";
    else
      style = s->x.size() <= 60 ? "with linespoints lw 2 pt 7 ps 0.6" : "with lines lw 2";
    items.push_back(gq(file) + " using 1:2 " + style + " lc rgb '" + colour(s->color) + "' title " + gq(s->title));
  }
  gp += "plot ";
  for (size_t i = 0; i < items.size(); ++i) gp += (i ? ", \\\n     " : "") + items[i];
  return gp + "\nunset output\n";
}

}  // namespace

std::string gnuplot_program() {
  const char* e = std::getenv("LEAP_GNUPLOT");
  return e && *e ? e : "gnuplot";
}

bool gnuplot_available() {
  util::ProcessOptions o;
  o.timeout_s = 20;
  return util::run_process({gnuplot_program(), "--version"}, o).ok();
}

std::vector<WrittenPlot> write_plots(const std::string& dir, const std::vector<PlotSpec>& plots) {
  std::vector<WrittenPlot> written;
  const fs::path data = fs::path(dir) / "data";
  fs::create_directories(data);
  for (const auto& p : plots) {
    const std::string stem = fs::path(p.file).stem().string();
    std::vector<std::pair<std::string, const Series*>> files;
    for (size_t i = 0; i < p.lines.size(); ++i) {
      const Series& s = p.lines[i];
      if (s.x.empty()) continue;
      fs::path f = data / (stem + "_" + std::to_string(i) + ".dat");
      write_data(f, s, p.file);
      files.emplace_back(f.string(), &s);
    }
    const fs::path svg = fs::path(dir) / p.file;
    if (files.empty()) {
      fs::remove(svg);  // a plot from an earlier report in this folder would be stale
      continue;
    }
    const fs::path script = data / (stem + ".gp");
    {
      std::ofstream gp(script);
      gp << plot_script(p, files, svg);
      if (!gp) throw Error("plot " + p.file + ": cannot write " + script.string());
    }
    util::ProcessOptions o;
    o.timeout_s = 60;
    util::ProcessResult r = util::run_process({gnuplot_program(), script.string()}, o);
    if (r.exec_failed)
      throw Error("plot " + p.file + ": gnuplot not found ('" + gnuplot_program() +
                  "'); install it (Debian: apt-get install gnuplot-nox, see scripts/setup.sh) or set LEAP_GNUPLOT");
    if (!r.ok() || !fs::exists(svg)) throw Error("plot " + p.file + ": gnuplot failed:\n" + r.output);
    written.push_back({svg.string(), p.caption});
  }
  return written;
}

}  // namespace leap::report
