// The HTML report as a browser shows it: `leap report --format html` over two arms of two seeds,
// opened in headless Chromium at 1400 x 2400. A script added to a copy of the page measures what
// the browser laid out (every plot's width and height, the page's and each table's right edge);
// a screenshot of the page itself is taken too. Skipped (LEAP-SKIP) where no Chromium is installed
// (scripts/setup.sh installs Debian's `chromium`); $LEAP_CHROMIUM names another binary, and
// $LEAP_TEST_ARTIFACTS a folder that keeps the screenshot.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "report/plots.hpp"
#include "report_fixture.hpp"
#include "store/store.hpp"
#include "support.hpp"
#include "util/subprocess.hpp"

namespace fs = std::filesystem;

namespace {

/// The Chromium binary: $LEAP_CHROMIUM, else the first of chromium, chromium-browser, google-chrome
/// in PATH; empty when there is none.
std::string find_chromium() {
  if (const char* e = std::getenv("LEAP_CHROMIUM"); e && *e) return e;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    size_t start = 0;
    while (start <= dirs.size()) {
      size_t end = dirs.find(':', start);
      if (end == std::string::npos) end = dirs.size();
      fs::path p = fs::path(dirs.substr(start, end - start)) / name;
      if (!p.parent_path().empty() && ::access(p.c_str(), X_OK) == 0) return p.string();
      start = end + 1;
    }
  }
  return "";
}

/// Runs headless Chromium on `url` at 1400 x 2400 with `args` (stderr dropped: it logs D-Bus noise).
leap::util::ProcessResult chromium(const std::string& exe, const fs::path& profile, const std::string& url,
                                   const std::string& args) {
  leap::util::ProcessOptions o;
  o.timeout_s = 180;
  o.max_output_bytes = 8 << 20;
  const std::string cmd = "exec '" + exe + "' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
                          "--hide-scrollbars --no-first-run --user-data-dir='" + profile.string() +
                          "' --window-size=1400,2400 " + args + " '" + url + "' 2>/dev/null";
  return leap::util::run_process({"sh", "-c", cmd}, o);
}

// Measures the laid-out page; the marker is built at run time so that the script's own text never
// matches it in the dumped DOM.
const char* kMeasure = R"(<script>
(function () {
  var r = {inner: window.innerWidth, page: document.documentElement.scrollWidth, plots: [], tables: []};
  document.querySelectorAll('figure svg').forEach(function (s) {
    var b = s.getBoundingClientRect(); r.plots.push({w: b.width, h: b.height});
  });
  document.querySelectorAll('table').forEach(function (t) {
    var b = t.getBoundingClientRect(); if (b.width > 0) r.tables.push(b.right);
  });
  var ids = {}; r.ids = 0; r.dup_ids = 0;
  document.querySelectorAll('[id]').forEach(function (e) { r.ids++; if (ids[e.id]) r.dup_ids++; ids[e.id] = 1; });
  r.uses = 0; r.unresolved = 0;  // every <use> of a plot points at an element of the page
  document.querySelectorAll('use').forEach(function (u) {
    var h = u.getAttribute('href') || u.getAttribute('xlink:href') || ''; r.uses++;
    if (h.charAt(0) !== '#' || !document.getElementById(h.substring(1))) r.unresolved++;
  });
  var m = 'LEAP' + 'MEASURE', p = document.createElement('pre');
  p.textContent = m + JSON.stringify(r) + m;
  document.body.appendChild(p);
})();
</script>
)";

}  // namespace

