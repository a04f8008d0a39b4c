#pragma once
// The program grammar of the generated task family `ewred` (docs/generator.md): a row-major
// float32 input x [B, N], optionally a per-column weight w [N], a chain of 1-3 elementwise
// operators (with constants), then optionally one reduction over dim 1. Plain data: the canonical
// form that defines "one program" for the train / eval split, and a double-precision interpreter
// the generator uses to reject degenerate programs (constant or non-finite outputs).
#include <cstdint>
#include <string>
#include <vector>

namespace leap::tasks {

/// One elementwise operator applied to the running value v (w: the weight input, per column).
enum class OpKind {
  mul,         ///< v * c
  add,         ///< v + c
  relu,        ///< max(v, 0)
  leaky_relu,  ///< v > 0 ? v : c * v (c: the negative slope, 0 < c < 1)
  tanh,        ///< tanh(v)
  sigmoid,     ///< 1 / (1 + exp(-v))
  abs,         ///< |v|
  square,      ///< v * v
  mul_w,       ///< v * w[col]
  add_w,       ///< v + w[col]
};

/// The reduction over dim 1 that ends a program, or none (the output keeps the shape [B, N]).
enum class Reduction { none, sum, mean, max };

/// An operator and its constant (0 for operators without one).
struct Op {
  OpKind kind = OpKind::relu;
  double c = 0;
  bool operator==(const Op&) const = default;
};

/// A program: ops applied in order to every element of x, then the reduction. Sizes are not
/// part of a program: the same computation at other sizes is the same program.
struct Program {
  std::vector<Op> ops;
  Reduction reduce = Reduction::none;
  bool operator==(const Program&) const = default;
  /// True if an op reads the weight input w.
  bool uses_weight() const;
};

/// True for operators that take a constant (mul, add, leaky_relu).
bool has_constant(OpKind k);

/// Short stable names ("mul", "relu", ...; "sum", "none", ...) used in program keys.
const char* op_name(OpKind k);
const char* reduction_name(Reduction r);

/// The canonical form of `p`: rewrite rules that preserve the computation, applied to a fixpoint
/// (docs/generator.md lists them): consecutive mul (add) merged, a mul by 1 (an add of 0)
/// dropped, relu / abs idempotent, relu and abs dropped after an op whose result is never
/// negative (relu, abs, square, sigmoid), abs before square dropped, a positive mul moved after
/// relu / leaky_relu, a mul moved after abs (|c| x) and square (c^2 x), an add moved after a mul
/// ((v + b) a = v a + a b), leaky_relu after leaky_relu merged (slope product), relu next to
/// leaky_relu reduced to relu. Constants are rounded to 6 significant digits, so a merged
/// 0.5 * 3 and a written 1.5 are the same constant.
Program canonicalize(const Program& p);

/// The text that names a program's canonical form, e.g. "tanh|mul:0.5|add_w>sum"; two programs
/// are the same program exactly when their keys are equal.
std::string program_key(const Program& p);

/// A constant as written in prompts, references and code: shortest decimal with a dot
/// ("0.5", "2.0", "-1.0", "0.01"), at most 6 significant digits.
std::string constant_text(double c);

/// Evaluates `p` in double precision on x [rows, cols] (row-major) and w [cols] (ignored when
/// unused). Returns [rows, cols] values without a reduction, [rows] with one.
std::vector<double> evaluate(const Program& p, const std::vector<double>& x, const std::vector<double>& w,
                             int64_t rows, int64_t cols);

}  // namespace leap::tasks
