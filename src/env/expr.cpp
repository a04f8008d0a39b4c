#include "env/expr.hpp"

#include <cctype>
#include <limits>

namespace leap::env {

struct Expr::Node {
  enum Kind { literal, symbol, neg, add, sub, mul, div, mod, ceil_div, min, max, numel, dim } kind;
  int64_t value = 0;
  std::string name;  // symbol, or tensor for numel/dim
  std::vector<std::shared_ptr<const Node>> kids;
  int column = 1;  // 1-based position of the node's token (the operator for binary nodes)
};

namespace {

using NodeP = std::shared_ptr<const Expr::Node>;
using Node = Expr::Node;

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// 'c' for a printable ASCII character, else its byte value (an answer may hold any bytes; the
// message must stay valid UTF-8).
std::string quoted_char(char c) {
  auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
  static const char* hex = "0123456789abcdef";
  return std::string("byte 0x") + hex[u >> 4] + hex[u & 15];
}

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  NodeP parse_all() {
    if (s_.size() > kMaxExprChars)
      fail_at("the expression is " + std::to_string(s_.size()) + " characters long; the limit is " +
                  std::to_string(kMaxExprChars) + " characters",
              0);
    skip_ws();
    if (pos_ >= s_.size()) fail("empty expression");
    NodeP n = parse_expr();
    skip_ws();
    if (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ')') fail("unmatched ')'");
      if (c == '(') fail("unexpected '(' (only ceil_div, min, max, numel and dim can be called)");
      fail("unexpected " + quoted_char(c) + " after a complete expression");
    }
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& why) { throw ExprError(why, static_cast<int>(pos_) + 1); }
  [[noreturn]] void fail_at(const std::string& why, size_t pos) {
    throw ExprError(why, static_cast<int>(pos) + 1);
  }

  // Counts one nesting level (a '(', a call or a unary sign) before the recursion into it.
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxExprDepth)
        p.fail("the expression nests deeper than " + std::to_string(kMaxExprDepth) +
               " levels (parentheses, function calls and unary signs)");
    }
    ~DepthGuard() { --p.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
  };

  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }

  static NodeP make(Node::Kind k, int col, std::vector<NodeP> kids = {}) {
    auto n = std::make_shared<Node>();
    n->kind = k;
    n->column = col;
    n->kids = std::move(kids);
    return n;
  }

  NodeP parse_expr() {
    NodeP left = parse_term();
    for (;;) {
      skip_ws();
      if (pos_ >= s_.size() || (s_[pos_] != '+' && s_[pos_] != '-')) return left;
      char op = s_[pos_];
      int col = static_cast<int>(pos_) + 1;
      ++pos_;
      NodeP right = parse_term();
      left = make(op == '+' ? Node::add : Node::sub, col, {left, right});
    }
  }

  NodeP parse_term() {
    NodeP left = parse_unary();
    for (;;) {
      skip_ws();
      if (pos_ >= s_.size()) return left;
      char op = s_[pos_];
      if (op != '*' && op != '/' && op != '%') return left;
      int col = static_cast<int>(pos_) + 1;
      if (op == '/' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '/')
        fail("'//' is not an operator: '/' already divides with floor semantics");
      if (op == '*' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '*')
        fail("'**' (power) is not supported");
      ++pos_;
      NodeP right = parse_unary();
      left = make(op == '*' ? Node::mul : op == '/' ? Node::div : Node::mod, col, {left, right});
    }
  }

  NodeP parse_unary() {
    skip_ws();
    if (pos_ < s_.size() && (s_[pos_] == '-' || s_[pos_] == '+')) {
      char op = s_[pos_];
      int col = static_cast<int>(pos_) + 1;
      DepthGuard guard(*this);
      ++pos_;
      NodeP operand = parse_unary();
      return op == '-' ? make(Node::neg, col, {operand}) : operand;
    }
    return parse_primary();
  }

  NodeP parse_primary() {
    skip_ws();
    if (pos_ >= s_.size()) fail("expected a number, a name or '(' but the expression ended");
    char c = s_[pos_];
    size_t start = pos_;
    int col = static_cast<int>(pos_) + 1;
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t v = 0;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        int d = s_[pos_] - '0';
        if (v > (std::numeric_limits<int64_t>::max() - d) / 10) fail_at("integer literal too large", start);
        v = v * 10 + d;
        ++pos_;
      }
      if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E'))
        fail_at("only integer literals are allowed (no floating point)", start);
      if (pos_ < s_.size() && is_ident_char(s_[pos_]))
        fail_at("a number cannot be followed by letters", start);
      auto n = std::make_shared<Node>();
      n->kind = Node::literal;
      n->value = v;
      n->column = col;
      return n;
    }
    if (is_ident_start(c)) {
      while (pos_ < s_.size() && is_ident_char(s_[pos_])) ++pos_;
      std::string name(s_.substr(start, pos_ - start));
      size_t after = pos_;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == '(') return parse_call(name, start);
      pos_ = after;
      auto n = std::make_shared<Node>();
      n->kind = Node::symbol;
      n->name = name;
      n->column = col;
      return n;
    }
    if (c == '(') {
      DepthGuard guard(*this);
      ++pos_;
      NodeP inner = parse_expr();
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ')')
        fail_at("'(' is never closed", start);
      ++pos_;
      return inner;
    }
    if (c == ')') fail("expected a number, a name or '(' but found ')'");
    fail("unexpected character " + quoted_char(c));
  }

  // pos_ is at '('.
  NodeP parse_call(const std::string& name, size_t start) {
    int col = static_cast<int>(start) + 1;
    Node::Kind kind;
    int arity;
    if (name == "ceil_div") kind = Node::ceil_div, arity = 2;
    else if (name == "min") kind = Node::min, arity = 2;
    else if (name == "max") kind = Node::max, arity = 2;
    else if (name == "numel") kind = Node::numel, arity = 1;
    else if (name == "dim") kind = Node::dim, arity = 2;
    else
      fail_at("unknown function '" + name + "' (functions: ceil_div, min, max, numel, dim)", start);
    DepthGuard guard(*this);
    ++pos_;  // '('
    auto n = std::make_shared<Node>();
    n->kind = kind;
    n->column = col;
    bool tensor_first = kind == Node::numel || kind == Node::dim;
    for (int i = 0; i < arity; ++i) {
      skip_ws();
      if (i > 0) {
        if (pos_ >= s_.size() || s_[pos_] != ',')
          fail(name + "() takes " + std::to_string(arity) + " arguments; expected ','");
        ++pos_;
        skip_ws();
      }
      if (i == 0 && tensor_first) {
        size_t b = pos_;
        while (pos_ < s_.size() && is_ident_char(s_[pos_])) ++pos_;
        if (b == pos_ || !is_ident_start(s_[b])) fail_at(name + "() needs a tensor name as its first argument", b);
        n->name = std::string(s_.substr(b, pos_ - b));
        continue;
      }
      n->kids.push_back(parse_expr());
    }
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ',')
      fail(name + "() takes " + std::to_string(arity) + " argument" + (arity == 1 ? "" : "s") +
           ", got more");
    if (pos_ >= s_.size() || s_[pos_] != ')') fail("expected ')' to close " + name + "(");
    ++pos_;
    return n;
  }

  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