TEST_CASE("report: the HTML report in headless Chromium at 1400 px: every plot at least 600 px wide, nothing wider than the window") {
  const std::string exe = find_chromium();
  if (exe.empty()) {
    MESSAGE("LEAP-SKIP: no Chromium installed (Debian: apt-get install chromium; scripts/setup.sh does it)");
    return;
  }
  if (!leap::report::gnuplot_available()) {
    MESSAGE("LEAP-SKIP: gnuplot is not installed (the report would have no plots)");
    return;
  }
  leap::test::TempDir tmp;
  const std::string db = (tmp.path / "leap.db").string();
  {
    leap::store::Store st(db);
    double t0 = 1000;
    int k = 0;
    for (const char* arm : {"mt_dcp_rank_with_a_long_arm_name", "mt_binary_no_dcp"})
      for (int seed : {0, 1}) {
        leap::test::SyntheticRun r;
        r.id = "20260101-000000-" + std::to_string(1000 + k++);
        r.name = arm;
        r.dcp = std::string(arm).find("no_dcp") == std::string::npos;
        r.reward_kind = r.dcp ? "rank" : "binary";
        r.seed = seed;
        r.t0 = t0 += 1000;
        r.skill = (r.dcp ? 0.3 : 0.15) + 0.05 * seed;
        leap::test::write_synthetic_run(st, r);
      }
  }
  const fs::path out = tmp.path / "report";
  auto rep = leap::test::run_leap("--db " + db + " report --format html --target 0.5 --out " + out.string());
  CAPTURE(rep.err);
  REQUIRE(rep.rc == 0);
  const std::string html = leap::test::read_file((out / "report.html").string());
  REQUIRE(html.find("</body>") != std::string::npos);
  {
    std::ofstream m(out / "measure.html");
    m << html.substr(0, html.rfind("</body>")) << kMeasure << "</body>\n</html>\n";
  }
  auto dom = chromium(exe, tmp.path / "profile", "file://" + (out / "measure.html").string(), "--dump-dom");
  CAPTURE(dom.output.substr(0, 2000));
  REQUIRE(dom.ok());
  const std::string marker = "LEAPMEASURE";
  const size_t a = dom.output.find(marker), b = dom.output.find(marker, a + 1);
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  const nlohmann::json m = nlohmann::json::parse(dom.output.substr(a + marker.size(), b - a - marker.size()));
  CAPTURE(m.dump());
  CHECK(m["inner"].get<double>() == 1400);
  CHECK(m["page"].get<double>() <= m["inner"].get<double>());  // no horizontal scrolling
  REQUIRE(m["plots"].size() >= 10);
  for (const auto& p : m["plots"]) {
    CHECK(p["w"].get<double>() >= 600);
    CHECK(p["h"].get<double>() >= 300);  // the viewBox's aspect ratio, not a 150 px strip
  }
  // gnuplot writes the same ids (gnuplot_canvas, gpPt0, ...) into every plot: prefixed per plot,
  // each id is unique on the page and every point marker still finds its definition.
  CHECK(m["ids"].get<int>() > 10);
  CHECK(m["dup_ids"].get<int>() == 0);
  CHECK(m["uses"].get<int>() > 0);
  CHECK(m["unresolved"].get<int>() == 0);
  REQUIRE(m["tables"].size() >= 5);  // the ablation cut into arms, accuracy, kernels, env calls, time
  for (const auto& right : m["tables"]) CHECK(right.get<double>() <= 1400);

  const fs::path shot = tmp.path / "report.png";
  auto s = chromium(exe, tmp.path / "profile", "file://" + (out / "report.html").string(), "--screenshot=" + shot.string());
  REQUIRE(s.ok());
  const std::string png = leap::test::read_file(shot.string());
  REQUIRE(png.size() > 24);
  CHECK(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  auto be32 = [&](size_t at) {
    return (static_cast<uint32_t>(static_cast<unsigned char>(png[at])) << 24) |
           (static_cast<uint32_t>(static_cast<unsigned char>(png[at + 1])) << 16) |
           (static_cast<uint32_t>(static_cast<unsigned char>(png[at + 2])) << 8) |
           static_cast<uint32_t>(static_cast<unsigned char>(png[at + 3]));
  };
  CHECK(be32(16) == 1400);  // IHDR width
  CHECK(be32(20) == 2400);  // IHDR height
  if (const char* keep = std::getenv("LEAP_TEST_ARTIFACTS"); keep && *keep) {
    fs::create_directories(keep);
    fs::copy_file(shot, fs::path(keep) / "report.png", fs::copy_options::overwrite_existing);
  }
}
