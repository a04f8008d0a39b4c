#include "model/tiny_model.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "model/bpe_trainer.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors_torch.hpp"
#include "model/safetensors_writer.hpp"
#include "model/transformer.hpp"
#include "util/error.hpp"

namespace leap::model {

namespace {

const char* const kBuiltinCorpus[] = {
    "Write a CUDA kernel that adds two float vectors of length n.\n",
    "__global__ void add(const float* a, const float* b, float* c, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) c[i] = a[i] + b[i];\n}\n",
    "The kernel reads one row per block, reduces with warp shuffles and writes the result.\n",
    "def softmax(x):\n    m = x.max(dim=-1, keepdim=True).values\n    return (x - m).exp() / (x - m).exp().sum(-1, keepdim=True)\n",
};

void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  if (!out) throw ModelError("cannot write " + p.string());
}

const char* const kChatTemplate =
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

}  // namespace

TinyModelInfo init_tiny_model(const std::filesystem::path& out, const std::filesystem::path& corpus_dir,
                              const std::string& preset, uint64_t seed, const TinyTokenizerOptions& tok) {
  struct Dims {
    int64_t hidden, layers, heads, kv_heads, mlp, vocab;
    const char* dtype;
  };
  Dims d{128, 4, 4, 2, 384, 0, "float32"};  // vocab 0: the tokenizer's size
  if (preset == "qwen2.5-1.5b-shape")
    d = Dims{1536, 28, 12, 2, 8960, 151936, "bfloat16"};
  else if (preset != "tiny")
    throw ModelError("unknown model preset '" + preset + "' (supported: tiny, qwen2.5-1.5b-shape)");
  const bool lines = tok.pretokenizer == "lines";
  if (!lines && tok.pretokenizer != "words")
    throw ModelError("unknown pretokenizer '" + tok.pretokenizer + "' (supported: words, lines)");
  const int64_t vocab = tok.vocab_size > 0 ? tok.vocab_size : (lines ? 4096 : 1024);
  if (vocab < 512 || vocab > 65536)
    throw ModelError("tokenizer vocab_size " + std::to_string(vocab) + " is outside [512, 65536]");
  std::error_code ec;
  // Weights this writes no file for would be loaded instead of the new ones (an index wins over
  // model.safetensors): a folder holding them is refused, never half overwritten.
  if (std::filesystem::is_directory(out, ec))
    for (const auto& e : std::filesystem::directory_iterator(out, ec)) {
      const std::string f = e.path().filename().string();
      if (f == "model.safetensors") continue;
      if (f.ends_with(".safetensors") || f == "model.safetensors.index.json" || f == "adapter" || f.ends_with(".bin"))
        throw ModelError(out.string() + ": holds " + f + " (another model's weights, which a loader would read " +
                         "instead of or beside the new ones): write the model to a new or empty folder");
      // A training checkpoint (a new user's copy of step-5 was overwritten with random weights
      // beside its old optimizer state, 2026-12-07).
      if (f == "optimizer.pt" || f == "trainer_state.json")
        throw ModelError(out.string() + ": holds " + f + " (a training checkpoint, whose weights this would " +
                         "replace): write the model to a new or empty folder");
    }
  std::filesystem::create_directories(out, ec);
  if (ec) throw ModelError("cannot create " + out.string() + ": " + ec.message());
  TinyModelInfo info;
  auto texts = tok.corpus.empty() ? read_task_corpus(corpus_dir) : tok.corpus;
  info.corpus_documents = static_cast<int64_t>(texts.size());
  if (texts.empty()) texts.assign(std::begin(kBuiltinCorpus), std::end(kBuiltinCorpus));
  BpeTrainOptions bo;
  bo.vocab_size = vocab;
  if (lines) bo.split_pattern = kLineSplitPattern;
  const TrainedBpe bpe = train_bpe(texts, bo);
  const int64_t V = bpe.size();
  info.vocab_size = V;
  const int64_t eot = static_cast<int64_t>(bpe.vocab.size());  // <|endoftext|>
  const int64_t im_end = eot + 2;
  write_text(out / "tokenizer.json", bpe.tokenizer_json());
  nlohmann::json tc = {{"tokenizer_class", "Qwen2Tokenizer"}, {"model_max_length", 4096},
                       {"eos_token", "<|im_end|>"},       {"pad_token", "<|endoftext|>"},
                       {"bos_token", nullptr},            {"clean_up_tokenization_spaces", false},
                       {"chat_template", kChatTemplate}};
  write_text(out / "tokenizer_config.json", tc.dump(2) + "\n");
  nlohmann::json cfg = {{"architectures", nlohmann::json::array({"Qwen2ForCausalLM"})},
                        {"model_type", "qwen2"},
                        {"hidden_size", d.hidden},
                        {"num_hidden_layers", d.layers},
                        {"num_attention_heads", d.heads},
                        {"num_key_value_heads", d.kv_heads},
                        {"intermediate_size", d.mlp},
                        {"vocab_size", d.vocab > 0 ? d.vocab : V},
                        {"max_position_embeddings", 4096},
                        {"rms_norm_eps", 1e-6},
                        {"rope_theta", 1000000.0},
                        {"hidden_act", "silu"},
                        {"tie_word_embeddings", true},
                        {"use_sliding_window", false},
                        {"sliding_window", nullptr},
                        {"max_window_layers", d.layers},
                        {"attention_dropout", 0.0},
                        {"initializer_range", 0.02},
                        {"use_cache", true},
                        {"bos_token_id", eot},
                        {"eos_token_id", im_end},
                        {"torch_dtype", d.dtype}};
  const std::string cfg_text = cfg.dump(2) + "\n";
  write_text(out / "config.json", cfg_text);
  nlohmann::json gc = {{"bos_token_id", eot},  {"eos_token_id", {im_end, eot}}, {"pad_token_id", eot},
                       {"do_sample", true},    {"temperature", 0.7},            {"top_p", 0.8},
                       {"top_k", 20}};
  write_text(out / "generation_config.json", gc.dump(2) + "\n");

  const ModelConfig c = parse_model_config(cfg_text, (out / "config.json").string());
  Transformer model(c);
  auto gen = at::globalContext().defaultGenerator(torch::kCPU).clone();
  gen.set_current_seed(seed);
  std::map<std::string, torch::Tensor> tensors;
  {
    torch::NoGradGuard ng;
    for (auto& [name, p] : model->hf_state_dict()) {
      if (name.ends_with("norm.weight")) p.fill_(1.0);
      else if (name.ends_with(".bias")) p.zero_();
      else p.normal_(0.0, 0.02, gen);
      tensors[name] = std::string(d.dtype) == "bfloat16" ? p.to(torch::kBFloat16).contiguous() : p.contiguous();
    }
  }
  info.num_parameters = model->num_parameters();
  write_safetensors(out / "model.safetensors", tensor_bytes(tensors), {{"format", "pt"}});
  return info;
}

}  // namespace leap::model
