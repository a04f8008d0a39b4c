#pragma once
// Training checkpoints: the policy in Hugging Face layout (model.safetensors + config.json +
// tokenizer files copied from the base checkpoint; plus the LoRA adapter when training LoRA),
// the optimizer state and the trainer state (step, RNG), in results/<run>/checkpoints/step-N.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "model/transformer.hpp"

namespace torch::optim {
class Optimizer;
}

namespace leap::rl {

/// What a checkpoint holds besides tensors.
struct TrainerState {
  int64_t step = 0;          ///< last completed step
  uint64_t seed = 0;         ///< the run's seed
  std::string run_id;
};

/// Writes a checkpoint to `dir` (created; written to "<dir>.tmp" then renamed, so a crash
/// leaves no half checkpoint). Every file is written whole through util::write_file_atomic
/// (checked writes, fsync, size check); trainer_state.json records the sizes of model.safetensors
/// and optimizer.pt. `base_dir` is the model folder whose config.json, generation_config.json and
/// tokenizer files are copied. Throws leap::Error "checkpoint DIR: PATH: ...: disk full (...)"
/// (or the other cause) on any failure, after removing the temporary folder; `dir` is then as
/// it was before the call.
void save_checkpoint(const std::filesystem::path& dir, const std::filesystem::path& base_dir,
                     model::Transformer& model, torch::optim::Optimizer& optimizer, const TrainerState& state);

/// Loads the weights (or the LoRA adapter, when the model has adapters), the optimizer state
/// and the trainer state saved by save_checkpoint. trainer_state.json is checked whole before
/// anything is loaded: "step" an integer >= 0, equal to the folder's `step-N` and to
/// `expected_step` when given (the store's checkpoint row), "run_id" equal to `expected_run_id`
/// when that is non-empty, "files" and "torch_cpu_rng" (bytes 0-255, the generator state's size)
/// present. Throws leap::Error naming the file (and key) that is missing, shorter or longer than
/// recorded, unreadable (a truncated optimizer.pt or trainer_state.json) or inconsistent, never
/// a bare LibTorch error.
TrainerState load_checkpoint(const std::filesystem::path& dir, model::Transformer& model,
                             torch::optim::Optimizer& optimizer, std::optional<int64_t> expected_step = std::nullopt,
                             const std::string& expected_run_id = "");

}  // namespace leap::rl
