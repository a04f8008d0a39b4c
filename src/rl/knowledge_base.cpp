// The knowledge base: snippets with tags, retrieval by tags; see rl/knowledge_base.hpp.
#include "rl/knowledge_base.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "env/verdict.hpp"
#include "model/utf8.hpp"
#include "util/sha256.hpp"
#include "util/error.hpp"

namespace leap::rl {

namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> string_list(const YAML::Node& n, const std::string& file, const std::string& key) {
  std::vector<std::string> out;
  if (!n) return out;
  if (!n.IsSequence()) throw ConfigError(file + ": key '" + key + "': expected a list of strings");
  for (const auto& x : n) {
    if (!x.IsScalar() || x.Scalar().empty()) throw ConfigError(file + ": key '" + key + "': expected a list of non-empty strings");
    out.push_back(lower(x.Scalar()));
  }
  return out;
}

/// Parses one snippet file's text.
KbSnippet parse_snippet(std::string text, const std::string& file, const std::string& id) {
  if (!model::utf8_valid(text)) throw ConfigError(file + ": the snippet is not UTF-8 text");
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // a byte-order mark
  // CRLF line ends (a file written on Windows) read as LF.
  std::string lf;
  for (size_t i = 0; i < text.size(); ++i)
    if (!(text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) lf += text[i];
  text.swap(lf);
  // Front matter: the file starts with a line "---" and the matter ends at the next "---" line.
  if (text.rfind("---\n", 0) != 0)
    throw ConfigError(file + ":1: a knowledge-base snippet starts with a '---' line, then its tags (title, backend, ...), then '---'");
  const size_t end = text.find("\n---\n", 3);
  if (end == std::string::npos) throw ConfigError(file + ": the front matter's closing '---' line is missing");
  YAML::Node m;
  try {
    m = YAML::Load(text.substr(4, end - 3));
  } catch (const YAML::Exception& e) {
    throw ConfigError(file + ":" + std::to_string(e.mark.line + 2) + ": YAML syntax error in the front matter: " + e.msg);
  }
  if (!m.IsMap()) throw ConfigError(file + ": the front matter must be a mapping (title: ..., backend: ...)");
  for (const auto& kv : m) {
    const std::string k = kv.first.as<std::string>();
    if (k != "title" && k != "backend" && k != "ops" && k != "verdicts" && k != "keywords")
      throw ConfigError(file + ": key '" + k + "': unknown key (valid: title, backend, ops, verdicts, keywords)");
  }
  KbSnippet s;
  s.id = id;
  if (!m["title"] || !m["title"].IsScalar() || m["title"].Scalar().empty())
    throw ConfigError(file + ": key 'title': missing (a one-line title)");
  s.title = m["title"].Scalar();
  if (!m["backend"] || !m["backend"].IsScalar()) throw ConfigError(file + ": key 'backend': missing (cpu, cuda or any)");
  s.backend = m["backend"].Scalar();
  if (s.backend != "cpu" && s.backend != "cuda" && s.backend != "any")
    throw ConfigError(file + ": key 'backend': '" + s.backend + "' is not cpu, cuda or any");
  s.ops = string_list(m["ops"], file, "ops");
  s.verdicts = string_list(m["verdicts"], file, "verdicts");
  s.keywords = string_list(m["keywords"], file, "keywords");
  if (!s.keywords.empty() && s.verdicts.empty())
    throw ConfigError(file + ": key 'keywords': keywords select feedback snippets, which need 'verdicts' too");
  for (const auto& v : s.verdicts) {
    try {
      env::verdict_from_string(v);
    } catch (const Error& e) {
      throw ConfigError(file + ": key 'verdicts': " + e.what());
    }
  }
  s.body = text.substr(end + 5);
  while (!s.body.empty() && std::isspace(static_cast<unsigned char>(s.body.back()))) s.body.pop_back();
  size_t a = 0;
  while (a < s.body.size() && std::isspace(static_cast<unsigned char>(s.body[a]))) ++a;
  s.body.erase(0, a);
  if (s.body.empty()) throw ConfigError(file + ": the snippet has no text after its front matter");
  return s;
}

int count_matches(const std::vector<std::string>& ops, const std::set<std::string>& terms) {
  int n = 0;
  for (const auto& o : ops) n += terms.count(o) ? 1 : 0;
  return n;
}

bool backend_fits(const KbSnippet& s, std::string_view backend) { return s.backend == "any" || s.backend == backend; }

std::vector<const KbSnippet*> ranked(std::vector<std::pair<int, const KbSnippet*>> scored) {
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<const KbSnippet*> out;
  for (const auto& [_, s] : scored) out.push_back(s);
  return out;
}

}  // namespace

KnowledgeBase KnowledgeBase::load(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw ConfigError("key 'kb.dir': no knowledge-base folder '" + dir + "'");
  KnowledgeBase kb;
  kb.dir_ = dir;
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file() && lower(it->path().extension().string()) == ".md" &&
        lower(it->path().filename().string()) != "readme.md")
      files.push_back(it->path());
  if (ec) throw ConfigError("key 'kb.dir': cannot list '" + dir + "': " + ec.message());
  std::sort(files.begin(), files.end());
  std::string all;  // what the hash covers
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in && !in.eof()) throw ConfigError(f.string() + ": cannot read the snippet");
    std::string id = fs::relative(f, dir).replace_extension().generic_string();
    if (id.find(',') != std::string::npos)
      throw ConfigError(f.string() + ": a snippet's path may not contain ',' (the store lists snippet ids with commas)");
    const std::string text = ss.str();
    kb.snippets_.push_back(parse_snippet(text, f.string(), id));
    all += id + '\0' + std::to_string(text.size()) + '\0' + text;
  }
  if (kb.snippets_.empty()) throw ConfigError("key 'kb.dir': '" + dir + "' holds no .md snippet");
  kb.hash_ = util::sha256_hex(all);
  return kb;
}

