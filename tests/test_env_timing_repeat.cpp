// The same answer timed twice (cpu backend; issue "GPU path II", item 7): its candidate times and
// its speedups agree within the band documented in docs/env.md ("Repeatability"), and the
// candidate and the reference of one measurement ran the same schedule. Not a speed target: no
// figure of this machine is asserted, only that two measurements of one answer agree.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/environment.hpp"
#include "env/task_runtime.hpp"
#include "support.hpp"
#include "tasks/task_spec.hpp"

using namespace leap;
namespace fs = std::filesystem;

TEST_SUITE_BEGIN("env");

namespace {

// Relu at 1M elements (4 MiB in, 4 MiB out): about a millisecond per call on either side, long
// enough for steady_clock and short enough for 31 trials of both sides in well under a second.
const char* kTask = R"(name: relu_timing
level: 1
prompt: relu
sizes: {B: 256, N: 4096}
inputs:
  x: {dtype: float32, shape: [B, N], init: {normal: {mean: 0, std: 1}}}
outputs:
  y: {dtype: float32, shape: [B, N]}
reference:
  torchscript: |
    def reference(x: Tensor) -> Tensor:
        return torch.relu(x)
tolerance: {atol: 1.0e-5, rtol: 1.0e-5}
)";

const char* kAnswer =
    "```cpp\n#include <cstdint>\nextern \"C\" void relu(const float* x, float* y, int64_t n) {\n"
    "  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;\n}\n```\n"
    "```yaml\nlaunches:\n  - kernel: relu\n    args: [x, y, numel(x)]\n```\n";

/// The band of docs/env.md: two measurements of one answer agree within a factor of 2.
constexpr double kBand = 2.0;

}  // namespace

TEST_CASE("env timing: the same answer timed twice gives candidate-time and speedup ratios within the band") {
  test::TempDir dir;
  fs::create_directories(dir.path / "task");
  std::ofstream(dir.path / "task" / "task.yaml") << kTask;
  config::EnvConfig e;
  e.workers = 2;
  e.seeds = 1;
  e.cache_dir = (dir.path / "cache").string();
  e.timing.warmup = 3;
  e.timing.trials = 31;
  e.timing.max_seconds = 0;  // no time box: both sides run every planned trial, even under load
  auto env = cli::make_environment(e, "cpu");
  env::RuntimeTask task(tasks::load_task((dir.path / "task").string()), "cpu");

  // Up to three measurements; two of them must agree within the band. Under `ctest -j 2` a test
  // beside this one (a Python reference forward, a browser) can take the memory bandwidth during
  // one measurement and not the next, which once put a single pair at 2.4x in CI; a systematic
  // disagreement (state leaking from one evaluation into the next) fails every pair.
  std::vector<env::EvalResult> runs;
  auto agree = [](const env::EvalResult& x, const env::EvalResult& y) {
    const double c = x.candidate_ms / y.candidate_ms, s = x.speedup / y.speedup;
    return c > 1 / kBand && c < kBand && s > 1 / kBand && s < kBand;
  };
  bool agreed = false;
  for (int k = 0; k < 3 && !agreed; ++k) {
    runs.push_back(env->verifier->evaluate(task, kAnswer));  // (the first compiles; then cache hits)
    const auto& r = runs.back();
    CAPTURE(r.feedback);
    REQUIRE(r.verdict == env::Verdict::correct);
    // One schedule for both sides: the same number of trials (no time box, no minimum duration).
    CHECK(r.details.at("trials_candidate") == "31");
    CHECK(r.details.at("trials_reference") == "31");
    CHECK(r.details.at("reference_device") == "cpu");
    MESSAGE("measurement " << k + 1 << ": candidate " << r.candidate_ms << " ms, speedup " << r.speedup);
    for (size_t j = 0; j + 1 < runs.size(); ++j) agreed = agreed || agree(runs[j], r);
  }
  CHECK_MESSAGE(agreed, "no two of " << runs.size() << " measurements agree within " << kBand << "x");
}

TEST_SUITE_END();
