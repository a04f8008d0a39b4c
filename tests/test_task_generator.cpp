// `leap tasks generate` (src/tasks/generator.*, program.*, program_render.*): canonical programs,
// determinism under a seed, no program in both splits, every generated solution correct through
// the real cpu environment (`leap tasks validate`), prompts equal to their references under
// PyTorch itself (tools/check_generated_prompts.py), and bad arguments.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "leap_source_dir.h"  // LEAP_SOURCE_DIR
#include "support.hpp"
#include "tasks/generator.hpp"
#include "tasks/task_spec.hpp"
#include "util/error.hpp"

namespace fs = std::filesystem;
using namespace leap::tasks;
using leap::test::run_leap;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Program prog(std::vector<Op> ops, Reduction r = Reduction::none) { return Program{std::move(ops), r}; }

// Every regular file under `dir` (relative path -> bytes).
std::map<std::string, std::string> tree(const fs::path& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) m[fs::relative(e.path(), dir).string()] = leap::test::read_file(e.path().string());
  return m;
}

/// The forward body of a task.yaml's prompt: the lines after `def forward`, indent stripped,
/// blank lines skipped, through the return line.
std::vector<std::string> forward_body(const std::string& task_yaml) {
  std::vector<std::string> lines;
  std::istringstream py(task_yaml.substr(task_yaml.find("def forward")));
  std::string line;
  std::getline(py, line);
  while (std::getline(py, line)) {
    const size_t k = line.find_first_not_of(' ');
    if (k == std::string::npos) continue;
    lines.push_back(line.substr(k));
    if (line.compare(k, 7, "return ") == 0) break;
  }
  return lines;
}

/// The comments of a solution (its "// " lines, indent and "// " stripped) and the line after each.
std::pair<std::vector<std::string>, std::vector<std::string>> comments_and_next(const std::string& sol) {
  std::vector<std::string> comments, after, lines;
  std::istringstream cpp(sol);
  for (std::string line; std::getline(cpp, line);) lines.push_back(line);
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    const size_t k = lines[i].find_first_not_of(' ');
    if (k != std::string::npos && lines[i].compare(k, 3, "// ") == 0) {
      comments.push_back(lines[i].substr(k + 3));
      after.push_back(lines[i + 1]);
    }
  }
  return {comments, after};
}

std::string venv_python() {
  if (const char* p = std::getenv("LEAP_PYTHON"); p && *p) return p;
  return std::string(LEAP_SOURCE_DIR) + "/.venv/bin/python";
}

}  // namespace

TEST_SUITE_BEGIN("tasks");

TEST_CASE("generator: two spellings of one computation have one canonical key") {
  using K = OpKind;
  // Merged constants: 2 * 1.5 is 3.
  CHECK(program_key(prog({{K::mul, 2.0}, {K::mul, 1.5}})) == program_key(prog({{K::mul, 3.0}})));
  CHECK(program_key(prog({{K::mul, 3.0}})) == "mul:3.0>none");
  // (x + 1) * 2 == x * 2 + 2.
  CHECK(program_key(prog({{K::add, 1.0}, {K::mul, 2.0}}, Reduction::sum)) ==
        program_key(prog({{K::mul, 2.0}, {K::add, 2.0}}, Reduction::sum)));
  // Idempotence and never-negative inputs.
  CHECK(program_key(prog({{K::relu}, {K::relu}})) == program_key(prog({{K::relu}})));
  CHECK(program_key(prog({{K::square}, {K::abs}})) == program_key(prog({{K::square}})));
  CHECK(program_key(prog({{K::abs}, {K::square}})) == program_key(prog({{K::square}})));
  CHECK(program_key(prog({{K::mul, -2.0}, {K::abs}})) == program_key(prog({{K::abs}, {K::mul, 2.0}})));
  CHECK(program_key(prog({{K::mul, 0.5}, {K::relu}})) == program_key(prog({{K::relu}, {K::mul, 0.5}})));
  CHECK(program_key(prog({{K::add, 2.0}, {K::add, -2.0}, {K::tanh}})) == program_key(prog({{K::tanh}})));
  // Different computations stay different: order matters where it should.
  CHECK(program_key(prog({{K::tanh}, {K::mul, 2.0}})) != program_key(prog({{K::mul, 2.0}, {K::tanh}})));
  CHECK(program_key(prog({{K::mul, -2.0}, {K::relu}})) != program_key(prog({{K::relu}, {K::mul, -2.0}})));
  CHECK(program_key(prog({{K::tanh}}, Reduction::sum)) != program_key(prog({{K::tanh}}, Reduction::mean)));
  CHECK(constant_text(2.0) == "2.0");
  CHECK(constant_text(-0.5) == "-0.5");
  CHECK(constant_text(0.01) == "0.01");
}

