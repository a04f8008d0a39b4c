// `leap export --format tensorboard`: a synthetic run's metrics written as TensorBoard event files
// and read back with TensorBoard's own reader (EventAccumulator, tools/tensorboard_read.py); every
// value, step and wall time must come back as the store holds it (float32 in the event file).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>

#include "cli/python.hpp"
#include "report_fixture.hpp"
#include "store/store.hpp"
#include "support.hpp"
#include "util/subprocess.hpp"

namespace fs = std::filesystem;

TEST_CASE("export: TensorBoard event files that TensorBoard's reader reads back with the store's values") {
  leap::test::TempDir tmp;
  const std::string db = (tmp.path / "leap.db").string();
  leap::test::SyntheticRun r;
  r.id = "20260101-000000-7b00";
  r.name = "tb";
  r.reward_kind = "binary";
  r.steps = 5;
  std::vector<leap::store::MetricPoint> expect_acc1, expect_eval;
  {
    leap::store::Store st(db);
    leap::test::write_synthetic_run(st, r);
    expect_acc1 = st.metric_series(r.id, "train_acc@1");
    expect_eval = st.metric_series(r.id, "eval/acc@1");
  }
  REQUIRE(expect_acc1.size() == 5);
  REQUIRE(expect_eval.size() == 2);
  const fs::path out = tmp.path / "tb";
  auto e = leap::test::run_leap("--db " + db + " export --format tensorboard --run " + r.id + " --out " + out.string());
  CAPTURE(e.err);
  REQUIRE(e.rc == 0);
  REQUIRE(fs::is_directory(out / r.id));
  for (const auto& f : fs::directory_iterator(out)) CHECK(f.path().filename().string()[0] != '.');  // no temp left

  leap::util::ProcessOptions o;
  o.timeout_s = 300;
  // stdout only: TensorBoard's reader logs on stderr.
  auto read = leap::util::run_process({"sh", "-c", "exec '" + leap::cli::find_python() + "' '" +
                                                  leap::cli::tool_script("tensorboard_read.py") + "' '" +
                                                  (out / r.id).string() + "' 2>/dev/null"}, o);
  CAPTURE(read.output);
  REQUIRE(read.ok());
  const nlohmann::json tb = nlohmann::json::parse(read.output);
  for (const char* tag : {"train/reward_mean", "train/train_acc@1", "train/train_acc@T", "train/env_calls", "train/loss",
                          "eval/acc@1", "eval/acc@2"}) {
    CAPTURE(tag);
    CHECK(tb.contains(tag));
  }
  auto check_series = [&](const std::string& tag, const std::vector<leap::store::MetricPoint>& want) {
    CAPTURE(tag);
    REQUIRE(tb.contains(tag));
    const auto& got = tb[tag];
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CHECK(got[i][0].get<int64_t>() == want[i].step);
      CHECK(std::fabs(got[i][1].get<double>() - want[i].value) <= 1e-6 * std::max(1.0, std::fabs(want[i].value)));
      CHECK(std::fabs(got[i][2].get<double>() - want[i].wall_time) <= 1e-3);
    }
  };
  check_series("train/train_acc@1", expect_acc1);
  check_series("eval/acc@1", expect_eval);

  // Exporting again replaces the run's folder (one copy of each scalar, not two).
  REQUIRE(leap::test::run_leap("--db " + db + " export --format tensorboard --run " + r.id + " --out " + out.string()).rc == 0);
  auto again = leap::util::run_process({"sh", "-c", "exec '" + leap::cli::find_python() + "' '" +
                                                        leap::cli::tool_script("tensorboard_read.py") + "' '" +
                                                        (out / r.id).string() + "' 2>/dev/null"}, o);
  REQUIRE(again.ok());
  CHECK(nlohmann::json::parse(again.output)["eval/acc@1"].size() == 2);

  // Bad use: no --out, an unknown run.
  CHECK(leap::test::run_leap("--db " + db + " export --format tensorboard --run " + r.id).rc == 2);
  CHECK(leap::test::run_leap("--db " + db + " export --format tensorboard --run nosuch --out " + out.string()).rc == 2);
}
