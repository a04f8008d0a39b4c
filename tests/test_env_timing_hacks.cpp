// Answers written to game the timing (cpu backend), and the cap on suspicious speedups (scoring).
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "cli/environment.hpp"
#include "env/input_rewrite.hpp"
#include "util/hash.hpp"
#include "env/run_sample.hpp"
#include "env/task_runtime.hpp"
#include "env/timing_schedule.hpp"
#include "env/verifier.hpp"
#include "rl/scoring.hpp"
#include "env_config.hpp"
#include "support.hpp"
#include "tasks/task_spec.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

using namespace leap;

TEST_SUITE_BEGIN("env");

namespace {

const std::string kStarter = LEAP_SOURCE_DIR "/tasks/starter";

/// Grades `answer` for starter task `task_name` on the cpu backend: one worker, `seeds`
/// correctness seeds, `warmup` + `trials` timed runs and no time box (every planned run happens,
/// even on a loaded machine).
env::EvalResult grade_in(const std::string& task_dir, const std::string& answer, int warmup, int trials, int seeds = 2) {
  test::TempDir dir;
  config::EnvConfig e;
  e.workers = 1;
  e.seeds = seeds;
  e.cache_dir = dir.path.string();
  e.timing.warmup = warmup;
  e.timing.trials = trials;
  e.timing.max_seconds = 0;
  auto env = cli::make_environment(e, "cpu");
  env::RuntimeTask task(tasks::load_task(task_dir), "cpu");
  return env->verifier->evaluate(task, answer);
}

/// The same for starter task `task_name`.
env::EvalResult grade(const std::string& task_name, const std::string& answer, int warmup, int trials, int seeds = 2) {
  return grade_in(kStarter + "/" + task_name, answer, warmup, trials, seeds);
}

/// A relu answer: `code` (includes, globals, the function) and its one-launch plan.
std::string relu_answer(const std::string& code, const std::string& kernel = "relu") {
  return "```cpp\n#include <cstdint>\n" + code + "```\n```yaml\nlaunches:\n  - kernel: " + kernel +
         "\n    args: [x, y, numel(x)]\n```\n";
}

env::EvalResult grade_relu(const std::string& body, int trials = 5) {
  return grade("relu", relu_answer("#include <cmath>\n#include <thread>\nextern \"C\" void relu(const float* x, float* y, int64_t n) {\n" +
                                   body + "\n}\n"),
               1, trials);
}

const char* kCompute = "  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0;";
// Honest on the first two calls of the process (the correctness job's two seeds; a timing job's
// first two runs), so what follows is judged by the timing runs' rules.
const std::string kHonestFirst = std::string("  static long calls_ = 0;\n  if (++calls_ <= 2) {\n") + kCompute + "\n    return;\n  }\n";

}  // namespace

TEST_CASE("env timing: an honest answer is correct, skipping work in later calls is wrong_output") {
  auto honest = grade_relu(kCompute);
  CAPTURE(honest.feedback);
  CHECK(honest.verdict == env::Verdict::correct);

  // Returns at once when its output already holds numbers (as its first call left it): every
  // run starts from poisoned outputs, so it must compute every time, and earns no speedup from
  // skipping (it is an honest answer now: correct, timed like the honest one). Not "never
  // suspicious": this 1-us kernel against a 6-17 us reference measured 6.6x-10.7x with a core
  // busy, so the honest loop itself crosses the 10x re-measure threshold now and then. Skipping
  // would make it hundreds of times faster; the two speedups stayed within 0.59x-2.04x of each
  // other in 73 of 75 runs with a core busy and two training runs at nice 10 beside it (4x is the
  // margin). Compared only when neither was timed by its CPU: in the other 2 runs the CPU-time
  // bound flagged one of the two honest loops (6.3 us of CPU a run against 1.3 us reported),
  // which makes its speedup no baseline (docs/env.md "Timing": a known false positive under load).
  auto skip = grade_relu(std::string("  if (!std::isnan(y[0]) && !std::isnan(y[n - 1])) return;\n") + kCompute);
  CAPTURE(skip.feedback);
  CHECK(skip.verdict == env::Verdict::correct);
  if (honest.details.count("cpu_bound") == 0 && skip.details.count("cpu_bound") == 0)
    CHECK(skip.speedup < 4 * honest.speedup);
  // Returns at once when its output is not all zeros (it assumes zeroed outputs): the poison stays.
  // (Honest in the correctness job's calls: its second seed would find it already.)
  auto zeros = grade_relu(kHonestFirst + "  static bool done = false; if (done && y[0] != 0.0f) return; done = true;\n" + kCompute);
  CAPTURE(zeros.feedback);
  CHECK(zeros.verdict == env::Verdict::wrong_output);
  CHECK((zeros.feedback.find("after the timing loop") != std::string::npos ||
         zeros.feedback.find("on timed call") != std::string::npos));

  // Computes only on its first call of the process: its second seed (the seeds share a worker
  // job), and with a worker per seed the timing job's later runs, are left unwritten.
  auto once = grade_relu(std::string("  static int calls = 0; if (calls++ > 0) return;\n") + kCompute);
  CAPTURE(once.feedback);
  CHECK(once.verdict == env::Verdict::wrong_output);
}

