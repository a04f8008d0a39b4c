// Profiling feedback (env.profile_feedback): the traffic of a task from its shapes, the text, and
// the line a correct answer's feedback gets through the verifier.
#include <doctest/doctest.h>

#include <filesystem>

#include "cli/environment.hpp"
#include "env/profile.hpp"
#include "env/task_runtime.hpp"
#include "env/verifier.hpp"
#include "support.hpp"
#include "tasks/task_spec.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

using namespace leap;

TEST_SUITE_BEGIN("env");

namespace {
const std::string kRelu = std::string(LEAP_SOURCE_DIR) + "/tasks/starter/relu";
}  // namespace

TEST_CASE("env profile: traffic from the task's shapes and dtypes, the text states bandwidth and share") {
  // relu at its cpu sizes: x and y are float32 [16, 1024].
  env::RuntimeTask relu(tasks::load_task(kRelu), "cpu");
  const auto t = env::task_traffic(relu);
  CHECK(t.read_bytes == 16 * 1024 * 4);
  CHECK(t.written_bytes == 16 * 1024 * 4);
  // At the cuda sizes: [4096, 8192].
  env::RuntimeTask big(tasks::load_task(kRelu), "cuda");
  CHECK(env::task_traffic(big).read_bytes == int64_t{4096} * 8192 * 4);

  // 8e6 bytes in 0.8 ms: 10 GB/s, 50% of 20 GB/s.
  env::ProfileFacts f{1, 0.8, 1.0, {4000000, 4000000}, 20.0, "single-core reference bandwidth", {}};
  CHECK(env::profile_text(f) ==
        "profile: 1 launch per call, 0.8 ms per call (reference 1 ms); it moves at least 8 MB (4 MB of inputs "
        "read, 4 MB of outputs written): 10 GB/s, 50% of the 20 GB/s single-core reference bandwidth");
  // Plain notation with 3 significant digits, never an exponent.
  env::ProfileFacts g{1, 0.001, 0.002, {40000, 32}, 0.1, "single-core reference bandwidth", {}};
  CHECK(env::profile_text(g) ==
        "profile: 1 launch per call, 0.001 ms per call (reference 0.002 ms); it moves at least 0.04 MB (0.04 MB of "
        "inputs read, 0.000032 MB of outputs written): 40 GB/s, 40032% of the 0.1 GB/s single-core reference bandwidth");
  f.launches = 3;
  f.peak_gb_s = 0;  // no stated peak: no share
  CHECK(env::profile_text(f) ==
        "profile: 3 launches per call, 0.8 ms per call (reference 1 ms); it moves at least 8 MB (4 MB of inputs "
        "read, 4 MB of outputs written): 10 GB/s");
  // Per-launch times (cuda, warm-up runs): a second line with each launch's share of their sum.
  f.launches = 2;
  f.launch_times = {{"rows_max", 0.212}, {"rows_norm", 0.6}};
  CHECK(env::profile_text(f) ==
        "profile: 2 launches per call, 0.8 ms per call (reference 1 ms); it moves at least 8 MB (4 MB of inputs "
        "read, 4 MB of outputs written): 10 GB/s\nper launch (warm-up runs): rows_max 0.212 ms (26.1%), rows_norm "
        "0.6 ms (73.9%)");
  f.launch_times = {{"a", 0.0}, {"b", 0.0}};  // no time to share out: times only
  CHECK(env::profile_text(f).find("\nper launch (warm-up runs): a 0 ms, b 0 ms") != std::string::npos);
}

TEST_CASE("env profile: a correct answer's feedback carries the profile line only with the switch on") {
  test::TempDir dir;
  config::EnvConfig e;
  e.workers = 1;
  e.seeds = 2;
  e.cache_dir = (dir.path / "cache").string();
  e.cpu.flags = "-O1 -fPIC -shared";
  e.timing.warmup = 1;
  e.timing.trials = 2;
  e.timing.max_seconds = 0.1;
  e.run_timeout_s = 60;
  const std::string answer = test::read_file(kRelu + "/solutions/cpu_loop.md");
  env::RuntimeTask relu(tasks::load_task(kRelu), "cpu");
  {
    auto env = cli::make_environment(e, "cpu");
    const auto r = env->verifier->evaluate(relu, answer);
    REQUIRE(r.is_correct());
    CHECK(r.feedback.find("profile:") == std::string::npos);
  }
  e.profile_feedback = true;
  e.cpu.peak_gb_s = 12.5;
  auto env = cli::make_environment(e, "cpu");
  const auto r = env->verifier->evaluate(relu, answer);
  REQUIRE(r.is_correct());
  INFO(r.feedback);
  CHECK(r.feedback.find("\nprofile: 1 launch per call, ") != std::string::npos);
  CHECK(r.feedback.find("it moves at least 0.131 MB (0.0655 MB of inputs read, 0.0655 MB of outputs written): ") !=
        std::string::npos);
  CHECK(r.feedback.find("% of the 12.5 GB/s single-core reference bandwidth") != std::string::npos);
}
