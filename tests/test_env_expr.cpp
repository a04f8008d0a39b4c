// Tests of the launch-plan expression language (src/env/expr.hpp).
#include <doctest/doctest.h>

#include "env/expr.hpp"

using leap::env::Expr;
using leap::env::ExprEnv;
using leap::env::ExprError;

TEST_SUITE_BEGIN("env");

namespace {
int64_t ev(const char* text, const ExprEnv& env = {}) { return Expr::parse(text).eval(env); }

// Column of the ExprError that `fn` throws (0 if none).
template <class F>
int error_column(F fn, std::string* reason = nullptr) {
  try {
    fn();
  } catch (const ExprError& e) {
    if (reason) *reason = e.reason();
    return e.column();
  }
  return 0;
}
}  // namespace

TEST_CASE("env: expr arithmetic, precedence and unary minus") {
  CHECK(ev("1 + 2 * 3") == 7);
  CHECK(ev("(1 + 2) * 3") == 9);
  CHECK(ev("10 - 3 - 2") == 5);
  CHECK(ev("-3 + 10") == 7);
  CHECK(ev("--4") == 4);
  CHECK(ev("2 * -3") == -6);
  CHECK(ev("  42  ") == 42);
}

TEST_CASE("env: expr floor division and modulo of negatives") {
  CHECK(ev("7 / 2") == 3);
  CHECK(ev("-7 / 2") == -4);
  CHECK(ev("7 / -2") == -4);
  CHECK(ev("-7 / -2") == 3);
  CHECK(ev("-8 / 2") == -4);
  CHECK(ev("-7 % 2") == 1);
  CHECK(ev("7 % -2") == -1);
  CHECK(ev("-7 % -2") == -1);
  CHECK(ev("7 % 3") == 1);
  CHECK(ev("-6 % 3") == 0);
}

TEST_CASE("env: expr functions ceil_div, min, max, numel, dim") {
  ExprEnv env;
  env.symbols = {{"N", 1000}, {"B", 3}};
  env.shapes = {{"x", {3, 1000}}, {"s", {}}};
  CHECK(ev("ceil_div(N, 256)", env) == 4);
  CHECK(ev("ceil_div(1024, 256)", env) == 4);
  CHECK(ev("ceil_div(-7, 2)", env) == -3);
  CHECK(ev("ceil_div(0, 5)", env) == 0);
  CHECK(ev("min(N, 512)", env) == 512);
  CHECK(ev("max(B, 8) * 2", env) == 16);
  CHECK(ev("numel(x)", env) == 3000);
  CHECK(ev("numel(s)", env) == 1);
  CHECK(ev("dim(x, 0)", env) == 3);
  CHECK(ev("dim(x, 1)", env) == 1000);
  CHECK(ev("dim(x, -1)", env) == 1000);
  CHECK(ev("dim(x, B - 2) / 8", env) == 125);
  CHECK(ev("ceil_div(numel(x), min(256, N))", env) == 12);
}

TEST_CASE("env: expr names lists symbols and tensors") {
  auto n = Expr::parse("ceil_div(N, B) + numel(x) * dim(y, K)").names();
  CHECK(n.symbols == std::vector<std::string>{"N", "B", "K"});
  CHECK(n.tensors == std::vector<std::string>{"x", "y"});
  CHECK(Expr::parse(" N ").is_identifier());
  CHECK_FALSE(Expr::parse("N + 1").is_identifier());
}

TEST_CASE("env: expr syntax errors carry the column") {
  std::string why;
  CHECK(error_column([] { Expr::parse("B +"); }, &why) == 4);
  CHECK(why.find("ended") != std::string::npos);
  CHECK(error_column([] { Expr::parse("(B + 1"); }, &why) == 1);
  CHECK(why.find("never closed") != std::string::npos);
  CHECK(error_column([] { Expr::parse("B + 1)"); }, &why) == 6);
  CHECK(why.find("unmatched") != std::string::npos);
  CHECK(error_column([] { Expr::parse("N // 2"); }, &why) == 3);
  CHECK(why.find("'//'") != std::string::npos);
  CHECK(error_column([] { Expr::parse("2 ** 3"); }) == 3);
  CHECK(error_column([] { Expr::parse("N * 1.5"); }, &why) == 5);
  CHECK(why.find("integer") != std::string::npos);
  CHECK(error_column([] { Expr::parse("sqrt(N)"); }, &why) == 1);
  CHECK(why.find("unknown function 'sqrt'") != std::string::npos);
  CHECK(error_column([] { Expr::parse("min(1)"); }, &why) == 6);
  CHECK(error_column([] { Expr::parse("min(1, 2, 3)"); }, &why) == 9);
  CHECK(error_column([] { Expr::parse("N & 3"); }, &why) == 3);
  CHECK(why.find("'&'") != std::string::npos);
  CHECK(error_column([] { Expr::parse(""); }, &why) == 1);
  CHECK(error_column([] { Expr::parse("numel(3)"); }, &why) == 7);
  CHECK(why.find("tensor name") != std::string::npos);
  CHECK(error_column([] { Expr::parse("99999999999999999999"); }, &why) == 1);
}

TEST_CASE("env: expr evaluation errors") {
  ExprEnv env;
  env.symbols = {{"N", 8}, {"Z", 0}};
  env.shapes = {{"x", {2, 3}}};
  std::string why;
  CHECK(error_column([&] { ev("N / Z", env); }, &why) == 3);
  CHECK(why == "division by zero");
  CHECK(error_column([&] { ev("N % (N - 8)", env); }, &why) == 3);
  CHECK(error_column([&] { ev("ceil_div(N, Z)", env); }, &why) == 1);
  CHECK(why == "division by zero");
  CHECK(error_column([&] { ev("N + M", env); }, &why) == 5);
  CHECK(why.find("unknown size symbol 'M'") != std::string::npos);
  CHECK(error_column([&] { ev("dim(x, 2)", env); }, &why) == 1);
  CHECK(why.find("out of range") != std::string::npos);
  CHECK(error_column([&] { ev("numel(y)", env); }, &why) == 1);
  CHECK(error_column([&] { ev("9223372036854775807 + 1", env); }, &why) == 21);
  CHECK(why == "integer overflow");
}

TEST_SUITE_END();
