#include "tasks/program_render.hpp"

#include <cmath>
#include <sstream>
#include <vector>

#include "util/hash.hpp"

namespace leap::tasks {

namespace {

// Picks one of `n` spellings for line `line` of a prompt (0 when canonical).
size_t pick(Spelling s, uint64_t seed, size_t line, size_t n) {
  if (s == Spelling::canonical || n <= 1) return 0;
  return static_cast<size_t>(util::mix_seed(seed, line + 1) % n);
}

// `x + c` written with a minus for negative constants.
std::string plus_const(const std::string& lhs, double c) {
  return c < 0 ? lhs + " - " + constant_text(-c) : lhs + " + " + constant_text(c);
}

// The PyTorch expression of `o` applied to the variable `x` ("x", or "x2" when numbered).
std::string python_line(const Op& o, size_t variant, const std::string& x) {
  const std::string c = constant_text(o.c);
  switch (o.kind) {
    case OpKind::mul: {
      const std::string v[] = {x + " * " + c, c + " * " + x, "torch.mul(" + x + ", " + c + ")"};
      return v[variant % 3];
    }
    case OpKind::add: {
      const std::string v[] = {plus_const(x, o.c), c + " + " + x, "torch.add(" + x + ", " + c + ")"};
      return v[variant % 3];
    }
    case OpKind::relu: {
      const std::string v[] = {"torch.relu(" + x + ")", "F.relu(" + x + ")", x + ".clamp(min=0.0)"};
      return v[variant % 3];
    }
    case OpKind::leaky_relu: {
      const std::string v[] = {"F.leaky_relu(" + x + ", negative_slope=" + c + ")", "torch.nn.functional.leaky_relu(" + x + ", " + c + ")"};
      return v[variant % 2];
    }
    case OpKind::tanh: {
      const std::string v[] = {"torch.tanh(" + x + ")", x + ".tanh()"};
      return v[variant % 2];
    }
    case OpKind::sigmoid: {
      const std::string v[] = {"torch.sigmoid(" + x + ")", x + ".sigmoid()"};
      return v[variant % 2];
    }
    case OpKind::abs: {
      const std::string v[] = {"torch.abs(" + x + ")", x + ".abs()"};
      return v[variant % 2];
    }
    case OpKind::square: {
      const std::string v[] = {x + " * " + x, x + " ** 2", "torch.square(" + x + ")"};
      return v[variant % 3];
    }
    case OpKind::mul_w: {
      const std::string v[] = {x + " * w", "w * " + x};
      return v[variant % 2];
    }
    case OpKind::add_w: {
      const std::string v[] = {x + " + w", "w + " + x};
      return v[variant % 2];
    }
  }
  return x;
}

std::string python_return(Reduction r, size_t variant, const std::string& x = "x") {
  switch (r) {
    case Reduction::none: return x;
    case Reduction::sum: return variant % 2 ? x + ".sum(dim=1)" : "torch.sum(" + x + ", dim=1)";
    case Reduction::mean: return variant % 2 ? x + ".mean(dim=1)" : "torch.mean(" + x + ", dim=1)";
    case Reduction::max: return variant % 2 ? x + ".max(dim=1).values" : "torch.amax(" + x + ", dim=1)";
  }
  return x;
}

size_t return_variants(Reduction r) { return r == Reduction::none ? 1 : 2; }

size_t line_variants(OpKind k) {
  switch (k) {
    case OpKind::mul:
    case OpKind::add:
    case OpKind::relu:
    case OpKind::square: return 3;
    default: return 2;
  }
}

// The variable line `i` (0-based) of the forward reads, and the one it assigns.
std::string var_in(Naming n, size_t i) { return n == Naming::numbered && i > 0 ? "x" + std::to_string(i) : "x"; }
std::string var_out(Naming n, size_t i) { return n == Naming::numbered ? "x" + std::to_string(i + 1) : "x"; }

// The prompt's PyTorch line `i` (`x2 = torch.tanh(x1)`) and return expression, as the prompt and
// the answer's comments spell them.
std::string prompt_line(const Program& p, size_t i, Spelling spelling, uint64_t seed, Naming n) {
  return var_out(n, i) + " = " + python_line(p.ops[i], pick(spelling, seed, i, line_variants(p.ops[i].kind)), var_in(n, i));
}
std::string prompt_return(const Program& p, Spelling spelling, uint64_t seed, Naming n) {
  return "return " + python_return(p.reduce, pick(spelling, seed, p.ops.size(), return_variants(p.reduce)),
                                   var_in(n, p.ops.size()));
}

std::string cpp_float(double c) {
  std::string s = constant_text(c);
  return s + "f";
}

std::string cpp_line(const Op& o) {
  switch (o.kind) {
    case OpKind::mul: return "v = v * " + cpp_float(o.c) + ";";
    case OpKind::add: return o.c < 0 ? "v = v - " + cpp_float(-o.c) + ";" : "v = v + " + cpp_float(o.c) + ";";
    case OpKind::relu: return "v = v > 0.0f ? v : 0.0f;";
    case OpKind::leaky_relu: return "v = v > 0.0f ? v : v * " + cpp_float(o.c) + ";";
    case OpKind::tanh: return "v = std::tanh(v);";
    case OpKind::sigmoid: return "v = 1.0f / (1.0f + std::exp(-v));";
    case OpKind::abs: return "v = std::fabs(v);";
    case OpKind::square: return "v = v * v;";
    case OpKind::mul_w: return "v = v * w[c];";
    case OpKind::add_w: return "v = v + w[c];";
  }
  return "";
}

std::string reference_line(const Op& o) {
  const std::string c = constant_text(o.c);
  switch (o.kind) {
    case OpKind::mul: return "x * " + c;
    case OpKind::add: return "x + " + c;
    case OpKind::relu: return "torch.relu(x)";
    case OpKind::leaky_relu: return "torch.nn.functional.leaky_relu(x, " + c + ")";
    case OpKind::tanh: return "torch.tanh(x)";
    case OpKind::sigmoid: return "torch.sigmoid(x)";
    case OpKind::abs: return "torch.abs(x)";
    case OpKind::square: return "x * x";
    case OpKind::mul_w: return "x * w";
    case OpKind::add_w: return "x + w";
  }
  return "x";
}

std::string indent(const std::string& text, const std::string& pad) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find('\n', i);
    if (j == std::string::npos) j = text.size();
    std::string line = text.substr(i, j - i);
    out += (line.empty() ? "" : pad + line) + "\n";
    i = j + 1;
  }
  return out;
}

}  // namespace

