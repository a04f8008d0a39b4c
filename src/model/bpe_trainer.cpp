#include "model/bpe_trainer.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "model/byte_level.hpp"
#include "model/regex.hpp"
#include "model/utf8.hpp"

namespace leap::model {

const char* const kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

TrainedBpe train_bpe(const std::vector<std::string>& texts, const BpeTrainOptions& opts) {
  const Regex re(kQwen2SplitPattern);
  std::map<std::string, int64_t> counts;  // ordered: deterministic
  for (const auto& t : texts) {
    for (auto [b, e] : re.find_all(t)) ++counts[t.substr(b, e - b)];
  }
  TrainedBpe out;
  out.special_tokens = opts.special_tokens;
  const auto& b2u = byte_to_unicode();
  for (int i = 0; i < 256; ++i) out.vocab.push_back(b2u[i]);
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
  for (const auto& [w, n] : counts) {
    std::vector<int32_t> syms;
    for (unsigned char c : w) syms.push_back(c);
    words.push_back(std::move(syms));
    freq.push_back(n);
  }
  const int64_t target = opts.vocab_size - static_cast<int64_t>(opts.special_tokens.size());
  while (static_cast<int64_t>(out.vocab.size()) < target) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
    for (size_t w = 0; w < words.size(); ++w)
      for (size_t i = 0; i + 1 < words[w].size(); ++i) pairs[{words[w][i], words[w][i + 1]}] += freq[w];
    std::pair<int32_t, int32_t> best{-1, -1};
    int64_t best_n = 0;
    for (const auto& [p, n] : pairs)
      if (n > best_n) {
        best = p;
        best_n = n;
      }
    if (best_n < std::max<int64_t>(opts.min_frequency, 1)) break;
    const auto id = static_cast<int32_t>(out.vocab.size());
    out.merges.emplace_back(out.vocab[best.first], out.vocab[best.second]);
    out.vocab.push_back(out.vocab[best.first] + out.vocab[best.second]);
    for (auto& syms : words) {
      std::vector<int32_t> next;
      next.reserve(syms.size());
      for (size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == best.first && syms[i + 1] == best.second) {
          next.push_back(id);
          ++i;
        } else {
          next.push_back(syms[i]);
        }
      }
      syms = std::move(next);
    }
  }
  return out;
}

std::string TrainedBpe::tokenizer_json() const {
  using nlohmann::json;
  json added = json::array();
  for (size_t i = 0; i < special_tokens.size(); ++i)
    added.push_back({{"id", vocab.size() + i}, {"content", special_tokens[i]}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}});
  json v = json::object();
  for (size_t i = 0; i < vocab.size(); ++i) v[vocab[i]] = i;
  json m = json::array();
  for (const auto& [a, b] : merges) m.push_back(json::array({a, b}));
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false},
                           {"use_regex", false}};
  json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", json::array({{{"type", "Split"},
                                        {"pattern", {{"Regex", kQwen2SplitPattern}}},
                                        {"behavior", "Isolated"},
                                        {"invert", false}},
                                       byte_level})}}},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", v}, {"merges", m}}}};
  return j.dump(1);
}

std::vector<std::string> read_task_corpus(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (auto it = fs::recursive_directory_iterator(dir, ec); it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const auto& p = it->path();
    if (!it->is_regular_file()) continue;
    const bool task = p.filename() == "task.yaml";
    const bool sol = p.extension() == ".md" && p.parent_path().filename() == "solutions";
    if (task || sol) files.push_back(p);
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    out.push_back(ss.str());
  }
  return out;
}

}  // namespace leap::model
