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

std::vector<std::string> write_plots(const std::string& dir, const std::vector<PlotSpec>& plots) {
  std::vector<std::string> written;
  const fs::path data = fs::path(dir) / "data";
  fs::create_directories(data);
  for (const auto& p : plots) {
    const std::string stem = fs::path(p.file).stem().string();
    std::vector<std::pair<std::string, std::string>> lines;  // data file, title
    for (size_t i = 0; i < p.lines.size(); ++i) {
      const Series& s = p.lines[i];
      if (s.x.empty()) continue;
      fs::path f = data / (stem + "_" + std::to_string(i) + ".dat");
      std::ofstream out(f);
      out.precision(10);
      for (size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) out << s.x[k] << " " << s.y[k] << "\n";
      if (!out) throw Error("plot " + p.file + ": cannot write " + f.string());
      lines.emplace_back(f.string(), s.title);
    }
    if (lines.empty()) continue;
    const fs::path svg = fs::path(dir) / p.file;
    const fs::path script = data / (stem + ".gp");
    {
      std::ofstream gp(script);
      gp << "set terminal svg size 760,440 dynamic font 'sans,11' background rgb 'white'\n"
         << "set output " << gq(svg.string()) << "\n"
         << "set encoding utf8\n"
         << "set title " << gq(p.title) << " noenhanced\n"
         << "set xlabel " << gq(p.xlabel) << " noenhanced\n"
         << "set ylabel " << gq(p.ylabel) << " noenhanced\n"
         << "set key outside right top noenhanced\n"
         << "set grid\n"
         << "plot ";
      for (size_t i = 0; i < lines.size(); ++i)
        gp << (i ? ", \\\n     " : "") << gq(lines[i].first) << " using 1:2 with linespoints pointsize 0.6 title "
           << gq(lines[i].second);
      gp << "\nunset output\n";
      if (!gp) throw Error("plot " + p.file + ": cannot write " + script.string());
    }
    util::ProcessOptions o;
    o.timeout_s = 60;
    util::ProcessResult r = util::run_process({gnuplot_program(), script.string()}, o);
    if (r.exec_failed)
      throw Error("plot " + p.file + ": gnuplot not found ('" + gnuplot_program() +
                  "'); install it (Debian: apt-get install gnuplot-nox, see scripts/setup.sh) or set LEAP_GNUPLOT");
    if (!r.ok() || !fs::exists(svg)) throw Error("plot " + p.file + ": gnuplot failed:\n" + r.output);
    written.push_back(svg.string());
  }
  return written;
}

}  // namespace leap::report