TEST_CASE("generator: canonicalization preserves the computation (random chains, double precision)") {
  using K = OpKind;
  const K kinds[] = {K::mul, K::add, K::relu, K::leaky_relu, K::tanh, K::sigmoid, K::abs, K::square, K::mul_w, K::add_w};
  const double consts[] = {0.5, 2.0, -1.0, 1.5, -0.5, 0.25, 0.1};
  uint64_t s = 12345;
  auto next = [&s]() { return (s = s * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; };
  const int64_t rows = 3, cols = 17;
  std::vector<double> x(rows * cols), w(cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7 * static_cast<double>(i) + 0.3) * 2.5;
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(1.3 * static_cast<double>(i)) * 1.5;
  int rewritten = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Program p;
    const size_t n = 1 + next() % 5;
    for (size_t i = 0; i < n; ++i) {
      Op o{kinds[next() % 10], 0};
      if (o.kind == K::leaky_relu) o.c = (next() % 2) ? 0.1 : 0.2;
      else if (has_constant(o.kind)) o.c = consts[next() % 7];
      p.ops.push_back(o);
    }
    p.reduce = static_cast<Reduction>(next() % 4);
    const Program q = canonicalize(p);
    rewritten += !(q == p);
    CHECK(canonicalize(q) == q);  // a fixpoint
    const auto a = evaluate(p, x, w, rows, cols), b = evaluate(q, x, w, rows, cols);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      CAPTURE(program_key(p));
      CHECK(std::fabs(a[i] - b[i]) <= 1e-9 * std::max(1.0, std::fabs(a[i])));
    }
  }
  CHECK(rewritten > 500);  // the rules were exercised, not only the identity
}

TEST_CASE("generator: a seed gives byte-identical folders, the split shares no program") {
  leap::test::TempDir tmp;
  const fs::path a = tmp.path / "a", b = tmp.path / "b", c = tmp.path / "c";
  auto ra = run_leap("tasks generate ewred --count 60 --seed 7 --out " + a.string());
  CAPTURE(ra.err);
  REQUIRE(ra.rc == 0);
  CHECK(contains(ra.out, "60 tasks (48 train, 12 eval)"));
  REQUIRE(run_leap("tasks generate ewred --count 60 --seed 7 --out " + b.string()).rc == 0);
  REQUIRE(run_leap("tasks generate ewred --count 60 --seed 8 --out " + c.string()).rc == 0);
  const auto ta = tree(a), tb = tree(b), tc = tree(c);
  CHECK(ta.size() == 1 + 60 * 2);  // set.yaml, task.yaml and one cpu solution per task
  CHECK(ta == tb);
  CHECK(ta != tc);
  // The written folders load as an ordinary task set, and every task names its program.
  TaskSet set = load_task_set(a.string());
  CHECK(set.tasks.size() == 60);
  CHECK(set.train.size() == 48);
  CHECK(set.eval.size() == 12);
  std::set<std::string> train_keys, eval_keys, all;
  for (const auto& t : set.tasks) {
    const std::string key = t.source.at("program");
    CHECK(all.insert(key).second);  // each program once
    (set.split_of(t.name) == "eval" ? eval_keys : train_keys).insert(key);
  }
  for (const auto& k : eval_keys) CHECK_MESSAGE(!train_keys.count(k), k);
  // Across seeds and counts a program keeps its split, so sets drawn separately never leak.
  std::map<std::string, std::string> split_by_key;
  for (uint64_t seed : {1, 2, 3}) {
    GeneratorOptions o;
    o.count = 400;
    o.seed = seed;
    for (const auto& t : generate_tasks(o).tasks) {
      CHECK(t.key == program_key(t.program));
      CHECK(canonicalize(t.program) == t.program);
      auto [it, fresh] = split_by_key.emplace(t.key, t.split);
      if (!fresh) CHECK_MESSAGE(it->second == t.split, t.key);
    }
  }
  CHECK(split_by_key.size() > 600);  // the seeds drew mostly different programs
}