int64_t eval_node(const Node& n, const ExprEnv& env) {
  auto fail = [&](const std::string& why) -> int64_t { throw ExprError(why, n.column); };
  auto shape_of = [&]() -> const std::vector<int64_t>& {
    auto it = env.shapes.find(n.name);
    if (it == env.shapes.end()) throw ExprError("unknown tensor '" + n.name + "'", n.column);
    return it->second;
  };
  int64_t r = 0;
  switch (n.kind) {
    case Node::literal:
      return n.value;
    case Node::symbol: {
      auto it = env.symbols.find(n.name);
      if (it == env.symbols.end()) return fail("unknown size symbol '" + n.name + "'");
      return it->second;
    }
    case Node::neg: {
      int64_t v = eval_node(*n.kids[0], env);
      if (v == std::numeric_limits<int64_t>::min()) return fail("integer overflow");
      return -v;
    }
    case Node::numel: {
      int64_t p = 1;
      for (int64_t d : shape_of())
        if (__builtin_mul_overflow(p, d, &p)) return fail("integer overflow");
      return p;
    }
    case Node::dim: {
      const auto& shape = shape_of();
      int64_t i = eval_node(*n.kids[0], env);
      int64_t rank = static_cast<int64_t>(shape.size());
      int64_t j = i < 0 ? i + rank : i;
      if (j < 0 || j >= rank)
        return fail("dim(" + n.name + ", " + std::to_string(i) + "): index out of range for a tensor of " +
                    std::to_string(rank) + " dimension" + (rank == 1 ? "" : "s"));
      return shape[static_cast<size_t>(j)];
    }
    default:
      break;
  }
  int64_t a = eval_node(*n.kids[0], env);
  int64_t b = eval_node(*n.kids[1], env);
  switch (n.kind) {
    case Node::add:
      if (__builtin_add_overflow(a, b, &r)) return fail("integer overflow");
      return r;
    case Node::sub:
      if (__builtin_sub_overflow(a, b, &r)) return fail("integer overflow");
      return r;
    case Node::mul:
      if (__builtin_mul_overflow(a, b, &r)) return fail("integer overflow");
      return r;
    case Node::div:
    case Node::mod:
    case Node::ceil_div:
      if (b == 0) return fail("division by zero");
      if (a == std::numeric_limits<int64_t>::min() && b == -1) return fail("integer overflow");
      if (n.kind == Node::div) return floor_div(a, b);
      if (n.kind == Node::mod) return floor_mod(a, b);
      if (a == std::numeric_limits<int64_t>::min()) return fail("integer overflow");
      return -floor_div(-a, b);
    case Node::min:
      return std::min(a, b);
    case Node::max:
      return std::max(a, b);
    default:
      return fail("internal: bad expression node");
  }
}

void collect(const Node& n, ExprNames& out) {
  if (n.kind == Node::symbol) out.symbols.push_back(n.name);
  if (n.kind == Node::numel || n.kind == Node::dim) out.tensors.push_back(n.name);
  for (const auto& k : n.kids) collect(*k, out);
}

}  // namespace

Expr Expr::parse(std::string_view text) {
  Expr e;
  e.root_ = Parser(text).parse_all();
  e.text_ = std::string(text);
  return e;
}

Expr Expr::literal(int64_t value) {
  auto n = std::make_shared<Node>();
  n->kind = Node::literal;
  n->value = value;
  Expr e;
  e.root_ = n;
  e.text_ = std::to_string(value);
  return e;
}

int64_t Expr::eval(const ExprEnv& env) const {
  if (!root_) throw ExprError("empty expression", 1);
  return eval_node(*root_, env);
}

ExprNames Expr::names() const {
  ExprNames out;
  if (root_) collect(*root_, out);
  return out;
}

bool Expr::is_identifier() const { return root_ && root_->kind == Node::symbol; }

}  // namespace leap::env
