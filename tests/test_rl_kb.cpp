// The knowledge base (kb.*): loading snippets with their tags, retrieval by task, verdict and
// feedback, the token budget, and the shipped knowledge bases.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "rl/knowledge_base.hpp"
#include "support.hpp"
#include "tasks/task_spec.hpp"
#include "util/error.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

namespace fs = std::filesystem;
using namespace leap;

TEST_SUITE_BEGIN("rl");

namespace {

void snippet(const fs::path& dir, const std::string& name, const std::string& text) {
  fs::create_directories((dir / name).parent_path());
  std::ofstream((dir / name)) << text;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

tasks::TaskSpec task(const std::string& name, const std::string& prompt) {
  tasks::TaskSpec t;
  t.name = name;
  t.prompt = prompt;
  return t;
}

std::vector<std::string> ids(const std::vector<const rl::KbSnippet*>& v) {
  std::vector<std::string> out;
  for (const auto* s : v) out.push_back(s->id);
  return out;
}

std::string error_of(const fs::path& dir) {
  try {
    rl::KnowledgeBase::load(dir.string());
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("rl kb: snippets are retrieved by the task's operators, the verdict and the feedback text") {
  test::TempDir d;
  snippet(d.path, "general.md", "---\ntitle: General\nbackend: any\n---\nAlways true.\n");
  snippet(d.path, "cuda/only.md", "---\ntitle: Cuda only\nbackend: cuda\n---\nOnly on GPUs.\n");
  snippet(d.path, "red.md", "---\ntitle: Reductions\nbackend: cpu\nops: [sum, softmax, layer_norm]\n---\nAccumulate.\n");
  snippet(d.path, "mm.md", "---\ntitle: Matmul\nbackend: cpu\nops: [matmul]\n---\nTile.\n");
  snippet(d.path, "wrong.md", "---\ntitle: Wrong\nbackend: cpu\nverdicts: [wrong_output]\n---\nCheck indices.\n");
  snippet(d.path, "race.md",
          "---\ntitle: Race\nbackend: any\nverdicts: [wrong_output]\nkeywords: [max abs error]\n---\nSync.\n");
  snippet(d.path, "README.md", "not a snippet\n");
  const auto kb = rl::KnowledgeBase::load(d.path.string());
  CHECK(kb.snippets().size() == 6);  // README.md skipped

  // A softmax task: the reduction snippet (2 ops matched: softmax, and `sum` in the reference)
  // first, then the general one; neither the matmul nor a feedback snippet.
  const auto sm = task("row_softmax", "return torch.softmax(x, dim=1) + x.sum()");
  CHECK(ids(kb.for_task(sm, "cpu")) == std::vector<std::string>{"red", "general"});
  CHECK(ids(kb.for_task(sm, "cuda")) == std::vector<std::string>{"cuda/only", "general"});
  // `F.layer_norm` matches the op `layer_norm` whole.
  CHECK(ids(kb.for_task(task("ln", "F.layer_norm(x, (N,))"), "cpu")) == std::vector<std::string>{"red", "general"});
  CHECK(rl::task_terms(task("a_b", "nn.LayerNorm")).count("layernorm") == 1);
  CHECK(rl::task_terms(task("a_b", "nn.LayerNorm")).count("a") == 1);

  // Feedback: the verdict must be listed; keywords must occur in the feedback.
  CHECK(ids(kb.for_feedback(sm, "cpu", "wrong_output", "max abs error 0.5 at index 3", {})) ==
        std::vector<std::string>{"race", "wrong"});
  CHECK(ids(kb.for_feedback(sm, "cpu", "wrong_output", "outputs differ", {})) == std::vector<std::string>{"wrong"});
  CHECK(kb.for_feedback(sm, "cpu", "compile_error", "max abs error", {}).empty());
  CHECK(ids(kb.for_feedback(sm, "cpu", "wrong_output", "max abs error", {"race"})) == std::vector<std::string>{"wrong"});

  // The budget: a snippet that does not fit is skipped, a later smaller one may still fit.
  const auto all = kb.for_task(sm, "cpu");
  const auto chars = [](const std::string& s) { return static_cast<int64_t>(s.size()); };
  const int64_t red = chars(rl::kb_text({all[0]}));
  const int64_t gen = chars(rl::kb_text({all[1]}));
  CHECK(ids(rl::fit_budget(all, red + gen, chars)) == std::vector<std::string>{"red", "general"});
  CHECK(ids(rl::fit_budget(all, gen, chars)) == std::vector<std::string>{"general"});
  CHECK(rl::fit_budget(all, 1, chars).empty());
  CHECK(rl::kb_text({all[0]}) == "Notes from the knowledge base:\n### Reductions\nAccumulate.\n");
  CHECK(rl::kb_text({}).empty());
}

TEST_CASE("rl kb: a bad snippet is refused naming its file and key") {
  auto one = [](const std::string& text) {
    test::TempDir d;
    snippet(d.path, "bad.md", text);
    return error_of(d.path);
  };
  CHECK(contains(one("no front matter\n"), "bad.md:1: a knowledge-base snippet starts with a '---' line"));
  CHECK(contains(one("---\ntitle: t\nbackend: cpu\nbody\n"), "closing '---' line is missing"));
  CHECK(contains(one("---\ntitle: t\nbackend: tpu\n---\nx\n"), "key 'backend': 'tpu' is not cpu, cuda or any"));
  CHECK(contains(one("---\ntitle: t\nbackend: cpu\ntags: [a]\n---\nx\n"), "key 'tags': unknown key"));
  CHECK(contains(one("---\nbackend: cpu\n---\nx\n"), "key 'title': missing"));
  CHECK(contains(one("---\ntitle: t\nbackend: cpu\nverdicts: [wrong]\n---\nx\n"), "key 'verdicts'"));
  CHECK(contains(one("---\ntitle: t\nbackend: cpu\nops: sum\n---\nx\n"), "key 'ops': expected a list"));
  CHECK(contains(one("---\ntitle: t\nbackend: cpu\n---\n\n  \n"), "no text after its front matter"));
  CHECK(contains(one("---\ntitle: [t\nbackend: cpu\n---\nx\n"), "YAML syntax error"));
  test::TempDir empty;
  CHECK(contains(error_of(empty.path), "holds no .md snippet"));
  CHECK(contains(error_of(empty.path / "missing"), "no knowledge-base folder"));
}

TEST_CASE("rl kb: UTF-8 only (a BOM and CRLF read fine), any-case .md, keywords only with verdicts, a content hash") {
  test::TempDir d;
  snippet(d.path, "win.MD", "\xEF\xBB\xBF---\r\ntitle: Windows\r\nbackend: cpu\r\n---\r\nLine one.\r\nLine two.\r\n");
  auto kb = rl::KnowledgeBase::load(d.path.string());
  REQUIRE(kb.snippets().size() == 1);
  CHECK(kb.snippets()[0].id == "win");
  CHECK(kb.snippets()[0].body == "Line one.\nLine two.");
  REQUIRE(kb.find("win") != nullptr);
  CHECK(kb.find("nope") == nullptr);
  CHECK(kb.count_for_backend("cpu") == 1);
  CHECK(kb.count_for_backend("cuda") == 0);
  const std::string h1 = kb.hash();
  CHECK(h1.size() == 64);
  snippet(d.path, "win.MD", "---\ntitle: Windows\nbackend: cpu\n---\nLine one.\nLine two!\n");
  CHECK(rl::KnowledgeBase::load(d.path.string()).hash() != h1);

  auto one = [](const std::string& text) {
    test::TempDir t;
    snippet(t.path, "bad.md", text);
    return error_of(t.path);
  };
  CHECK(contains(one("---\ntitle: t\nbackend: cpu\n---\nbad \xff\xfe bytes\n"), "bad.md: the snippet is not UTF-8 text"));
  CHECK(contains(one("---\ntitle: t\nbackend: cpu\nkeywords: [race]\n---\nx\n"),
                 "key 'keywords': keywords select feedback snippets, which need 'verdicts' too"));
}

TEST_CASE("rl kb: the shipped knowledge bases load and cover both backends") {
  const auto kb = rl::KnowledgeBase::load(std::string(LEAP_SOURCE_DIR) + "/kb");
  int cpu = 0, cuda = 0;
  for (const auto& s : kb.snippets()) (s.backend == "cpu" ? cpu : cuda) += 1;
  CHECK(cpu >= 5);
  CHECK(cuda >= 8);
  // A softmax task on cuda gets the reduction notes first; a matmul the tiling notes.
  const auto sm = kb.for_task(task("softmax_rows", "torch.softmax(x, dim=-1)"), "cuda");
  REQUIRE(sm.size() >= 2);
  CHECK((sm[0]->id == "cuda/reductions" || sm[0]->id == "cuda/warp-shuffles"));
  CHECK(kb.for_task(task("mm", "torch.matmul(a, b)"), "cpu").front()->id == "cpu/cache-blocking");
  for (const char* v : {"compile_error", "wrong_output", "runtime_error", "timeout"})
    CHECK_MESSAGE(!kb.for_feedback(task("t", ""), "cpu", v, "", {}).empty(), v);
  for (const char* v : {"compile_error", "wrong_output", "launch_error", "runtime_error", "timeout"})
    CHECK_MESSAGE(!kb.for_feedback(task("t", ""), "cuda", v, "", {}).empty(), v);
}
