// The verifier's cascade (DESIGN.md section 3; docs/env.md "Verifier"). Each step is a named
// function of env/evaluation.hpp in its own file.
#include "env/verifier.hpp"

#include "env/evaluation.hpp"
#include "env/reference_cache.hpp"
#include "util/hash.hpp"

namespace leap::env {

uint64_t input_seed(const RuntimeTask& task, uint64_t base, int seed_index) {
  uint64_t h = util::fnv1a64(task.spec().name + "/" + task.spec().hash, base * 0x9e3779b97f4a7c15ULL + 0xcbf29ce484222325ULL);
  return h ^ (static_cast<uint64_t>(seed_index + 1) * 0x9e3779b97f4a7c15ULL);
}

Verifier::Verifier(std::shared_ptr<Backend> backend, std::shared_ptr<WorkerPool> pool, VerifierOptions options)
    : backend_(std::move(backend)), pool_(std::move(pool)), options_(options) {
  if (options_.seeds < 1) options_.seeds = 1;
  if (options_.trials < 1) options_.trials = 1;
  if (options_.timing_sets < 1) options_.timing_sets = 1;
  reference_cache_ = std::make_unique<ReferenceCache>(options_.reference_cache_mb << 20);
}

Verifier::~Verifier() = default;

EvalResult Verifier::evaluate(const RuntimeTask& task, std::string_view answer) {
  Evaluation e(*this, task);
  // 1. Format: the code and launch-plan blocks, the plan parsed.
  if (auto bad = e.parse(answer)) return *bad;
  // 2. Compile (cached).
  if (auto bad = e.compile()) return *bad;
  // 3. Bind the plan to this task's sizes.
  if (auto bad = e.bind()) return *bad;
  // 4. Correctness on several seeds: the candidate in its worker while the reference runs here.
  if (auto bad = e.check_correctness()) return *bad;
  if (!options_.timing) return e.correct_untimed();
  // 5. Timing: candidate and reference in one device window, the timed runs' outputs checked,
  // the CPU-time bound, a suspicious speedup re-measured strictly.
  return e.time();
}

}  // namespace leap::env