TEST_CASE("env timing: results memoised between calls are wrong_output (inputs change between timed calls)") {
  // Keyed on the input pointer: computes once per input set, then copies the cached result.
  auto by_pointer = grade_relu(kHonestFirst +
      "  static const float* seen[8] = {}; static float* memo[8] = {};\n"
      "  for (int k = 0; k < 8; ++k) if (seen[k] == x) { for (int64_t i = 0; i < n; ++i) y[i] = memo[k][i]; return; }\n"
      "  int k = 0; while (k < 7 && seen[k]) ++k;\n"
      "  seen[k] = x; memo[k] = new float[n];\n"
      "  for (int64_t i = 0; i < n; ++i) memo[k][i] = y[i] = x[i] > 0 ? x[i] : 0;");
  CAPTURE(by_pointer.feedback);
  CHECK(by_pointer.verdict == env::Verdict::wrong_output);
  CHECK((by_pointer.feedback.find("stale") != std::string::npos ||
         by_pointer.feedback.find("must not depend on earlier calls") != std::string::npos));

  // Keyed on a few sampled input values (first, middle, last).
  auto by_values = grade_relu(kHonestFirst +
      "  static float key[8][3]; static float* memo[8] = {}; static int used = 0;\n"
      "  const float s0 = x[0], s1 = x[n / 2], s2 = x[n - 1];\n"
      "  for (int k = 0; k < used; ++k)\n"
      "    if (key[k][0] == s0 && key[k][1] == s1 && key[k][2] == s2) { for (int64_t i = 0; i < n; ++i) y[i] = memo[k][i]; return; }\n"
      "  int k = used < 8 ? used++ : 7;\n"
      "  key[k][0] = s0; key[k][1] = s1; key[k][2] = s2; memo[k] = new float[n];\n"
      "  for (int64_t i = 0; i < n; ++i) memo[k][i] = y[i] = x[i] > 0 ? x[i] : 0;",
      11);  // 12 runs
  // With sparse rewrites alone the sampled values rarely changed, and most calls were stale hits
  // (wrong_output). Every element of the input now changes for every call (perturb_input), so
  // the key never hits: it computes every call, honestly, and earns nothing by its memo.
  CAPTURE(by_values.feedback);
  CHECK(by_values.verdict == env::Verdict::correct);
  CHECK_FALSE(by_values.suspicious);

  // Computes only on its first call for each input set (counts the calls per pointer), then
  // leaves the output alone: caught by the poison and the checked calls.
  auto first_per_set = grade_relu(kHonestFirst +
      "  static const float* seen[8] = {}; for (int k = 0; k < 8; ++k) { if (seen[k] == x) return; if (!seen[k]) { seen[k] = x; break; } }\n" +
      std::string(kCompute));
  CAPTURE(first_per_set.feedback);
  CHECK(first_per_set.verdict == env::Verdict::wrong_output);

  // A full hash of the inputs as the key never hits (the inputs never repeat): honest work, correct.
  auto by_hash = grade_relu(
      "  static unsigned long long keys[64]; static int used = 0; unsigned long long h = 1469598103934665603ULL;\n"
      "  for (int64_t i = 0; i < n; ++i) { unsigned u; __builtin_memcpy(&u, &x[i], 4); h = (h ^ u) * 1099511628211ULL; }\n"
      "  for (int k = 0; k < used; ++k) if (keys[k] == h) return;  // (would leave the poison)\n"
      "  if (used < 64) keys[used++] = h;\n" + std::string(kCompute));
  CAPTURE(by_hash.feedback);
  CHECK(by_hash.verdict == env::Verdict::correct);
}

TEST_CASE("env timing: no result of an earlier call helps a later one, normal inputs (Taylor step) or uniform ones") {
  // Issue "Environment V" item 5, found again by a red team: flipping only the lowest 15 mantissa
  // bits kept every element within 2^-8 of its value, so an answer that kept x, tanh(x) and its
  // derivatives answered with a second-order Taylor step (4.3x unflagged against an honest 0.18x),
  // and uniform inputs got only sparse block rewrites (exact caching of the unchanged blocks:
  // 5.3x). These answers compute honestly, but count the elements where the shortcut was
  // available, and give a wrong output when it was for more than half of a call's elements:
  // correct means the shortcut was (almost) never there.
  const std::string taylor = R"CODE(
#include <cmath>
#include <cstdint>
#include <cstring>
extern "C" void tanh_fwd(const float* x, float* y, int64_t n) {
  static const float* seen[8] = {}; static float* last[8] = {};
  int k = 0; while (k < 8 && seen[k] && seen[k] != x) ++k;
  int64_t reusable = 0;
  if (k < 8 && seen[k] == x)
    for (int64_t i = 0; i < n; ++i) { uint32_t a, b; std::memcpy(&a, &x[i], 4); std::memcpy(&b, &last[k][i], 4); reusable += (a >> 16) == (b >> 16); }
  else if (k < 8) { seen[k] = x; last[k] = new float[n]; }
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
  if (k < 8) std::memcpy(last[k], x, n * sizeof(float));
  if (2 * reusable > n) y[0] = 12345.0f;
}
)CODE";
  auto r = grade("tanh", "```cpp\n" + taylor + "```\n```yaml\nlaunches:\n  - kernel: tanh_fwd\n    args: [x, y, numel(x)]\n```\n", 1, 5);
  CAPTURE(r.feedback);
  CHECK(r.verdict == env::Verdict::correct);

  // A uniform input (KernelBench's torch.rand): every element is drawn afresh for each call.
  test::TempDir dir;
  std::ifstream in(kStarter + "/relu/task.yaml");
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  const std::string normal = "init: {normal: {mean: 0, std: 1}}";
  REQUIRE(yaml.find(normal) != std::string::npos);
  yaml.replace(yaml.find(normal), normal.size(), "init: {uniform: {low: -1, high: 1}}");
  std::filesystem::create_directories(dir.path / "relu_u");
  dir.write("relu_u/task.yaml", yaml);
  auto u = grade_in((dir.path / "relu_u").string(), relu_answer(R"CODE(
#include <cstring>
extern "C" void relu(const float* x, float* y, int64_t n) {
  static const float* seen[8] = {}; static float* last[8] = {};
  int k = 0; while (k < 8 && seen[k] && seen[k] != x) ++k;
  int64_t same = 0;
  if (k < 8 && seen[k] == x)
    for (int64_t i = 0; i < n; ++i) same += std::memcmp(&x[i], &last[k][i], 4) == 0;
  else if (k < 8) { seen[k] = x; last[k] = new float[n]; }
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0;
  if (k < 8) std::memcpy(last[k], x, n * sizeof(float));
  if (2 * same > n) y[0] = 12345.0f;
}
)CODE"), 1, 5);
  CAPTURE(u.feedback);
  CHECK(u.verdict == env::Verdict::correct);
}

TEST_CASE("env verifier: a NaN the code computed is not blamed on an element left unwritten") {
  // Found by a new user on KernelBench's softmax: a version without the max subtraction made
  // inf/inf (x86's default NaN, sign bit set), and the feedback said the element "was probably
  // never written". Only the pre-fill's exact bits say that now.
  auto computed = grade_relu("  for (int64_t i = 0; i < n; ++i) { float z = x[i] - x[i]; y[i] = z / z; }");
  CAPTURE(computed.feedback);
  CHECK(computed.verdict == env::Verdict::wrong_output);
  CHECK(computed.feedback.find("a NaN the code computed") != std::string::npos);
  CHECK(computed.feedback.find("never written") == std::string::npos);
  auto unwritten = grade_relu("  for (int64_t i = 0; i + 1 < n; ++i) y[i] = x[i] > 0 ? x[i] : 0;");
  CAPTURE(unwritten.feedback);
  CHECK(unwritten.verdict == env::Verdict::wrong_output);
  CHECK(unwritten.feedback.find("probably never written") != std::string::npos);
}

