// metrics::compute_metrics on attempts whose right values are worked out by hand below.
#include <doctest/doctest.h>

#include <cmath>

#include "util/bench_metrics.hpp"
#include "report/metrics_table.hpp"

using leap::metrics::Attempt;
using leap::metrics::compute_metrics;
using leap::metrics::MetricsInput;
using leap::metrics::pass_at_k;

TEST_CASE("metrics: unbiased pass@k") {
  CHECK(pass_at_k(5, 2, 2) == doctest::Approx(0.7));  // 1 - C(3,2)/C(5,2) = 1 - 3/10
  CHECK(pass_at_k(2, 1, 1) == doctest::Approx(0.5));
  CHECK(pass_at_k(3, 0, 2) == doctest::Approx(0.0));
  CHECK(pass_at_k(4, 3, 2) == doctest::Approx(1.0));  // fewer than k failures: always a pass
  CHECK(std::isnan(pass_at_k(1, 1, 2)));
  CHECK_THROWS(pass_at_k(2, 3, 1));
}

TEST_CASE("metrics: Acc@k, fast_p, pass@k and the rest on a hand-worked benchmark") {
  // Four tasks, two samples, two turns. D has no result at all (a failure everywhere).
  //   A (level 1): s0 t1 correct 1.5x | s1 t1 wrong, t2 correct 0.8x
  //   B (level 1): s0 t1 compile_error, t2 compile_error | s1 t1 correct 3.0x (suspicious)
  //   C (level 2): s0 t1 inputs_modified, t2 correct 1.1x | s1 t1 format_error, t2 wrong
  MetricsInput in;
  in.tasks = {{"A", 1}, {"B", 1}, {"C", 2}, {"D", 2}};
  in.turns = 2;
  in.attempts = {
      {"A", 0, 1, "correct", 1.5, 10, false},        {"A", 1, 1, "wrong_output", std::nullopt, 10, false},
      {"A", 1, 2, "correct", 0.8, 20, false},        {"B", 0, 1, "compile_error", std::nullopt, 5, false},
      {"B", 0, 2, "compile_error", std::nullopt, 5, false}, {"B", 1, 1, "correct", 3.0, 10, true},
      {"C", 0, 1, "inputs_modified", std::nullopt, 10, false}, {"C", 0, 2, "correct", 1.1, 10, false},
      {"C", 1, 1, "format_error", std::nullopt, 4, false},  {"C", 1, 2, "wrong_output", std::nullopt, 6, false},
  };
  auto r = compute_metrics(in);
  const auto& m = r.overall;
  CHECK(r.turns == 2);
  CHECK(r.samples == 2);
  CHECK(m.tasks == 4);
  CHECK(m.attempts == 10);
  CHECK(m.compile_rate == doctest::Approx(0.7));  // 3 of 10 are format/compile errors
  REQUIRE(m.acc.size() == 2);
  CHECK(m.acc[0] == doctest::Approx(0.25));  // (1/2 + 1/2 + 0 + 0) / 4
  CHECK(m.acc[1] == doctest::Approx(0.5));   // (1 + 1/2 + 1/2 + 0) / 4
  CHECK(m.fast_p.at(0.0) == doctest::Approx(0.5));
  CHECK(m.fast_p.at(1.0) == doctest::Approx(0.375));  // 1.5, 3.0, 1.1 -> (1/2 + 1/2 + 1/2) / 4
  CHECK(m.fast_p.at(1.2) == doctest::Approx(0.25));   // 1.5, 3.0
  CHECK(m.fast_p.at(1.5) == doctest::Approx(0.125));  // strictly above: only 3.0
  CHECK(m.fast_p.at(2.0) == doctest::Approx(0.125));
  CHECK(m.pass_at_k.at(1) == doctest::Approx(0.5));   // (1 + 1/2 + 1/2 + 0) / 4
  CHECK(m.pass_at_k.at(2) == doctest::Approx(0.75));  // (1 + 1 + 1 + 0) / 4
  CHECK(m.geomean_speedup == doctest::Approx(std::pow(1.5 * 0.8 * 3.0 * 1.1, 0.25)));
  CHECK(m.turns_per_pass == doctest::Approx(1.5));        // first correct turns 1, 2, 1, 2
  CHECK(m.tokens_per_success == doctest::Approx(22.5));   // 90 tokens / 4 correct trajectories
  CHECK(m.hacks.at("inputs_modified") == 1);
  CHECK(m.hacks.at("suspicious_speedup") == 1);

  const auto& l1 = r.by_level.at("1");
  CHECK(l1.tasks == 2);
  CHECK(l1.acc[0] == doctest::Approx(0.5));
  CHECK(l1.acc[1] == doctest::Approx(0.75));
  CHECK(l1.fast_p.at(1.0) == doctest::Approx(0.5));
  const auto& l2 = r.by_level.at("2");
  CHECK(l2.acc[1] == doctest::Approx(0.25));  // C: 1/2, D: 0
  CHECK(l2.compile_rate == doctest::Approx(0.75));
  CHECK(l2.fast_p.at(1.0) == doctest::Approx(0.25));

  auto t = leap::report::metrics_table(r);
  CHECK(t.rows.size() == 3);  // level 1, level 2, all
  CHECK(t.rows.back()[0] == "all");
}

TEST_CASE("metrics: T from the attempts, tasks only seen in attempts, no correct answer") {
  MetricsInput in;
  in.attempts = {{"x", 0, 1, "wrong_output", std::nullopt, 7, false}, {"x", 0, 3, "timeout", std::nullopt, 3, false}};
  auto r = compute_metrics(in);
  CHECK(r.turns == 3);
  CHECK(r.overall.tasks == 1);
  CHECK(r.overall.acc == std::vector<double>{0.0, 0.0, 0.0});
  CHECK(std::isnan(r.overall.geomean_speedup));
  CHECK(std::isnan(r.overall.tokens_per_success));
  CHECK(r.by_level.count("-") == 1);
}
