// The reference's inputs and outputs kept across evaluations (env/reference_cache.hpp): bounded,
// least recently used first out, and used by the verifier so a group's answers share one
// reference run per seed without changing any verdict.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "cli/environment.hpp"
#include "config/experiment.hpp"
#include "env/reference.hpp"
#include "env/reference_cache.hpp"
#include "env/task_runtime.hpp"
#include "env/verifier.hpp"
#include "support.hpp"
#include "tasks/task_spec.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

using namespace leap::env;

namespace {

const std::string kStarter = std::string(LEAP_SOURCE_DIR) + "/tasks/starter";

/// An input set of one float tensor of `n` elements (4n bytes), all `value`.
std::vector<torch::Tensor> one_input(int64_t n, float value) { return {torch::full({n}, value)}; }

}  // namespace

TEST_CASE("env reference cache: bounded by bytes, least recently used out, an entry too large not kept") {
  ReferenceCache cache(4096);  // room for two entries of 1600 bytes
  int made = 0;
  auto make = [&](float v) { return [&made, v] { ++made; return one_input(400, v); }; };
  auto a = cache.inputs("a", make(1));
  auto b = cache.inputs("b", make(2));
  CHECK(made == 2);
  CHECK(cache.stats().bytes == 3200);
  CHECK(cache.inputs("a", make(9))->inputs[0][0].item<float>() == 1);  // a hit, and now the most recent
  CHECK(made == 2);
  cache.inputs("c", make(3));  // evicts b, the least recently used
  CHECK(made == 3);
  CHECK(cache.stats().bytes == 3200);
  CHECK(cache.inputs("a", make(9))->inputs[0][0].item<float>() == 1);
  CHECK(made == 3);
  CHECK(cache.inputs("b", make(2))->inputs[0][0].item<float>() == 2);  // made again
  CHECK(made == 4);
  // Outputs join their inputs' entry; a second call finds them.
  int ran = 0;
  auto run = [&](const std::vector<torch::Tensor>& in) { ++ran; return std::vector<torch::Tensor>{in[0] * 2}; };
  auto e = cache.inputs("a", make(9));
  CHECK(cache.outputs("a", e, run)[0][0].item<float>() == 2);
  CHECK(cache.outputs("a", e, run)[0][0].item<float>() == 2);
  CHECK(ran == 1);
  const auto s = cache.stats();
  CHECK(s.output_hits == 1);
  CHECK(s.output_misses == 1);
  CHECK(s.bytes <= 4096);
  // Larger than the whole budget: used, never kept, nothing else evicted for it.
  auto big = cache.inputs("big", [] { return one_input(2000, 5); });
  CHECK(big->inputs[0].numel() == 2000);
  CHECK(cache.stats().bytes == s.bytes);
  // A cache of size 0 keeps nothing.
  ReferenceCache none(0);
  none.inputs("a", make(1));
  none.inputs("a", make(1));
  CHECK(none.stats().input_hits == 0);
  CHECK(none.stats().bytes == 0);
}

TEST_CASE("env reference cache: keys differ by task, seed, threads and sizes") {
  RuntimeTask softmax(leap::tasks::load_task(kStarter + "/softmax_rows"), "cpu");
  RuntimeTask relu(leap::tasks::load_task(kStarter + "/relu"), "cpu");
  leap::tasks::TaskSpec bigger_spec = leap::tasks::load_task(kStarter + "/softmax_rows");
  for (auto& [name, value] : bigger_spec.size_overrides["cpu"]) value *= 2;
  RuntimeTask bigger(bigger_spec, "cpu");
  const std::string k = ReferenceCache::key(softmax, 7, 1);
  CHECK(k == ReferenceCache::key(softmax, 7, 1));
  CHECK(k != ReferenceCache::key(softmax, 8, 1));
  CHECK(k != ReferenceCache::key(softmax, 7, 2));
  CHECK(k != ReferenceCache::key(relu, 7, 1));
  CHECK(k != ReferenceCache::key(bigger, 7, 1));
}

TEST_CASE("env reference cache: a group's answers share one reference run per seed, verdicts unchanged") {
  leap::test::TempDir cache_dir;
  leap::config::EnvConfig e;
  e.workers = 2;
  e.seeds = 3;
  e.run_timeout_s = 2.0;
  e.cache_dir = cache_dir.path.string();
  e.cpu.flags = "-O1 -fPIC -shared";
  e.timing.warmup = 1;
  e.timing.trials = 3;
  e.timing.max_seconds = 0.2;
  auto env = leap::cli::make_environment(e, "cpu");
  RuntimeTask task(leap::tasks::load_task(kStarter + "/softmax_rows"), "cpu");
  const std::string good = leap::test::read_file(kStarter + "/softmax_rows/solutions/cpu_rows.md");
  const std::string half = good.find("r < rows") != std::string::npos
                               ? std::string(good).replace(good.find("r < rows"), 8, "r < rows / 2")
                               : std::string();
  REQUIRE_FALSE(half.empty());

  EvalResult first = env->verifier->evaluate(task, good);
  CAPTURE(first.feedback);
  CHECK(first.verdict == Verdict::correct);
  ReferenceCacheStats s1 = env->verifier->reference_cache().stats();
  CHECK(s1.output_misses == 3);  // one reference run per correctness seed
  CHECK(s1.output_hits == 0);
  CHECK(s1.input_misses == 3 + 3);  // correctness seeds and timing sets, generated once
  CHECK(s1.bytes > 0);

  EvalResult second = env->verifier->evaluate(task, good);
  CHECK(second.verdict == Verdict::correct);
  EvalResult wrong = env->verifier->evaluate(task, half);
  CAPTURE(wrong.feedback);
  CHECK(wrong.verdict == Verdict::wrong_output);  // checked against the kept outputs
  CHECK(wrong.details.at("first_bad_index") == "[8, 0]");
  ReferenceCacheStats s2 = env->verifier->reference_cache().stats();
  CHECK(s2.output_misses == 3);  // no new reference run on the correctness seeds
  CHECK(s2.output_hits == 3 + 3);  // the second answer's 3 seeds, the wrong one's 3 (read while its job runs)
  CHECK(s2.input_misses == s1.input_misses);
}