TEST_CASE("env timing: every call of a suspicious result is checked when it is re-measured") {
  // Passes the correctness calls (the first two of its process), then computes only on the
  // calls it guesses are the last of each input set in the first timing job (12 runs over 3
  // sets: calls 12-14) and returns at once on the others, so the final outputs are right and
  // the median is a skipped call's time. The calls drawn at random, or else the strict
  // re-measurement of the suspicious speedup (every call checked), see the skipped calls.
  auto guess = grade_relu(
      "  static long calls = 0; ++calls;\n"
      "  if (calls > 2 && calls < 12) return;\n" + std::string(kCompute), 11);
  CAPTURE(guess.feedback);
  CHECK(guess.verdict == env::Verdict::wrong_output);
}

TEST_CASE("scoring: a suspicious speedup counts as the cap in the rank tournament's speedup key") {
  auto outcome = [](double speedup, bool suspicious) {
    rl::RolloutResult r;
    rl::TurnResult t;
    t.result = env::EvalResult::make(env::Verdict::correct, "");
    t.result.speedup = speedup;
    t.result.suspicious = suspicious;
    r.turns.push_back(t);
    return rl::outcome_of(r, 10.0);
  };
  rl::RankOptions opts;
  opts.keys = {"speedup"};
  CHECK(outcome(3000.0, true).first_success_speedup() == doctest::Approx(10.0));
  // Against an honest 10x: a tie (0, 0); against an honest 20x: the honest one wins.
  auto tie = rl::rank_rewards({outcome(3000.0, true), outcome(10.0, false)}, opts);
  CHECK(tie[0] == doctest::Approx(0.0));
  CHECK(tie[1] == doctest::Approx(0.0));
  auto lose = rl::rank_rewards({outcome(3000.0, true), outcome(20.0, false)}, opts);
  CHECK(lose[0] == doctest::Approx(-1.0));
  CHECK(lose[1] == doctest::Approx(1.0));
  // Without the flag the 3000x wins.
  auto win = rl::rank_rewards({outcome(3000.0, false), outcome(20.0, false)}, opts);
  CHECK(win[0] == doctest::Approx(1.0));
}

TEST_CASE("scoring: a suspicious speedup earns exactly what the cap gives, under every reward kind") {
  // Two rollouts: one correct with a suspicious 3000x, one correct at 2x; against the same group
  // where the first is an honest result at exactly the cap (10x), every reward must match.
  auto group_with = [](double first_speedup, bool suspicious) {
    rl::GroupResult g;
    for (double sp : {first_speedup, 2.0}) {
      rl::RolloutResult r;
      rl::TurnResult t;
      t.result = env::EvalResult::make(env::Verdict::correct, "");
      t.result.speedup = sp;
      t.result.suspicious = suspicious && sp == first_speedup;
      r.turns.push_back(t);
      g.rollouts.push_back(r);
    }
    return g;
  };
  config::Experiment exp;
  exp.env.timing.suspicious_speedup = 10.0;
  const auto hacked = group_with(3000.0, true);
  const auto capped = group_with(10.0, false);
  for (const char* kind : {"speedup", "kernelgym", "rank", "binary"}) {
    CAPTURE(kind);
    exp.reward.kind = kind;
    exp.reward.rank_keys = {"speedup"};
    const auto a = rl::score_group(hacked, exp);
    const auto b = rl::score_group(capped, exp);
    REQUIRE(a.size() == 2);
    for (size_t i = 0; i < 2; ++i) {
      CHECK(a[i].reward == doctest::Approx(b[i].reward));
      CHECK(a[i].reward_speedup == doctest::Approx(b[i].reward_speedup));
      CHECK(a[i].reward_kernelgym == doctest::Approx(b[i].reward_kernelgym));
      CHECK(a[i].reward_rank == doctest::Approx(b[i].reward_rank));
    }
  }
  // And the cap matters: without the flag, 3000x is worth more than 10x.
  exp.reward.kind = "speedup";
  CHECK(rl::score_group(group_with(3000.0, false), exp)[0].reward_speedup > rl::score_group(capped, exp)[0].reward_speedup);
}

TEST_CASE("env timing: input rewrites are deterministic, in bounds, disjoint, and differ between runs") {
  std::vector<env::RewriteTarget> targets = {{0, 1000, 4}, {1, 3, 8}, {2, 1, 4}};
  auto a = env::input_rewrites(42, 3, targets);
  CHECK(a.size() >= 3);  // most of the 4 blocks of input 0 (an overlapping draw may be dropped)
  auto again = env::input_rewrites(42, 3, targets);
  REQUIRE(again.size() == a.size());
  bool differs = false;
  auto other = env::input_rewrites(42, 4, targets);
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].dst == again[i].dst);
    CHECK(a[i].src == again[i].src);
    const auto& t = targets[static_cast<size_t>(a[i].input)];
    CHECK(a[i].input != 2);  // a one-element input is never rewritten
    CHECK(a[i].dst + a[i].bytes <= t.numel * t.elem_bytes);
    CHECK(a[i].src + a[i].bytes <= t.numel * t.elem_bytes);
    CHECK((a[i].src + a[i].bytes <= a[i].dst || a[i].dst + a[i].bytes <= a[i].src));
    CHECK(a[i].bytes % t.elem_bytes == 0);
    if (i < other.size() && (other[i].dst != a[i].dst || other[i].src != a[i].src)) differs = true;
  }
  CHECK(differs);
  CHECK(env::input_rewrites(0, 3, targets).empty());  // seed 0: none
}

