#include "tasks/program.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace leap::tasks {

namespace {

bool never_negative(OpKind k) {
  return k == OpKind::relu || k == OpKind::abs || k == OpKind::square || k == OpKind::sigmoid;
}

double round6(double c) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", c);
  double r = std::strtod(buf, nullptr);
  return r == 0 ? 0.0 : r;  // no -0
}

Op op(OpKind k, double c = 0) { return Op{k, has_constant(k) ? round6(c) : 0.0}; }

// One rewrite of the pair (a, b) at positions i, i+1. Returns true (and writes the replacement,
// zero to two ops) if a rule applies.
bool rewrite_pair(const Op& a, const Op& b, std::vector<Op>& out) {
  using K = OpKind;
  out.clear();
  if (a.kind == K::mul && b.kind == K::mul) return out.push_back(op(K::mul, a.c * b.c)), true;
  if (a.kind == K::add && b.kind == K::add) return out.push_back(op(K::add, a.c + b.c)), true;
  if ((a.kind == K::relu || a.kind == K::abs) && b.kind == a.kind) return out.push_back(a), true;
  if (never_negative(a.kind) && (b.kind == K::relu || b.kind == K::abs)) return out.push_back(a), true;
  if (a.kind == K::abs && b.kind == K::square) return out.push_back(b), true;
  if (a.kind == K::mul && a.c > 0 && (b.kind == K::relu || b.kind == K::leaky_relu))
    return out.push_back(b), out.push_back(a), true;
  if (a.kind == K::mul && b.kind == K::abs) return out.push_back(b), out.push_back(op(K::mul, std::fabs(a.c))), true;
  if (a.kind == K::mul && b.kind == K::square) return out.push_back(b), out.push_back(op(K::mul, a.c * a.c)), true;
  if (a.kind == K::add && b.kind == K::mul) return out.push_back(b), out.push_back(op(K::add, a.c * b.c)), true;
  if (a.kind == K::leaky_relu && b.kind == K::leaky_relu) return out.push_back(op(K::leaky_relu, a.c * b.c)), true;
  if ((a.kind == K::relu && b.kind == K::leaky_relu) || (a.kind == K::leaky_relu && b.kind == K::relu))
    return out.push_back(op(K::relu)), true;
  // Commuting pairs get one order: the weight op first.
  if (a.kind == K::add && b.kind == K::add_w) return out.push_back(b), out.push_back(a), true;
  if (a.kind == K::mul && b.kind == K::mul_w) return out.push_back(b), out.push_back(a), true;
  return false;
}

}  // namespace

bool Program::uses_weight() const {
  return std::any_of(ops.begin(), ops.end(), [](const Op& o) { return o.kind == OpKind::mul_w || o.kind == OpKind::add_w; });
}

bool has_constant(OpKind k) { return k == OpKind::mul || k == OpKind::add || k == OpKind::leaky_relu; }

const char* op_name(OpKind k) {
  switch (k) {
    case OpKind::mul: return "mul";
    case OpKind::add: return "add";
    case OpKind::relu: return "relu";
    case OpKind::leaky_relu: return "leaky_relu";
    case OpKind::tanh: return "tanh";
    case OpKind::sigmoid: return "sigmoid";
    case OpKind::abs: return "abs";
    case OpKind::square: return "square";
    case OpKind::mul_w: return "mul_w";
    case OpKind::add_w: return "add_w";
  }
  return "?";
}

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::none: return "none";
    case Reduction::sum: return "sum";
    case Reduction::mean: return "mean";
    case Reduction::max: return "max";
  }
  return "?";
}

Program canonicalize(const Program& p) {
  Program q;
  q.reduce = p.reduce;
  for (const auto& o : p.ops) q.ops.push_back(op(o.kind, o.c));
  std::vector<Op> rep;
  // Every rule either shortens the chain or moves a mul right / an add right past a weight op /
  // a mul left past an add (which never returns it to where it was); the cap is a safety net.
  for (int pass = 0; pass < 1000; ++pass) {
    bool changed = false;
    for (size_t i = 0; i < q.ops.size(); ++i) {
      const Op& o = q.ops[i];
      if ((o.kind == OpKind::mul && o.c == 1.0) || (o.kind == OpKind::add && o.c == 0.0)) {
        q.ops.erase(q.ops.begin() + static_cast<std::ptrdiff_t>(i));
        changed = true;
        break;
      }
      if (i + 1 < q.ops.size() && rewrite_pair(q.ops[i], q.ops[i + 1], rep)) {
        q.ops.erase(q.ops.begin() + static_cast<std::ptrdiff_t>(i), q.ops.begin() + static_cast<std::ptrdiff_t>(i + 2));
        q.ops.insert(q.ops.begin() + static_cast<std::ptrdiff_t>(i), rep.begin(), rep.end());
        changed = true;
        break;
      }
    }
    if (!changed) break;
  }
  return q;
}

std::string constant_text(double c) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", round6(c));
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string program_key(const Program& p) {
  const Program q = canonicalize(p);
  std::string k;
  for (size_t i = 0; i < q.ops.size(); ++i) {
    if (i) k += "|";
    k += op_name(q.ops[i].kind);
    if (has_constant(q.ops[i].kind)) k += ":" + constant_text(q.ops[i].c);
  }
  if (q.ops.empty()) k = "id";
  return k + ">" + reduction_name(q.reduce);
}

std::vector<double> evaluate(const Program& p, const std::vector<double>& x, const std::vector<double>& w,
                             int64_t rows, int64_t cols) {
  std::vector<double> y(static_cast<size_t>(p.reduce == Reduction::none ? rows * cols : rows));
  for (int64_t r = 0; r < rows; ++r) {
    double acc = p.reduce == Reduction::max ? -INFINITY : 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      double v = x[static_cast<size_t>(r * cols + c)];
      for (const auto& o : p.ops) {
        switch (o.kind) {
          case OpKind::mul: v *= o.c; break;
          case OpKind::add: v += o.c; break;
          case OpKind::relu: v = v > 0 ? v : 0.0; break;
          case OpKind::leaky_relu: v = v > 0 ? v : v * o.c; break;
          case OpKind::tanh: v = std::tanh(v); break;
          case OpKind::sigmoid: v = 1.0 / (1.0 + std::exp(-v)); break;
          case OpKind::abs: v = std::fabs(v); break;
          case OpKind::square: v = v * v; break;
          case OpKind::mul_w: v *= w[static_cast<size_t>(c)]; break;
          case OpKind::add_w: v += w[static_cast<size_t>(c)]; break;
        }
      }
      if (p.reduce == Reduction::none)
        y[static_cast<size_t>(r * cols + c)] = v;
      else if (p.reduce == Reduction::max)
        acc = std::max(acc, v);
      else
        acc += v;
    }
    if (p.reduce == Reduction::mean) acc /= static_cast<double>(cols);
    if (p.reduce != Reduction::none) y[static_cast<size_t>(r)] = acc;
  }
  return y;
}

}  // namespace leap::tasks
