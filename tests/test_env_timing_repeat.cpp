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

  auto a = env->verifier->evaluate(task, kAnswer);  // (compiles; the second is a cache hit)
  auto b = env->verifier->evaluate(task, kAnswer);
  CAPTURE(a.feedback);
  CAPTURE(b.feedback);
  REQUIRE(a.verdict == env::Verdict::correct);
  REQUIRE(b.verdict == env::Verdict::correct);
  // One schedule for both sides: the same number of trials (no time box, no minimum duration).
  for (const auto* r : {&a, &b}) {
    CHECK(r->details.at("trials_candidate") == "31");
    CHECK(r->details.at("trials_reference") == "31");
    CHECK(r->details.at("reference_device") == "cpu");
  }
  const double cand_ratio = a.candidate_ms / b.candidate_ms;
  const double speedup_ratio = a.speedup / b.speedup;
  MESSAGE("candidate " << a.candidate_ms << " / " << b.candidate_ms << " ms (ratio " << cand_ratio << "), speedup "
                       << a.speedup << " / " << b.speedup << " (ratio " << speedup_ratio << ")");
  CHECK(cand_ratio > 1 / kBand);
  CHECK(cand_ratio < kBand);
  CHECK(speedup_ratio > 1 / kBand);
  CHECK(speedup_ratio < kBand);
}

TEST_SUITE_END();