namespace {

/// perturb_input's documented rule, one element at a time (no vectors): the mantissa bits of a
/// finite normal element XOR-ed with the high bits of the Weyl sequence i * k1 + k0 of the key
/// (seed, run, position); kept only inside [lo, hi) when bounded.
template <class Word, class Weyl>
std::vector<Word> perturbed_by_rule(std::vector<Word> w, uint64_t seed, int run, int position, int mask_bits,
                                    int exp_shift, Word exp_all, double (*value)(Word), const env::UniformBounds* b) {
  const uint64_t key = util::mix_seed(util::mix_seed(seed ^ 0x5045525455524245ull, static_cast<uint64_t>(run)),
                                      static_cast<uint64_t>(position));
  const Weyl k0 = static_cast<Weyl>(key), k1 = static_cast<Weyl>(key >> 17) | 1u;
  for (size_t i = 0; i < w.size(); ++i) {
    const Word e = static_cast<Word>((w[i] >> exp_shift) & exp_all);
    if (e == 0 || e == exp_all) continue;
    const Weyl r = static_cast<Weyl>(static_cast<Weyl>(i) * k1 + k0);
    const Word mask = static_cast<Word>((Word(1) << mask_bits) - 1);
    const Word y = static_cast<Word>(w[i] ^ (static_cast<Word>(r >> (8 * sizeof(Weyl) - mask_bits)) & mask));
    if (!b || (value(y) >= b->low && value(y) < b->high)) w[i] = y;
  }
  return w;
}

template <class Word, class Float>
double as_value(Word w) {
  Float f;
  std::memcpy(&f, &w, sizeof f);
  return static_cast<double>(f);
}

double bf16_value(uint16_t w) { return as_value<uint32_t, float>(static_cast<uint32_t>(w) << 16); }

/// `n` bit patterns of `Word`: values of mixed sign and binade, with zeros, a subnormal, inf and NaN.
template <class Word>
std::vector<Word> mixed_words(size_t n, Word zero, Word inf, Word nan, Word subnormal) {
  std::vector<Word> w(n);
  uint64_t s = 99;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    w[i] = static_cast<Word>(s >> (64 - 8 * sizeof(Word)));
  }
  w[3] = zero, w[5] = inf, w[7] = nan, w[11] = subnormal;
  return w;
}

}  // namespace

TEST_CASE("env timing: the input perturbation gives the documented bits in this machine's vector clone") {
  // perturb_input is built in one clone per vector width and runs the widest this CPU has; the
  // worker and the verifier must agree bit for bit, so every clone must give the rule's bits.
  // Lengths that leave a tail after any vector width.
  for (size_t n : {size_t(1), size_t(13), size_t(1037), size_t(4099)}) {
    CAPTURE(n);
    const env::UniformBounds b{-0.75, 0.5};
    for (const env::UniformBounds* bounds : {static_cast<const env::UniformBounds*>(nullptr), &b}) {
      auto f32 = mixed_words<uint32_t>(std::max<size_t>(n, 12), 0, 0x7F800000u, 0x7FC00000u, 1u);
      f32.resize(n);
      const auto f32_before = f32;
      auto want32 = perturbed_by_rule<uint32_t, uint32_t>(f32, 7, 3, 1, 23, 23, 0xFFu, as_value<uint32_t, float>, bounds);
      env::perturb_input(7, 3, 1, env::DType::float32, f32.data(), n, bounds);
      CHECK(f32 == want32);
      auto f64 = mixed_words<uint64_t>(std::max<size_t>(n, 12), 0, 0x7FF0000000000000ull, 0x7FF8000000000000ull, 1u);
      f64.resize(n);
      auto want64 = perturbed_by_rule<uint64_t, uint64_t>(f64, 7, 4, 2, 52, 52, 0x7FFu, as_value<uint64_t, double>, bounds);
      env::perturb_input(7, 4, 2, env::DType::float64, f64.data(), n, bounds);
      CHECK(f64 == want64);
      auto f16 = mixed_words<uint16_t>(std::max<size_t>(n, 12), 0, 0x7C00u, 0x7E00u, 1u);
      f16.resize(n);
      auto want16 = perturbed_by_rule<uint16_t, uint32_t>(f16, 9, 5, 0, 10, 10, 0x1Fu, as_value<uint16_t, _Float16>, bounds);
      env::perturb_input(9, 5, 0, env::DType::float16, f16.data(), n, bounds);
      CHECK(f16 == want16);
      auto bf = mixed_words<uint16_t>(std::max<size_t>(n, 12), 0, 0x7F80u, 0x7FC0u, 1u);
      bf.resize(n);
      auto want_bf = perturbed_by_rule<uint16_t, uint32_t>(bf, 9, 6, 3, 7, 7, 0xFFu, bf16_value, bounds);
      env::perturb_input(9, 6, 3, env::DType::bfloat16, bf.data(), n, bounds);
      CHECK(bf == want_bf);
      if (!bounds) CHECK(f32 != f32_before);  // it changed something (random bit patterns mostly fall outside the bounds)
    }
  }
}

TEST_CASE("env timing: the schedule runs every set, counts warm-up apart, and stops at a failed hook") {
  env::RunRequest req;
  req.warmup = 2;
  req.trials = 3;
  req.rotations = {{0}, {1}, {2}, {3}, {4}, {5}, {6}};  // more sets than warm-up + trials
  std::vector<size_t> sets;
  env::RunHooks hooks;
  hooks.timed = [&](int, size_t set) {
    sets.push_back(set);
    return 1.0;
  };
  env::RunOutcome out;
  CHECK(env::run_timing_schedule(req, 7, hooks, out));
  CHECK(out.runs.size() == 7);             // every set at least once
  CHECK(out.times_ms.size() == 5);         // runs 2..6 timed
  CHECK(sets == std::vector<size_t>{0, 1, 2, 3, 4, 5, 6});
  // A warm-up hook, when set, runs the warm-up runs instead of `timed` (per-launch profiling
  // must not touch the timed runs); its times are not kept.
  std::vector<int> warm_runs, timed_runs;
  env::RunHooks split;
  split.warmup = [&](int run, size_t) {
    warm_runs.push_back(run);
    return 100.0;
  };
  split.timed = [&](int run, size_t) {
    timed_runs.push_back(run);
    return 1.0;
  };
  env::RunOutcome both;
  CHECK(env::run_timing_schedule(req, 7, split, both));
  CHECK(warm_runs == std::vector<int>{0, 1});
  CHECK(timed_runs == std::vector<int>{2, 3, 4, 5, 6});
  CHECK(both.times_ms == std::vector<double>(5, 1.0));
  env::RunOutcome stopped;
  hooks.after = [](int run, size_t) { return run < 1; };
  CHECK_FALSE(env::run_timing_schedule(req, 7, hooks, stopped));
  CHECK(stopped.runs == std::vector<int>{0, 1});
}

