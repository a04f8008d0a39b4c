#include "model/bpe.hpp"

#include <queue>

#include "model/byte_level.hpp"
#include "util/error.hpp"

namespace leap::model {

namespace {
constexpr std::size_t kCacheCapacity = 10000;
constexpr std::size_t kCacheMaxWord = 256;  // bytes
uint64_t pair_key(TokenId a, TokenId b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, TokenId> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges,
                   bool ignore_merges, TokenId unk_id, const std::string& source)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges), unk_id_(unk_id) {
  TokenId max_id = -1;
  for (const auto& [tok, id] : vocab_) {
    if (id < 0) throw ModelError(source + ": vocab id " + std::to_string(id) + " for \"" + tok + "\" is negative");
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(static_cast<std::size_t>(max_id + 1));
  has_id_.assign(static_cast<std::size_t>(max_id + 1), false);
  for (const auto& [tok, id] : vocab_) {
    if (has_id_[id])
      throw ModelError(source + ": vocab id " + std::to_string(id) + " is used by \"" + tok +
                       "\" and \"" + id_to_token_[id] + "\"");
    has_id_[id] = true;
    id_to_token_[id] = tok;
  }
  const auto& b2u = byte_to_unicode();
  for (int b = 0; b < 256; ++b) byte_ids_[b] = token_to_id(b2u[b]);
  merges_.reserve(merges.size());
  for (std::size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    TokenId ia = token_to_id(a), ib = token_to_id(b);
    if (ia < 0 || ib < 0)
      throw ModelError(source + ": merge #" + std::to_string(r) + " \"" + a + " " + b +
                       "\" uses a token that is not in the vocab");
    TokenId ic = token_to_id(a + b);
    if (ic < 0)
      throw ModelError(source + ": merge #" + std::to_string(r) + " \"" + a + " " + b +
                       "\" gives \"" + a + b + "\", which is not in the vocab");
    merges_.try_emplace(pair_key(ia, ib), static_cast<uint32_t>(r), ic);  // first rank wins
  }
}

TokenId BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= has_id_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::encode_word(std::string_view bytes, std::vector<TokenId>& out) const {
  if (bytes.empty()) return;
  const bool cacheable = bytes.size() <= kCacheMaxWord;
  std::string key;
  if (cacheable) {
    key.assign(bytes);
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<TokenId> ids;
  merge_word(bytes, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::move(key), std::move(ids));
  }
}

void BpeModel::merge_word(std::string_view bytes, std::vector<TokenId>& out) const {
  if (ignore_merges_) {
    TokenId whole = token_to_id(byte_level_encode(bytes));
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  // Symbols in a doubly linked list; a min-heap of candidate merges by (rank, position), as in
  // HF tokenizers' Word::merge_all. O(n log n) per word.
  struct Sym {
    TokenId id;
    int prev, next;
    bool alive;
  };
  std::vector<Sym> syms;
  syms.reserve(bytes.size());
  for (char c : bytes) {
    TokenId id = byte_ids_[static_cast<unsigned char>(c)];
    if (id < 0) id = unk_id_;
    if (id < 0) continue;  // dropped, like HF without unk
    syms.push_back({id, static_cast<int>(syms.size()) - 1, static_cast<int>(syms.size()) + 1, true});
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  struct Cand {
    uint32_t rank;
    int pos;
    TokenId new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int pos) {
    int nx = syms[pos].next;
    if (nx < 0) return;
    auto it = merges_.find(pair_key(syms[pos].id, syms[nx].id));
    if (it != merges_.end()) heap.push({it->second.first, pos, it->second.second});
  };
  for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) push(i);
  while (!heap.empty()) {
    Cand top = heap.top();
    heap.pop();
    Sym& cur = syms[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    Sym& right = syms[cur.next];
    auto it = merges_.find(pair_key(cur.id, right.id));
    if (it == merges_.end() || it->second.second != top.new_id || it->second.first != top.rank) continue;
    cur.id = top.new_id;
    right.alive = false;
    cur.next = right.next;
    if (cur.next >= 0) syms[cur.next].prev = top.pos;
    if (cur.prev >= 0) push(cur.prev);
    push(top.pos);
  }
  for (int i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace leap::model
