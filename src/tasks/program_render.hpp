#pragma once
// Texts of one generated `ewred` task (docs/generator.md): the PyTorch module the model is shown,
// the TorchScript reference, the cpu model answer, and the task.yaml that holds them.
#include <cstdint>
#include <string>

#include "tasks/program.hpp"

namespace leap::tasks {

/// How the prompt spells each operator: `canonical` always the first spelling (torch.relu(x),
/// x * c, torch.sum(x, dim=1)), `varied` one of 2-3 equivalent spellings per line (F.relu(x),
/// x.clamp(min=0.0), c * x, x.sum(dim=1), ...) drawn from `spelling_seed`.
enum class Spelling { canonical, varied };

/// How the prompt's forward names its values: `reuse` assigns x on every line (`x = torch.tanh(x)`,
/// `return torch.sum(x, dim=1)`); `numbered` gives line i its own name (`x1 = torch.tanh(x)`,
/// `x2 = x1 * 2.0`, `return torch.sum(x2, dim=1)`), so each line of the prompt can be found by
/// its name, and the answer writes the return comment (and the accumulator it decides) first.
enum class Naming { reuse, numbered };

/// The PyTorch prompt: a KernelBench-style `Model` whose forward applies `p` to x [B, N] (and
/// w [N] when used), with get_inputs / get_init_inputs at sizes `rows` x `cols`.
std::string render_prompt(const Program& p, int64_t rows, int64_t cols, Spelling spelling, uint64_t spelling_seed,
                          Naming naming = Naming::reuse);

/// The TorchScript source `def reference(x: Tensor[, w: Tensor]) -> Tensor: ...` computing `p`.
std::string render_reference(const Program& p);

/// A correct cpu answer (one ```cpp block with `extern "C" void model_forward(...)` and one
/// ```yaml launch plan, DESIGN.md section 3): one loop over rows and columns, one C++ line per
/// operator in program order, a double accumulator for sum and mean. Each operator's line is
/// preceded by a comment `// x = <the prompt's PyTorch line>` and the reduction (or store) by
/// `// return <the prompt's return expression>`, in the spelling render_prompt draws for the same
/// `spelling` and `spelling_seed`, so the answer is a line-by-line translation of the prompt.
/// With Naming::numbered the comments carry the numbered names and the return comment opens the
/// row loop, ahead of the accumulator (the store and accumulate lines then have no comment).
std::string render_cpu_solution(const Program& p, Spelling spelling, uint64_t spelling_seed,
                                Naming naming = Naming::reuse);

/// Everything of task.yaml: name, level 1, category (elementwise or reduction), `source`
/// provenance (generator, family, seed, canonical program key), prompt, sizes {B, N}, inputs,
/// output y, the reference and the tolerance (atol 1e-4 / rtol 1e-4 elementwise and max,
/// 1e-3 / 1e-4 for sum and mean).
std::string render_task_yaml(const std::string& name, const std::string& family, uint64_t seed, const Program& p,
                             int64_t rows, int64_t cols, Spelling spelling, uint64_t spelling_seed,
                             Naming naming = Naming::reuse);

}  // namespace leap::tasks