TEST_CASE("env timing: with prepare_outside_box the time box counts the runs, not their preparation") {
  // The CPU reference's prepare clones its inputs; with 1 GiB of weights the clones spent its time
  // box: 1 timed call against the candidate's 11 (a red team, 2026-12-07). Each prepare here
  // sleeps 200 ms against a 0.5-s box: counted, the box ends the job after 3 runs at most.
  env::RunRequest req;
  req.warmup = 1;
  req.trials = 5;
  req.max_seconds = 0.5;
  env::RunHooks hooks;
  hooks.prepare = [](int, size_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return true;
  };
  hooks.timed = [](int, size_t) { return 0.01; };
  env::RunOutcome counted;
  CHECK(env::run_timing_schedule(req, 1, hooks, counted));
  CHECK(counted.runs.size() <= 3);
  CHECK(counted.times_ms.size() < 5);
  hooks.prepare_outside_box = true;
  env::RunOutcome outside;
  CHECK(env::run_timing_schedule(req, 1, hooks, outside));
  CHECK(outside.times_ms.size() == 5);
  CHECK(outside.runs.size() == 6);
}

TEST_CASE("env timing: scratch is zero-filled before every call (DESIGN.md), so accumulating into it is honest") {
  // Launch 1 adds 1 into a scratch scalar, launch 2 scales relu by it: correct only when every
  // run of the launch sequence starts from zeroed scratch. Before 2026-12-06 only a job's first
  // run did, and an honest cross_entropy that summed row losses into scratch failed timed call 2.
  const std::string answer =
      "```cpp\n#include <cstdint>\n"
      "extern \"C\" void count(float* acc) { acc[0] += 1.0f; }\n"
      "extern \"C\" void relu(const float* x, float* y, const float* acc, int64_t n) {\n"
      "  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] > 0 ? x[i] : 0) * acc[0];\n}\n```\n"
      "```yaml\nscratch:\n  acc: {dtype: float32, shape: [1]}\nlaunches:\n"
      "  - kernel: count\n    args: [acc]\n  - kernel: relu\n    args: [x, y, acc, numel(x)]\n```\n";
  auto r = grade("relu", answer, 1, 5);
  CAPTURE(r.feedback);
  CHECK(r.verdict == env::Verdict::correct);
}

TEST_CASE("env timing: a slow but correct kernel is timed, not a timeout (each run gets the limit a correctness run gets)") {
  // Each call takes 0.6 s of CPU against env.run_timeout_s 1 s: every correctness run is within
  // the limit, and the timing job's fewest runs (a spent time box still runs every input set:
  // 3 runs) took 1.8 s, a `timeout` of the job until 2026-12-06 (a naive 1024^3 matmul at 3.5 s a
  // call against 10 s). The job's limit is now 3 x 1 s. A call of 1.5 s is still a timeout.
  auto grade_slow = [](double call_s) {
    test::TempDir dir;
    config::EnvConfig e = test::small_env(dir);
    e.run_timeout_s = 1;
    e.timing.max_seconds = 0.1;
    auto env = cli::make_environment(e, "cpu");
    env::RuntimeTask task(tasks::load_task(kStarter + "/relu"), "cpu");
    return env->verifier->evaluate(
        task, relu_answer("#include <ctime>\nextern \"C\" void relu(const float* x, float* y, int64_t n) {\n" +
                          std::string(kCompute) + "\n  const std::clock_t t0 = std::clock();\n"
                          "  while (std::clock() - t0 < " + std::to_string(call_s) + " * CLOCKS_PER_SEC) {}\n}\n"));
  };
  auto slow = grade_slow(0.6);
  CAPTURE(slow.feedback);
  CHECK(slow.verdict == env::Verdict::correct);
  CHECK(slow.candidate_ms > 500);
  auto too_slow = grade_slow(1.5);
  CAPTURE(too_slow.feedback);
  CHECK(too_slow.verdict == env::Verdict::timeout);
}

TEST_CASE("env timing: code that runs threads is charged their CPU, and is not flagged as a forged time") {
  // A thread the answer starts on its first call spins beside every later call (as a helper
  // thread of parallel code may wait busily). The calling thread's CPU is within the bound; the
  // job's is far over it: timed by its CPU time, as any code over the bound, and not `suspicious`
  // (a new user's honest 2-thread gelu, matmul and linear were flagged as hacks before).
  auto r = grade_relu(std::string("  static bool started = false;\n"
                                  "  if (!started) { started = true; std::thread([] { for (;;) asm volatile(\"\"); }).detach(); }\n") +
                      kCompute);
  CAPTURE(r.feedback);
  REQUIRE(r.verdict == env::Verdict::correct);
  CHECK(r.details.count("cpu_bound") == 1);
  CHECK(r.details.count("cpu_threads_ms_per_run") == 1);
  CHECK_FALSE(r.suspicious);
  CHECK(r.feedback.find("threads besides the calling one") != std::string::npos);
  // Charged: timed by the job's CPU a run, threads included.
  REQUIRE(r.details.count("cpu_ms_per_run") == 1);
  CHECK(r.candidate_ms >= 0.99 * std::stod(r.details.at("cpu_ms_per_run")));
}

TEST_CASE("env: a cpu answer compiles as C++20 with the default flags (std::span)") {
  // g++ 12 defaults to gnu++17: a new user's honest std::span answer was a compile_error.
  auto r = grade("relu", relu_answer("#include <span>\nextern \"C\" void relu(const float* x, float* y, int64_t n) {\n"
                                     "  std::span<const float> in(x, static_cast<size_t>(n));\n"
                                     "  for (size_t i = 0; i < in.size(); ++i) y[i] = in[i] > 0 ? in[i] : 0;\n}\n"),
                 1, 5);
  CAPTURE(r.feedback);
  CHECK(r.verdict == env::Verdict::correct);
}

TEST_CASE("env timing: a run sample drawn as the runs are made keeps each run with the same probability") {
  // Reservoir sampling (env/run_sample.hpp): the first k runs fill the slots, and after n runs
  // each run is kept with probability k / n, whatever n is.
  const size_t k = 8;
  const int n = 40, trials = 20000;
  std::vector<int> kept(n, 0);
  for (int trial = 0; trial < trials; ++trial) {
    env::RunSample sample(k, 1000 + static_cast<uint64_t>(trial), {1, 2});
    bool slots_ok = true, order_ok = true;
    for (int run = 0; run < n; ++run) {
      const int slot = sample.offer(run);
      slots_ok = slots_ok && slot < static_cast<int>(k) && (run >= static_cast<int>(k) || slot == run);
    }
    const auto snaps = sample.snapshots();
    REQUIRE(snaps.size() == k);
    for (size_t i = 0; i < snaps.size(); ++i) {
      order_ok = order_ok && (i == 0 || snaps[i - 1].run < snaps[i].run) && snaps[i].copies.size() == 2 &&
                 snaps[i].copies[0].first == 1 && snaps[i].copies[1].first == 2 &&
                 snaps[i].copies[1].second == snaps[i].copies[0].second + 1;
      ++kept[static_cast<size_t>(snaps[i].run)];
    }
    if (!slots_ok || !order_ok) {
      CHECK(slots_ok);
      CHECK(order_ok);
      break;
    }
  }
  // k / n = 0.2: a binomial share of 20000 draws has a standard deviation of 0.0028; 0.02 is 7 sigma.
  for (int run = 0; run < n; ++run) {
    CAPTURE(run);
    CHECK(std::abs(kept[static_cast<size_t>(run)] / double(trials) - double(k) / n) < 0.02);
  }
  env::RunSample sample(2, 1, {1});
  CHECK(sample.offer(0) == 0);
  CHECK_THROWS(sample.offer(2));  // out of order
}

