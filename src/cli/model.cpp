// `leap model`: inspect, tokenize with, sample from and create Hugging Face checkpoints.
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"

namespace leap::cli {

Handler add_model(CLI::App& app, const GlobalOptions& g) {
  auto* cmd = app.add_subcommand("model", "Inspect, tokenize with, sample from, or create a model checkpoint");
  cmd->require_subcommand(1);
  struct Opts {
    std::string path, text, prompt, preset = "tiny", out;
    bool chat = false;
    int64_t max_new_tokens = 128, seed = 0;
    double temperature = 0.0;
  };
  auto o = std::make_shared<Opts>();
  auto* inspect = cmd->add_subcommand("inspect", "Architecture, parameter count, dtype and memory estimate");
  inspect->add_option("path", o->path, "Hugging Face checkpoint folder")->required();
  auto* tokenize = cmd->add_subcommand("tokenize", "Print the token ids and pieces of TEXT");
  tokenize->add_option("path", o->path, "checkpoint folder holding tokenizer.json")->required();
  tokenize->add_option("text", o->text, "text to tokenize")->required();
  auto* generate = cmd->add_subcommand("generate", "Sample a completion");
  generate->add_option("path", o->path, "Hugging Face checkpoint folder")->required();
  generate->add_option("--prompt", o->prompt, "prompt text")->required();
  generate->add_flag("--chat", o->chat, "wrap the prompt in the model's chat format");
  generate->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate at most")->capture_default_str();
  generate->add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
  generate->add_option("--seed", o->seed, "sampling seed")->capture_default_str();
  auto* init = cmd->add_subcommand("init", "Write a small random Qwen2-style model as a real HF folder");
  init->add_option("--preset", o->preset, "model size preset")->check(CLI::IsMember({"tiny"}))->capture_default_str();
  init->add_option("--out", o->out, "output folder")->required();
  return [cmd]() -> int {
    not_built("leap model " + cmd->get_subcommands().front()->get_name(),
              "Policy model: Hugging Face checkpoints in LibTorch");
  };
}

}  // namespace leap::cli