TEST_CASE("generator: every generated solution is correct in the cpu environment, prompts equal references") {
  for (const Naming naming : {Naming::reuse, Naming::numbered}) {
  CAPTURE(static_cast<int>(naming));
  leap::test::TempDir tmp;
  const fs::path out = tmp.path / "set";
  GeneratorOptions o;
  o.count = 24;
  o.seed = 3;
  o.naming = naming;
  GeneratedSet gs = generate_tasks(o);
  // The sample covers every operator and every reduction of the grammar.
  std::set<OpKind> ops;
  std::set<Reduction> reds;
  for (const auto& t : gs.tasks) {
    for (const auto& op : t.program.ops) ops.insert(op.kind);
    reds.insert(t.program.reduce);
  }
  CHECK(ops.size() == 10);
  CHECK(reds.size() == 4);
  write_generated_set(gs, out);
  auto r = run_leap("tasks validate " + out.string() + " --set env.cache_dir=" + (tmp.path / "cache").string() +
                    " --set 'env.cpu.flags=-O1 -fPIC -shared' --set env.seeds=3");
  CAPTURE(r.out);
  CAPTURE(r.err);
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "24 tasks: 0 with problems, 0 weak; 24 cpu solutions correct"));
  // The prompt's PyTorch module (any spelling) against the TorchScript reference, in PyTorch.
  const std::string cmd = venv_python() + " " + LEAP_SOURCE_DIR + "/tools/check_generated_prompts.py " + out.string() +
                          " > " + (tmp.path / "py.txt").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string py = leap::test::read_file((tmp.path / "py.txt").string());
  CAPTURE(py);
  CHECK(rc == 0);
  CHECK(contains(py, "24 tasks, 0 disagree"));
  }
}

TEST_CASE("generator: bad arguments are usage errors that write nothing") {
  leap::test::TempDir tmp;
  const fs::path out = tmp.path / "out";
  auto zero = run_leap("tasks generate ewred --count 0 --out " + out.string());
  CHECK(zero.rc == 2);
  CHECK(contains(zero.err, "--count 0: expected 1 to 100000 tasks"));
  auto fam = run_leap("tasks generate nosuch --count 5 --out " + out.string());
  CHECK(fam.rc == 2);
  CHECK(contains(fam.err, "unknown family 'nosuch' (known: ewred)"));
  auto frac = run_leap("tasks generate ewred --count 5 --eval-fraction 1.5 --out " + out.string());
  CHECK(frac.rc == 2);
  CHECK(contains(frac.err, "--eval-fraction 1.5: expected a share in [0, 1)"));
  CHECK_FALSE(fs::exists(out));
  // An existing non-empty folder is left as it was.
  fs::create_directories(out);
  std::string f = (out / "notes.txt").string();
  { FILE* fp = std::fopen(f.c_str(), "w"); std::fputs("mine", fp); std::fclose(fp); }
  auto busy = run_leap("tasks generate ewred --count 5 --out " + out.string());
  CHECK(busy.rc == 2);
  CHECK(contains(busy.err, "exists and is not empty"));
  CHECK(tree(out) == std::map<std::string, std::string>{{"notes.txt", "mine"}});
  // No temporary folder is left beside it.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(tmp.path)) entries += e.path().filename().string()[0] == '.';
  CHECK(entries == 0);
  // An empty existing folder is fine.
  const fs::path empty = tmp.path / "empty";
  fs::create_directories(empty);
  CHECK(run_leap("tasks generate ewred --count 5 --out " + empty.string() + "/").rc == 0);  // a trailing slash too
  CHECK(fs::exists(empty / "set.yaml"));
  CHECK(load_task_set(empty.string()).tasks.size() == 5);
}

TEST_CASE("generator: each C++ line of a solution follows a comment holding the prompt's PyTorch line") {
  for (const Spelling sp : {Spelling::varied, Spelling::canonical}) {
    GeneratorOptions o;
    o.count = 40;
    o.seed = 11;
    o.spelling = sp;
    for (const auto& t : generate_tasks(o).tasks) {
      std::string yaml, sol;
      for (const auto& [path, text] : t.files) (path == "task.yaml" ? yaml : sol) = text;
      // The prompt's forward body: its "x = ..." lines and the return line, in order.
      const std::vector<std::string> want = forward_body(yaml);
      REQUIRE(want.size() == t.program.ops.size() + 1);
      for (size_t i = 0; i + 1 < want.size(); ++i) CHECK(want[i].rfind("x = ", 0) == 0);
      CHECK(want.back().rfind("return ", 0) == 0);
      const auto [got, after] = comments_and_next(sol);
      CAPTURE(sol);
      CHECK(got == want);
      REQUIRE(after.size() == want.size());
      // Each operator comment is followed by its operator's C++ line (a `v = ...;` statement).
      for (size_t i = 0; i + 1 < after.size(); ++i) CHECK(contains(after[i], "v = "));
      const bool reduce = t.program.reduce != Reduction::none;
      CHECK(contains(after.back(), reduce ? "acc" : "y[r * cols + c] = v;"));
    }
  }
}