TEST_CASE("env timing: with warmup_ms the runs checked are drawn from every run the job made") {
  // warmup_ms makes as many warm-up runs as 40 ms of wall time takes (here 100-400 calls of
  // 0.1 ms: each call computes relu, then spins to 0.1 ms, so no CPU-time check job follows). A
  // list of checked runs drawn before the job covered only the runs the job was sure to make
  // (warm-up 1 + trials 5): code that skipped the calls beyond them passed (a red team: 6.9x-9.5x
  // on tanh against an honest 0.18x). Drawn as the runs are made, 256 are checked: the chance
  // that none of the 37 skipped calls is among them is below 1e-15 for up to 400 runs.
  auto grade_warm = [](const std::string& body, bool in_worker = false) {
    test::TempDir dir;
    config::EnvConfig e = test::small_env(dir);
    e.timing.warmup_ms = 40;
    auto env = cli::make_environment(e, "cpu");
    env::VerifierOptions vo = cli::verifier_options(e);
    vo.sample_in_worker = in_worker;  // the cuda backend's way: the worker draws them, into slot tensors
    env::Verifier verifier(env->backend, env->pool, vo);
    env::RuntimeTask task(tasks::load_task(kStarter + "/relu"), "cpu");
    return verifier.evaluate(
        task, relu_answer("#include <ctime>\nstatic double now_us() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); "
                          "return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }\n"
                          "extern \"C\" void relu(const float* x, float* y, int64_t n) {\n  const double t0 = now_us();\n" +
                          body + "\n  while (now_us() - t0 < 100) {}\n}\n"));
  };
  auto honest = grade_warm(kCompute);
  CAPTURE(honest.feedback);
  CHECK(honest.verdict == env::Verdict::correct);
  CHECK(honest.details.count("cpu_bound") == 0);
  auto skip = grade_warm(std::string("  static long calls_ = 0;\n  ++calls_;\n") +
                         "  if (calls_ > 24 && calls_ <= 61) return;  // (a worker process per job: the timing job's calls)\n" +
                         kCompute);
  CAPTURE(skip.feedback);
  CHECK(skip.verdict == env::Verdict::wrong_output);
  CHECK(skip.feedback.find("on timed call") != std::string::npos);
  CHECK(skip.details.count("cpu_check_jobs") == 0);  // found by the timing job's own checks

  // Drawn by the worker (the cuda backend's path, where the worker runs no host code of the
  // answer; RunRequest::worker_sample_slots), the same: the honest answer passes, the skip fails.
  auto honest_w = grade_warm(kCompute, true);
  CAPTURE(honest_w.feedback);
  CHECK(honest_w.verdict == env::Verdict::correct);
  auto skip_w = grade_warm(std::string("  static long calls_ = 0;\n  ++calls_;\n") +
                           "  if (calls_ > 24 && calls_ <= 61) return;\n" + kCompute, true);
  CAPTURE(skip_w.feedback);
  CHECK(skip_w.verdict == env::Verdict::wrong_output);
  CHECK(skip_w.feedback.find("on timed call") != std::string::npos);
}

TEST_CASE("env timing: the warm-up lasts warmup_ms, and trials go on until they sum to min_timed_ms") {
  env::RunRequest req;
  req.warmup = 1;
  req.trials = 3;
  req.rotations = {{0}, {1}};
  req.min_timed_ms = 10;  // every run "takes" 1 ms: 10 trials, not 3
  env::RunHooks hooks;
  hooks.timed = [](int, size_t) { return 1.0; };
  env::RunOutcome out;
  REQUIRE(env::run_timing_schedule(req, 2, hooks, out));
  CHECK(out.times_ms.size() == 10);
  CHECK(out.runs.size() == 11);
  // Capped at 100 x trials when the runs are too short to reach it.
  req.min_timed_ms = 1e9;
  env::RunOutcome capped;
  REQUIRE(env::run_timing_schedule(req, 2, hooks, capped));
  CHECK(capped.times_ms.size() == 300);

  // Warm-up by time: the first trial starts at least warmup_ms after the job.
  req.min_timed_ms = 0;
  req.warmup_ms = 15;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  std::vector<double> at_ms;
  hooks.timed = [&](int, size_t) {
    at_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return 1.0;
  };
  env::RunOutcome warm;
  REQUIRE(env::run_timing_schedule(req, 2, hooks, warm));
  REQUIRE(warm.times_ms.size() == 3);
  const size_t first_trial = warm.runs.size() - 3;
  CHECK(first_trial >= 2);  // more than the one counted warm-up run
  CHECK(at_ms[first_trial] >= 15.0);
}

