#include "model/bpe_trainer.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "model/byte_level.hpp"
#include "model/regex.hpp"
#include "model/utf8.hpp"

namespace leap::model {

const char* const kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* const kLineSplitPattern = R"([^\n]*\n|[^\n]+)";

namespace {

using Pair = std::pair<int32_t, int32_t>;

// The pair counts of a BPE training run, with the most frequent pair (ties: the smaller pair)
// found in O(log n): `order` holds (-count, pair) for every pair with a positive count.
class PairCounts {
 public:
  void add(Pair p, int64_t n) {
    if (n == 0) return;
    auto it = counts_.find(p);
    const int64_t old = it == counts_.end() ? 0 : it->second;
    if (old > 0) order_.erase({-old, p});
    const int64_t now = old + n;
    if (now > 0) {
      counts_[p] = now;
      order_.insert({-now, p});
    } else if (it != counts_.end()) {
      counts_.erase(it);
    }
  }
  bool empty() const { return order_.empty(); }
  Pair best() const { return order_.begin()->second; }
  int64_t best_count() const { return -order_.begin()->first; }

 private:
  std::map<Pair, int64_t> counts_;
  std::set<std::pair<int64_t, Pair>> order_;
};

}  // namespace

TrainedBpe train_bpe(const std::vector<std::string>& texts, const BpeTrainOptions& opts) {
  const Regex re(opts.split_pattern);
  std::map<std::string, int64_t> counts;  // ordered: deterministic
  for (const auto& t : texts) {
    for (auto [b, e] : re.find_all(t)) ++counts[t.substr(b, e - b)];
  }
  TrainedBpe out;
  out.special_tokens = opts.special_tokens;
  out.split_pattern = opts.split_pattern;
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
  // Every adjacent pair counted once per occurrence, weighted by its word's frequency, and the
  // words each pair occurs in (a merge re-counts only those).
  PairCounts pairs;
  std::map<Pair, std::set<size_t>> where;
  auto count_word = [&](size_t w, int64_t sign) {
    const auto& syms = words[w];
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      const Pair p{syms[i], syms[i + 1]};
      pairs.add(p, sign * freq[w]);
      if (sign > 0) where[p].insert(w);
    }
  };
  for (size_t w = 0; w < words.size(); ++w) count_word(w, +1);
  const int64_t target = opts.vocab_size - static_cast<int64_t>(opts.special_tokens.size());
  while (static_cast<int64_t>(out.vocab.size()) < target && !pairs.empty()) {
    const Pair best = pairs.best();
    if (pairs.best_count() < std::max<int64_t>(opts.min_frequency, 1)) break;
    const auto id = static_cast<int32_t>(out.vocab.size());
    out.merges.emplace_back(out.vocab[best.first], out.vocab[best.second]);
    out.vocab.push_back(out.vocab[best.first] + out.vocab[best.second]);
    const std::set<size_t> holders = std::move(where[best]);
    where.erase(best);
    for (size_t w : holders) {
      auto& syms = words[w];
      count_word(w, -1);
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
      count_word(w, +1);  // `where` may keep stale holders of vanished pairs: merging them is a no-op
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
                                        {"pattern", {{"Regex", split_pattern}}},
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