TEST_CASE("env compare: a float64 reference far beyond float's range keeps a tolerance of its own scale") {
  // Elements of 1e200: their squares overflow double, and the rms (hence the absolute
  // tolerance) was infinite, so any finite output passed. Elements of 1e-200: their squares
  // underflow to 0. The rms is checked against long double (whose exponent reaches 1e4932).
  torch::manual_seed(5);
  for (const double scale : {1e200, 1e-200, 1e150, 1.0}) {
    CAPTURE(scale);
    torch::Tensor ref = torch::randn({3001}, torch::kDouble) * scale;
    ref[7] = INFINITY;
    ref[9] = NAN;
    long double sum_sq = 0;
    int64_t finite = 0;
    const double* r = ref.data_ptr<double>();
    for (int64_t k = 0; k < ref.numel(); ++k)
      if (std::isfinite(r[k])) sum_sq += static_cast<long double>(r[k]) * r[k], ++finite;
    const double expected_rms = static_cast<double>(std::sqrt(sum_sq / finite));
    auto near = [&](double rms) { return std::fabs(rms - expected_rms) <= 1e-12 * expected_rms; };  // (relative)
    CHECK(near(finite_rms(ref)));
    for (const bool tensors : {false, true}) {
      CAPTURE(tensors);
      auto cmp = [&](const torch::Tensor& got) {
        return tensors ? compare_output_tensors(got, ref, 1e-4, 1e-4) : compare_output(got, ref, 1e-4, 1e-4);
      };
      const Comparison same = cmp(ref.clone());
      CHECK(same.ok);
      CHECK(near(same.ref_rms));
      CHECK(std::isfinite(same.atol_eff));
      CHECK(cmp(ref * (1 + 1e-7)).ok);  // rounding-sized errors pass
      torch::Tensor off = ref.clone();
      off[100] = off[100].item<double>() * 1.5 + scale;  // one element wrong by its own size
      const Comparison wrong = cmp(off);
      CHECK_FALSE(wrong.ok);
      CHECK(wrong.first_bad == 100);
      CHECK_FALSE(cmp(torch::zeros_like(ref)).ok);  // nor may zeros pass
    }
  }
}

TEST_CASE("env compare: the one-pass check of a passing output agrees with the tensor-op oracle") {
  torch::manual_seed(3);
  int passed = 0, failed = 0;
  for (int trial = 0; trial < 440; ++trial) {
    const auto dtype = trial % 2 ? torch::kFloat : torch::kDouble;
    // Short outputs, then longer ones that end in a partial vector and cross the scan's 4096-element blocks.
    const int64_t n = trial < 400 ? 1 + trial % 97 : 4000 + 37 * (trial - 400);
    torch::Tensor ref = torch::randn({n}, dtype) * (trial % 7 == 0 ? 100.0 : 1.0);
    // Errors around the tolerance's edge, so both sides of it are seen.
    torch::Tensor got = ref + torch::randn({n}, dtype) * (trial % 5) * 3e-5;
    if (trial % 11 == 0) ref[trial % n] = NAN, got[trial % n] = NAN;              // matched NaN
    if (trial % 13 == 0) ref[(trial + 1) % n] = INFINITY, got[(trial + 1) % n] = INFINITY;
    if (trial % 19 == 0) ref[(trial + 2) % n] = -INFINITY, got[(trial + 2) % n] = -INFINITY;
    if (trial % 23 == 0) got[(trial * 7) % n] = -ref[(trial * 7) % n].item<double>() - 1;  // one wrong element, anywhere
    if (trial % 29 == 0) ref[(trial + 3) % n] = 0.0, got[(trial + 3) % n] = -0.0;           // signed zeros match
    if (trial % 31 == 0) ref[(trial + 4) % n] = NAN, got[(trial + 4) % n] = -NAN;           // a NaN of either sign
    if (trial % 17 == 0) got[trial % n] = NAN;                                   // a NaN where a number is due
    const double declared = trial % 3 == 0 ? 0.0 : 2.0;
    const Comparison fast = compare_output(got, ref, 1e-4, 1e-4, declared);
    const Comparison oracle = compare_output_tensors(got, ref, 1e-4, 1e-4, declared);
    CAPTURE(trial);
    REQUIRE(fast.ok == oracle.ok);
    CHECK(fast.mismatches == oracle.mismatches);
    CHECK(fast.numel == oracle.numel);
    CHECK(fast.max_index == oracle.max_index);
    CHECK(fast.first_bad == oracle.first_bad);
    CHECK(fast.ref_rms == doctest::Approx(oracle.ref_rms).epsilon(1e-12));
    CHECK(fast.atol_eff == doctest::Approx(oracle.atol_eff).epsilon(1e-12));
    if (std::isnan(oracle.max_abs_error))
      CHECK(std::isnan(fast.max_abs_error));
    else
      CHECK(fast.max_abs_error == oracle.max_abs_error);
    (fast.ok ? passed : failed)++;
  }
  CHECK(passed > 50);  // both branches exercised
  CHECK(failed > 50);
}