namespace {

/// matmul_square (n = 128 on the cpu backend) with the naive i-k-j loop; `prelude` goes before it.
env::EvalResult grade_matmul(const std::string& prelude, int trials = 20) {
  const std::string answer =
      "```cpp\n#include <cstdint>\n" + prelude +
      "extern \"C\" void matmul(const float* A, const float* B, float* C, int64_t n) {\n"
      "  for (int64_t i = 0; i < n; ++i) {\n"
      "    float* c = C + i * n;\n"
      "    for (int64_t j = 0; j < n; ++j) c[j] = 0.0f;\n"
      "    for (int64_t k = 0; k < n; ++k) {\n"
      "      const float a = A[i * n + k];\n"
      "      for (int64_t j = 0; j < n; ++j) c[j] += a * B[k * n + j];\n"
      "    }\n"
      "  }\n"
      "}\n```\n```yaml\nlaunches:\n  - kernel: matmul\n    args: [A, B, C, N]\n```\n";
  return grade("matmul_square", answer, 3, trials);
}

/// Code run when the answer is loaded that rewrites libc's clock_gettime to report 1/K of the
/// time passed (the timer runs in the worker that runs the code).
std::string clock_patch(int k) {
  return "#include <cstring>\n#include <ctime>\n#include <dlfcn.h>\n#include <unistd.h>\n#include <sys/mman.h>\n"
         "#include <sys/syscall.h>\n"
         "static long base_ns = -1;\n"
         "static int fake(clockid_t c, struct timespec* ts) {\n"
         "  long r = syscall(SYS_clock_gettime, c, ts);\n"
         "  if (r == 0) { long t = ts->tv_sec * 1000000000L + ts->tv_nsec; if (base_ns < 0) base_ns = t;\n"
         "    long s = base_ns + (t - base_ns) / " + std::to_string(k) + "; ts->tv_sec = s / 1000000000L; ts->tv_nsec = s % 1000000000L; }\n"
         "  return (int)r;\n}\n"
         "__attribute__((constructor)) static void patch() {\n"
         "  void* f = dlsym(RTLD_DEFAULT, \"clock_gettime\"); if (!f) return;\n"
         "  long pg = sysconf(_SC_PAGESIZE); uintptr_t p = (uintptr_t)f & ~(uintptr_t)(pg - 1);\n"
         "  if (mprotect((void*)p, 2 * pg, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return;\n"
         "  void* repl = (void*)&fake; unsigned char code[12] = {0x48, 0xB8, 0,0,0,0,0,0,0,0, 0xFF, 0xE0};\n"
         "  memcpy(code + 2, &repl, 8); memcpy(f, code, 12); mprotect((void*)p, 2 * pg, PROT_READ | PROT_EXEC);\n}\n";
}

/// An answer whose relu computes a quarter of each output in its timed call and points leap's GOT
/// entries for memcpy and munmap at hooks that finish the output when the worker copies it into a
/// snapshot, and each set's last output before the worker unmaps the tensors (outside the timed
/// calls; with that copy in the no-op's job too, the CPU-time bound would not see the moved work).
std::string got_memcpy_hook_answer() {
  return relu_answer(R"(#include <cstring>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
static void compute(const float* x, float* y, int64_t a, int64_t b) {
  for (int64_t i = a; i < b; ++i) y[i] = x[i] > 0 ? x[i] : 0;
}
static void* got_slot(const char* want) {
  struct Ctx { const char* want; void* slot; } ctx{want, nullptr};
  dl_iterate_phdr([](dl_phdr_info* info, size_t, void* data) -> int {
    Ctx* c = (Ctx*)data;
    if (info->dlpi_name && info->dlpi_name[0]) return 0;  // the main program (leap) only
    const ElfW(Dyn)* dyn = nullptr;
    for (int i = 0; i < info->dlpi_phnum; ++i)
      if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn)*)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn) return 1;
    uintptr_t base = info->dlpi_addr, jmprel = 0, symtab = 0, strtab = 0;
    size_t pltsz = 0;
    for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
      if (d->d_tag == DT_JMPREL) jmprel = d->d_un.d_ptr;
      if (d->d_tag == DT_PLTRELSZ) pltsz = d->d_un.d_val;
      if (d->d_tag == DT_SYMTAB) symtab = d->d_un.d_ptr;
      if (d->d_tag == DT_STRTAB) strtab = d->d_un.d_ptr;
    }
    auto fix = [&](uintptr_t a) { return a && a < base ? a + base : a; };
    jmprel = fix(jmprel); symtab = fix(symtab); strtab = fix(strtab);
    for (size_t off = 0; jmprel && off < pltsz; off += sizeof(ElfW(Rela))) {
      const ElfW(Rela)* e = (const ElfW(Rela)*)(jmprel + off);
      const ElfW(Sym)* s = (const ElfW(Sym)*)symtab + ELF64_R_SYM(e->r_info);
      if (std::strcmp((const char*)strtab + s->st_name, c->want) == 0) c->slot = (void*)(base + e->r_offset);
    }
    return 1;
  }, &ctx);
  return ctx.slot;
}
struct Call { const float* x; float* y; int64_t n, done; };
static Call calls[16];
static int ncalls;
static Call* cur;
static void* (*real_memcpy)(void*, const void*, size_t);
static int (*real_munmap)(void*, size_t);
static void finish(Call& c) {
  if (c.done < c.n) compute(c.x, c.y, c.done, c.n);
  c.done = c.n;
}
static void* hook_memcpy(void* d, const void* s, size_t len) {  // the worker's snapshot copy
  if (cur && s == cur->y && len == (size_t)cur->n * 4) finish(*cur);
  return real_memcpy(d, s, len);
}
static int hook_munmap(void* a, size_t len) {  // before the worker unmaps the tensors: each set's last output
  for (int i = 0; i < ncalls; ++i) finish(calls[i]);
  return real_munmap(a, len);
}
static void put(void* slot, void* fn) {
  mprotect((void*)((uintptr_t)slot & ~(uintptr_t)4095), 8192, PROT_READ | PROT_WRITE);
  std::memcpy(slot, &fn, sizeof fn);
}
static bool installed;
__attribute__((constructor)) static void install() {
  void* m = got_slot("memcpy");
  void* u = got_slot("munmap");
  if (!m || !u) return;
  real_memcpy = (void* (*)(void*, const void*, size_t))(*(void**)m);
  real_munmap = (int (*)(void*, size_t))(*(void**)u);
  put(m, (void*)&hook_memcpy);
  put(u, (void*)&hook_munmap);
  installed = true;
}
extern "C" void relu(const float* x, float* y, int64_t n) {
  Call* c = nullptr;
  for (int i = 0; i < ncalls; ++i)
    if (calls[i].y == y) c = &calls[i];
  if (!c && ncalls < 16) c = &calls[ncalls++];
  if (!installed || !c) { compute(x, y, 0, n); return; }
  *c = Call{x, y, n, n / 4};
  compute(x, y, 0, n / 4);
  cur = c;
}
)");
}

}  // namespace

