#pragma once
// The launch-plan expression language: integer arithmetic over size symbols and tensor shapes.
//
//   expr    := term (('+' | '-') term)*
//   term    := unary (('*' | '/' | '%') unary)*
//   unary   := '-' unary | '+' unary | primary
//   primary := INTEGER | SYMBOL | '(' expr ')'
//            | ceil_div(expr, expr) | min(expr, expr) | max(expr, expr)
//            | numel(TENSOR) | dim(TENSOR, expr)
//
// All values are int64. `/` and `%` use floor semantics (as Python's // and %): -7 / 2 == -4,
// -7 % 2 == 1. ceil_div(a, b) == -((-a) / b). dim(t, i) accepts a negative i counted from the end.
//
// Limits (an expression comes from a model's answer, so parsing is bounded): the text is at most
// kMaxExprChars bytes, checked before parsing; parentheses, function calls and unary signs nest at
// most kMaxExprDepth levels, checked before each recursion. Past a limit Expr::parse throws an
// ExprError naming the limit (a `format_error` verdict for an answer). Every parse, evaluation,
// copy and destruction is then bounded by the text length.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.hpp"

namespace leap::env {

/// Longest expression text Expr::parse accepts, in bytes.
inline constexpr size_t kMaxExprChars = 1024;
/// Deepest nesting of parentheses, function calls and unary signs Expr::parse accepts.
inline constexpr int kMaxExprDepth = 64;

/// A syntax or evaluation error in one expression; `column` is 1-based in the expression text.
class ExprError : public Error {
 public:
  ExprError(const std::string& reason, int column)
      : Error("column " + std::to_string(column) + ": " + reason), reason_(reason), column_(column) {}
  /// What went wrong, without the column.
  const std::string& reason() const { return reason_; }
  /// 1-based column in the expression text.
  int column() const { return column_; }

 private:
  std::string reason_;
  int column_;
};

/// Values an expression is evaluated against.
struct ExprEnv {
  std::map<std::string, int64_t> symbols;              ///< size symbol -> value
  std::map<std::string, std::vector<int64_t>> shapes;  ///< tensor name -> shape (elements per dim)
};

/// Names an expression refers to, for validation before evaluation.
struct ExprNames {
  std::vector<std::string> symbols;  ///< bare identifiers (size symbols)
  std::vector<std::string> tensors;  ///< first arguments of numel / dim
};

/// A parsed expression (immutable, cheap to copy).
class Expr {
 public:
  struct Node;
  Expr() = default;

  /// Parses `text`; throws ExprError with the column of the first problem, or naming the limit
  /// (kMaxExprChars, kMaxExprDepth) that `text` exceeds.
  static Expr parse(std::string_view text);
  /// An expression that is the literal `value`.
  static Expr literal(int64_t value);

  /// Evaluates; throws ExprError on division by zero, overflow, an unknown symbol or tensor, or a
  /// dim index out of range.
  int64_t eval(const ExprEnv& env) const;
  /// Symbols and tensors referenced, in order of appearance (with repeats).
  ExprNames names() const;
  /// The source text (or the literal's digits).
  const std::string& text() const { return text_; }
  /// True if the expression is exactly one identifier (e.g. `N`).
  bool is_identifier() const;

 private:
  std::shared_ptr<const Node> root_;
  std::string text_;
};

}  // namespace leap::env
