#pragma once
// One-edit variants ("mutants") of a shipped solution, for the SFT warm start's wrong twins
// (`train.sft.mutants`): trained beside the correct solution, they give a small model a mix of
// right and wrong answers whose difference is one decision RL can learn from the verdicts.
#include <string>
#include <vector>

namespace leap::rl {

/// One mutant: the whole solution text with one edit in its code block.
struct Mutant {
  std::string text;  ///< the solution (prose, code block, launch plan) with the edit applied
  std::string edit;  ///< what changed, e.g. "line 9: '>' -> '<'" (line within the code block, 1-based)
  /// The edit's kind: "arithmetic" (+ - * /), "compound" (+= -= *= /=), "comparison"
  /// (< > <= >=), "function" (a math function swapped) or "literal" (a float literal doubled);
  /// `train.sft.mutant_kinds` selects twins by it.
  std::string kind;
};

/// The five values of Mutant::kind, in the order of its doc comment.
inline constexpr const char* kMutantKinds[] = {"arithmetic", "compound", "comparison", "function", "literal"};

/// Every one-edit mutant of the first ```cpp or ```cuda block of `solution` (markdown answer
/// format of DESIGN.md section 3), in source order. An edit is one of: a binary arithmetic or
/// compound-assignment operator written with spaces around it (`+`/`-`, `*`/`/`, `+=`/`-=`,
/// `*=`/`/=`), a comparison (`<`/`>`, `<=`/`>=`), a math function (tanh/sinh, exp/expm1,
/// sqrt/cbrt, log/log1p, max/min, fmax/fmin, and their `f` forms), or a non-zero float literal
/// doubled. Loop headers (`for (...)`, `while (...)`), array subscripts, comments, preprocessor
/// lines and `extern` declarations are never edited, so a mutant neither loops forever nor
/// indexes out of bounds by construction. Returns an empty list when there is no code block.
/// Mutants are candidates: whether one is wrong is for the environment to say.
std::vector<Mutant> solution_mutants(const std::string& solution);

/// `solution` with every edit of the listed kinds (Mutant::kind values) applied at once, at every
/// site solution_mutants would edit one at a time: the answer of a teacher whose mistake is
/// systematic, the same wrong line wherever the same line occurs (`train.sft.teacher_error`,
/// docs/training.md). Within a line the edits are applied right to left, and one that would
/// overlap an edit already applied is skipped. Returns `solution` unchanged when it has no site
/// of these kinds or no code block. Like a mutant it is a candidate: it may compute the same thing.
std::string systematic_twin(const std::string& solution, const std::vector<std::string>& kinds);

}  // namespace leap::rl