std::string render_prompt(const Program& p, int64_t rows, int64_t cols, Spelling spelling, uint64_t spelling_seed,
                          Naming naming) {
  const bool w = p.uses_weight();
  std::ostringstream os;
  os << "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
     << "class Model(nn.Module):\n"
     << "    def __init__(self):\n        super().__init__()\n\n"
     << "    def forward(self, x: torch.Tensor" << (w ? ", w: torch.Tensor" : "") << ") -> torch.Tensor:\n";
  for (size_t i = 0; i < p.ops.size(); ++i) os << "        " << prompt_line(p, i, spelling, spelling_seed, naming) << "\n";
  os << "        " << prompt_return(p, spelling, spelling_seed, naming) << "\n\n\n"
     << "batch_size = " << rows << "\ndim = " << cols << "\n\n\n"
     << "def get_inputs():\n    return [torch.randn(batch_size, dim)" << (w ? ", torch.randn(dim)" : "") << "]\n\n\n"
     << "def get_init_inputs():\n    return []\n";
  return os.str();
}

std::string render_reference(const Program& p) {
  std::ostringstream os;
  os << "def reference(x: Tensor" << (p.uses_weight() ? ", w: Tensor" : "") << ") -> Tensor:\n";
  for (const auto& o : p.ops) os << "    x = " << reference_line(o) << "\n";
  os << "    return " << python_return(p.reduce, 0) << "\n";
  return os.str();
}