TEST_CASE("generator: numbered names: line i of the prompt assigns x<i>, the answer writes the return comment first") {
  for (const Spelling sp : {Spelling::varied, Spelling::canonical}) {
    GeneratorOptions o;
    o.count = 40;
    o.seed = 11;
    o.spelling = sp;
    GeneratorOptions r = o;
    o.naming = Naming::numbered;
    const auto numbered = generate_tasks(o).tasks, reused = generate_tasks(r).tasks;
    REQUIRE(numbered.size() == reused.size());
    for (size_t n = 0; n < numbered.size(); ++n) {
      const auto& t = numbered[n];
      CHECK(t.key == reused[n].key);  // the naming changes texts, not the draw
      std::string yaml, sol;
      for (const auto& [path, text] : t.files) (path == "task.yaml" ? yaml : sol) = text;
      // The forward body, and the same body written with x reused: equal once x<i> reads x.
      std::string ryaml;
      for (const auto& [path, text] : reused[n].files)
        if (path == "task.yaml") ryaml = text;
      const auto got = forward_body(yaml), want = forward_body(ryaml);
      CAPTURE(yaml);
      REQUIRE(got.size() == t.program.ops.size() + 1);
      REQUIRE(want.size() == got.size());
      for (size_t i = 0; i < got.size(); ++i) {
        std::string g = got[i];
        // x<k> -> x for k = 1..3 (the names x1, x2, x3 appear nowhere else in a line).
        for (const char* name : {"x1", "x2", "x3"})
          for (size_t at; (at = g.find(name)) != std::string::npos;) g.replace(at, 2, "x");
        CHECK(g == want[i]);
        if (i + 1 < got.size()) {
          CHECK(got[i].rfind("x" + std::to_string(i + 1) + " = ", 0) == 0);  // line i assigns x<i+1>
          if (i > 0) CHECK(contains(got[i], "x" + std::to_string(i)));      // and reads x<i>
        } else if (i > 0) {
          CHECK(contains(got[i], "x" + std::to_string(i)));  // the return reads the last name
        }
      }
      // The answer's comments: the return line first, then each operator line in order; the
      // first is followed by the accumulator (or, without a reduction, the column loop), each
      // other by its operator's C++ line.
      const auto [comments, after] = comments_and_next(sol);
      CAPTURE(sol);
      REQUIRE(comments.size() == got.size());
      CHECK(comments.front() == got.back());
      for (size_t i = 1; i < comments.size(); ++i) {
        CHECK(comments[i] == got[i - 1]);
        CHECK(contains(after[i], "v = "));
      }
      const Reduction red = t.program.reduce;
      CHECK(contains(after.front(), red == Reduction::max  ? "float acc = -INFINITY;"
                                    : red == Reduction::none ? "for (int64_t c = 0;"
                                                             : "double acc = 0.0;"));
    }
  }
  // The command line: --names numbered is written into set.yaml's description; other values are
  // usage errors that write nothing.
  leap::test::TempDir tmp;
  auto ok = run_leap("tasks generate ewred --count 5 --names numbered --out " + (tmp.path / "n").string());
  REQUIRE(ok.rc == 0);
  CHECK(contains(leap::test::read_file((tmp.path / "n" / "set.yaml").string()), "--names numbered"));
  CHECK(contains(leap::test::read_file((tmp.path / "n" / "ewred_0000" / "task.yaml").string()), "x1 = "));
  auto bad = run_leap("tasks generate ewred --count 5 --names letters --out " + (tmp.path / "b").string());
  CHECK(bad.rc != 0);
  CHECK(contains(bad.err, "--names"));
  CHECK(!fs::exists(tmp.path / "b"));
}

TEST_SUITE_END();
