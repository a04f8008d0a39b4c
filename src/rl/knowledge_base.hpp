#pragma once
// A platform knowledge base injected into prompts and feedback (config `kb.*`), after ATRL's
// knowledge base that "compensates for the base model's missing platform expertise" during RL
// and evaluation (ATRL; the retrieval rule here is our own: tags, no embeddings). A knowledge base
// is a folder of markdown snippets, each with a YAML front matter of tags (docs/prompts.md
// "Knowledge base"). No torch.
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tasks/task_spec.hpp"

namespace leap::rl {

/// One snippet: a file `<id>.md` of the knowledge base folder (subfolders included).
struct KbSnippet {
  std::string id;        ///< path relative to the folder, without `.md` (e.g. "cuda/reductions")
  std::string title;
  std::string backend;   ///< cpu | cuda | any
  std::vector<std::string> ops;       ///< operator words that make it relevant to a task (lowercase)
  std::vector<std::string> verdicts;  ///< non-empty: a feedback snippet for these verdicts
  std::vector<std::string> keywords;  ///< feedback text that makes it relevant (lowercase substrings)
  std::string body;      ///< markdown after the front matter
};

/// Where snippets go (config `kb.where`).
struct KbOptions {
  bool prompt = true;        ///< turn 1's task message
  bool feedback = true;      ///< the feedback message before each later turn
  int64_t max_tokens = 256;  ///< tokens of snippets added at one place at most
};

/// The loaded snippets of a folder.
class KnowledgeBase {
 public:
  /// Reads every `*.md` (any case) under `dir` but README.md files (sorted by id). UTF-8 (a BOM
  /// and CRLF line ends are accepted). Front matter between `---` lines, keys title (required),
  /// backend (required: cpu, cuda or any), ops, verdicts, keywords (lists of strings; keywords
  /// only with verdicts); a non-empty body. Throws ConfigError naming the file (and key) on a
  /// missing folder, an empty one, text that is not UTF-8, bad YAML, an unknown key or verdict,
  /// or a missing field.
  static KnowledgeBase load(const std::string& dir);

  const std::vector<KbSnippet>& snippets() const { return snippets_; }
  const std::string& dir() const { return dir_; }
  /// The snippet with this id, or nullptr.
  const KbSnippet* find(const std::string& id) const;
  /// SHA-256 (hex) of every snippet's id and whole file text, in id order: two runs whose
  /// knowledge bases differ in any byte have different hashes.
  const std::string& hash() const { return hash_; }
  /// Snippets that can reach a task on `backend` (its own or `any`).
  size_t count_for_backend(std::string_view backend) const;

  /// Prompt snippets (no verdicts) for a task on `backend`, most relevant first: a snippet with
  /// ops needs one of them among task_terms(task) and scores the number matched; one without ops
  /// is general (score 0). Ties by id.
  std::vector<const KbSnippet*> for_task(const tasks::TaskSpec& task, std::string_view backend) const;

  /// Feedback snippets for an attempt judged `verdict` with `feedback` text: the snippet lists the
  /// verdict, and if it has keywords one of them occurs in the feedback (case-insensitive); scored
  /// by keywords plus task ops matched, most relevant first, ties by id. Snippets in `shown` (ids
  /// already in the context) are left out.
  std::vector<const KbSnippet*> for_feedback(const tasks::TaskSpec& task, std::string_view backend,
                                             std::string_view verdict, std::string_view feedback,
                                             const std::set<std::string>& shown) const;

 private:
  std::string dir_;
  std::vector<KbSnippet> snippets_;
  std::string hash_;
};

/// The lowercase words a task is known by: its name, category and the identifiers of its
/// PyTorch reference (`torch.softmax` gives "torch", "softmax"; `layer_norm` also "layer" and
/// "norm"; `nn.LayerNorm` gives "layernorm").
std::set<std::string> task_terms(const tasks::TaskSpec& task);

/// The snippets, in order, that fit `max_tokens` together (a snippet that does not fit is
/// skipped and smaller later ones may still fit); `tokens` counts the tokens of one rendered
/// snippet (kb_text of it alone).
std::vector<const KbSnippet*> fit_budget(const std::vector<const KbSnippet*>& ranked, int64_t max_tokens,
                                         const std::function<int64_t(const std::string&)>& tokens);

/// The text appended to a message: "Notes from the knowledge base:" then "### <title>" and the
/// body of each snippet; "" for none. docs/prompts.md shows it.
std::string kb_text(const std::vector<const KbSnippet*>& snippets);

}  // namespace leap::rl