TEST_CASE("env timing: a clock the code rewrites does not change its timed calls (the worker's own system call)") {
  // The same loop, with libc's clock_gettime rewritten at load to report a twentieth of the time
  // passed (an earlier worker timed through libc: this earned ~9x against 0.5x honest). A cpu
  // worker's seccomp now refuses the mprotect that makes libc's page writable and executable, so
  // both answers are timed honestly, and two honest timings on a loaded machine (ctest -j 2 with a
  // core busy) once differed by more than 2x: a pair is measured up to three times, and a patch
  // that worked (~20x) would fail every pair.
  bool within = false;
  for (int pair = 0; pair < 3 && !within; ++pair) {
    auto honest = grade_matmul("");
    CAPTURE(honest.feedback);
    REQUIRE(honest.verdict == env::Verdict::correct);
    CHECK_FALSE(honest.suspicious);
    CHECK(honest.details.count("cpu_bound") == 0);
    REQUIRE(honest.details.count("cpu_ms_per_run") == 1);
    auto patched = grade_matmul(clock_patch(20));
    CAPTURE(patched.feedback);
    REQUIRE(patched.verdict == env::Verdict::correct);
    MESSAGE("pair " << pair << ": honest " << honest.candidate_ms << " ms (" << honest.speedup << "x), patched "
                    << patched.candidate_ms << " ms (" << patched.speedup << "x)");
    within = patched.candidate_ms > 0.5 * honest.candidate_ms && patched.speedup < 2 * honest.speedup;
  }
  CHECK(within);
}

TEST_CASE("env timing: work done beside the timed calls is timed by the job's CPU time and flagged") {
  // 30 ms of CPU when the code is loaded, outside every timed call (where a forged timer, or work
  // done ahead, would hide it the same way): the job's CPU time shows it.
  auto r = grade("relu",
                 relu_answer("#include <ctime>\n"
                             "__attribute__((constructor)) static void busy() {\n"
                             "  const std::clock_t start = std::clock();\n"
                             "  while (std::clock() - start < CLOCKS_PER_SEC / 33) asm volatile(\"\");\n}\n"
                             "extern \"C\" void relu(const float* x, float* y, int64_t n) {\n"
                             "  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0;\n}\n"),
                 1, 5, 1);
  CAPTURE(r.feedback);
  REQUIRE(r.verdict == env::Verdict::correct);
  CHECK(r.suspicious);
  CHECK(r.details.count("cpu_bound") == 1);
  CHECK(r.feedback.find("timed by its CPU time") != std::string::npos);
  // ~30 ms of CPU a job, against microseconds a call: 30 ms over its 6 runs or, a few-us kernel
  // getting a CPU-time check job of many more runs (docs/env.md "Timing"), over that job's runs.
  // At least half of it: the no-op's CPU, measured in other jobs, is taken off, and on a loaded
  // machine (ctest -j) that took 20% off once (fresh-clone CI, 2026-12-03); an uncharged
  // 30 ms would leave the relu's microseconds, 1000x below this bound.
  const int runs = r.details.count("cpu_check_runs") ? std::stoi(r.details.at("cpu_check_runs")) : 6;
  CHECK(r.candidate_ms > 0.5 * 30.0 / runs);
}

TEST_CASE("env timing: the no-op baseline serves any kernel name the plan allows (main included)") {
  auto r = grade("relu",
                 relu_answer("extern \"C\" int main(const float* x, float* y, int64_t n) {\n"
                             "  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0;\n  return 0;\n}\n",
                             "main"),
                 1, 5, 1);
  CAPTURE(r.feedback);
  REQUIRE(r.verdict == env::Verdict::correct);
  CHECK(r.details.count("cpu_ms_per_run") == 1);
  CHECK(r.details.count("cpu_bound_baseline") == 0);
  CHECK(r.details.count("cpu_bound") == 0);
}

TEST_CASE("env timing: code that computes only some of the timed calls fails (every call is checked)") {
  // Skips one call in the middle of the timing job (its 11th of 23: no set's last run). Two
  // checked calls drawn at random would miss it 91% of the time; every call checked, never.
  auto one = grade_relu("  static long calls_ = 0;\n  if (++calls_ == 11) return;\n" + std::string(kCompute), 20);
  CAPTURE(one.feedback);
  CHECK(one.verdict == env::Verdict::wrong_output);
  CHECK(one.feedback.find("on timed call 11 of") != std::string::npos);
}

TEST_CASE("env timing: a CPU-time check job's runs are checked by a sample drawn after it, so skipping some fails") {
  // relu is short, so its timing job (6 runs) is followed by a CPU-time check job of hundreds of
  // runs, a new worker process: this code computes the timing job and skips every 4th call
  // beyond the 40th, which only a check job makes. Of the check job's runs, 128 drawn after the
  // job are checked (VerifierOptions::check_job_sample): all of them miss the skipped quarter
  // with probability 0.75^128, about 1e-16.
  auto r = grade_relu(std::string("  static long calls_ = 0;\n  if (++calls_ > 40 && calls_ % 4 == 0) return;\n") + kCompute);
  CAPTURE(r.feedback);
  CHECK(r.verdict == env::Verdict::wrong_output);
  CHECK((r.feedback.find("on timed call") != std::string::npos ||
         r.feedback.find("after the timing loop") != std::string::npos));
}

TEST_CASE("env timing: no code of the answer runs after its last call (its destructors never run)") {
  // A destructor that would spoil the last output it was given, after the timing loop: the code
  // stays loaded and its worker ends without running it, so the outputs are the calls' own.
  auto r = grade("relu",
                 relu_answer("static float* last_y = nullptr; static int64_t last_n = 0;\n"
                             "__attribute__((destructor)) static void spoil() {\n"
                             "  for (int64_t i = 0; i < last_n; ++i) if (last_y) last_y[i] = 12345.0f;\n}\n"
                             "extern \"C\" void relu(const float* x, float* y, int64_t n) {\n"
                             "  last_y = y; last_n = n;\n"
                             "  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0;\n}\n"),
                 1, 5);
  CAPTURE(r.feedback);
  CHECK(r.verdict == env::Verdict::correct);
}

TEST_CASE("env timing: a hook on leap's memcpy does not see the snapshot copies, so moved work is a wrong output") {
  // (An adversarial check, 2026-12-02: with the worker's snapshot copy through the PLT, this
  // answer passed as correct at 3x the honest loop's speedup, unflagged: the work it moved into
  // the copy the no-op's job pays for too.)
  // Since the worker unmaps a job's tensors only after its reply (issue "Environment V"), the
  // hook on munmap finishes nothing before the parent reads the outputs either: the moved work
  // is missing from the correctness runs already.
  auto r = grade("relu", got_memcpy_hook_answer(), 1, 5, 1);
  CAPTURE(r.feedback);
  CHECK(r.verdict == env::Verdict::wrong_output);
  CHECK((r.feedback.find("timed call") != std::string::npos || r.feedback.find("on seed 1") != std::string::npos));
}