std::string render_cpu_solution(const Program& p, Spelling spelling, uint64_t spelling_seed, Naming naming) {
  const bool w = p.uses_weight();
  const bool red = p.reduce != Reduction::none;
  const bool numbered = naming == Naming::numbered;
  std::ostringstream os;
  os << "```cpp\n#include <cmath>\n#include <cstdint>\n\n"
     << "extern \"C\" void model_forward(const float* x, " << (w ? "const float* w, " : "")
     << "float* y, int64_t rows, int64_t cols) {\n"
     << "    for (int64_t r = 0; r < rows; ++r) {\n";
  // Numbered: the return comes first, so the accumulator follows the line that decides it.
  if (numbered) os << "        // " << prompt_return(p, spelling, spelling_seed, naming) << "\n";
  if (p.reduce == Reduction::max)
    os << "        float acc = -INFINITY;\n";
  else if (red)
    os << "        double acc = 0.0;\n";
  os << "        for (int64_t c = 0; c < cols; ++c) {\n"
     << "            float v = x[r * cols + c];\n";
  // Each C++ line follows a comment holding the prompt's PyTorch line it implements (the same
  // spelling as the prompt), so the answer reads as a line-by-line translation.
  for (size_t i = 0; i < p.ops.size(); ++i)
    os << "            // " << prompt_line(p, i, spelling, spelling_seed, naming) << "\n            " << cpp_line(p.ops[i])
       << "\n";
  if (!numbered) os << "            // " << prompt_return(p, spelling, spelling_seed, naming) << "\n";
  switch (p.reduce) {
    case Reduction::none: os << "            y[r * cols + c] = v;\n"; break;
    case Reduction::max: os << "            acc = v > acc ? v : acc;\n"; break;
    default: os << "            acc += v;\n"; break;
  }
  os << "        }\n";
  if (p.reduce == Reduction::sum) os << "        y[r] = (float)acc;\n";
  if (p.reduce == Reduction::mean) os << "        y[r] = (float)(acc / cols);\n";
  if (p.reduce == Reduction::max) os << "        y[r] = acc;\n";
  os << "    }\n}\n```\n\n"
     << "```yaml\nlaunches:\n  - kernel: model_forward\n    grid: [1]\n    block: [1]\n    shared_bytes: 0\n"
     << "    args: [x, " << (w ? "w, " : "") << "y, B, N]\n```\n";
  return os.str();
}

std::string render_task_yaml(const std::string& name, const std::string& family, uint64_t seed, const Program& p,
                             int64_t rows, int64_t cols, Spelling spelling, uint64_t spelling_seed, Naming naming) {
  const bool red = p.reduce != Reduction::none;
  const bool sum_like = p.reduce == Reduction::sum || p.reduce == Reduction::mean;
  std::ostringstream os;
  os << "name: " << name << "\n"
     << "level: 1\n"
     << "category: " << (red ? "reduction" : "elementwise") << "\n"
     << "source:\n"
     << "  generator: leap tasks generate\n"
     << "  family: " << family << "\n"
     << "  seed: \"" << seed << "\"\n"
     << "  program: \"" << program_key(p) << "\"\n"
     << "prompt: |\n"
     << indent(render_prompt(p, rows, cols, spelling, spelling_seed, naming), "  ")
     << "sizes: {B: " << rows << ", N: " << cols << "}\n"
     << "inputs:\n"
     << "  x: {dtype: float32, shape: [B, N], init: {normal: {mean: 0, std: 1}}}\n";
  if (p.uses_weight()) os << "  w: {dtype: float32, shape: [N], init: {normal: {mean: 0, std: 1}}}\n";
  os << "outputs:\n"
     << "  y: {dtype: float32, shape: " << (red ? "[B]" : "[B, N]") << "}\n"
     << "reference:\n"
     << "  torchscript: |\n"
     << indent(render_reference(p), "    ")
     << "tolerance: {atol: " << (sum_like ? "1.0e-3" : "1.0e-4") << ", rtol: 1.0e-4}\n";
  return os.str();
}

}  // namespace leap::tasks