const KbSnippet* KnowledgeBase::find(const std::string& id) const {
  for (const auto& s : snippets_)
    if (s.id == id) return &s;
  return nullptr;
}

size_t KnowledgeBase::count_for_backend(std::string_view backend) const {
  size_t n = 0;
  for (const auto& s : snippets_) n += backend_fits(s, backend) ? 1 : 0;
  return n;
}

std::set<std::string> task_terms(const tasks::TaskSpec& task) {
  std::set<std::string> terms;
  const std::string text = task.name + " " + task.category + " " + task.prompt;
  std::string word;
  auto flush = [&] {
    if (word.empty()) return;
    const std::string w = lower(word);
    terms.insert(w);
    std::string part;
    for (char c : w + "_") {
      if (c == '_') {
        if (!part.empty() && part != w) terms.insert(part);
        part.clear();
      } else {
        part += c;
      }
    }
    word.clear();
  };
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') word += c;
    else flush();
  }
  flush();
  return terms;
}

std::vector<const KbSnippet*> KnowledgeBase::for_task(const tasks::TaskSpec& task, std::string_view backend) const {
  const auto terms = task_terms(task);
  std::vector<std::pair<int, const KbSnippet*>> scored;
  for (const auto& s : snippets_) {
    if (!s.verdicts.empty() || !backend_fits(s, backend)) continue;
    const int m = count_matches(s.ops, terms);
    if (!s.ops.empty() && m == 0) continue;
    scored.emplace_back(m, &s);
  }
  return ranked(std::move(scored));
}

std::vector<const KbSnippet*> KnowledgeBase::for_feedback(const tasks::TaskSpec& task, std::string_view backend,
                                                          std::string_view verdict, std::string_view feedback,
                                                          const std::set<std::string>& shown) const {
  const auto terms = task_terms(task);
  const std::string text = lower(std::string(feedback));
  std::vector<std::pair<int, const KbSnippet*>> scored;
  for (const auto& s : snippets_) {
    if (s.verdicts.empty() || !backend_fits(s, backend) || shown.count(s.id)) continue;
    if (std::find(s.verdicts.begin(), s.verdicts.end(), verdict) == s.verdicts.end()) continue;
    int k = 0;
    for (const auto& w : s.keywords) k += text.find(w) != std::string::npos ? 1 : 0;
    if (!s.keywords.empty() && k == 0) continue;
    scored.emplace_back(k + count_matches(s.ops, terms), &s);
  }
  return ranked(std::move(scored));
}

std::vector<const KbSnippet*> fit_budget(const std::vector<const KbSnippet*>& ranked, int64_t max_tokens,
                                         const std::function<int64_t(const std::string&)>& tokens) {
  std::vector<const KbSnippet*> out;
  int64_t used = 0;
  for (const KbSnippet* s : ranked) {
    const int64_t n = tokens(kb_text({s}));
    if (used + n > max_tokens) continue;
    used += n;
    out.push_back(s);
  }
  return out;
}

std::string kb_text(const std::vector<const KbSnippet*>& snippets) {
  if (snippets.empty()) return "";
  std::string s = "Notes from the knowledge base:";
  for (const KbSnippet* k : snippets) s += "\n### " + k->title + "\n" + k->body + "\n";
  return s;
}

}  // namespace leap::rl
