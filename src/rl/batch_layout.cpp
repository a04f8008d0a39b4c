// The update's batch layout (rl/batch_layout.hpp).
#include "rl/batch_layout.hpp"

#include <algorithm>
#include <functional>

#include "rl/prompt_sharing.hpp"

namespace leap::rl {

namespace {

/// Splits rows (with their prompt and completion lengths) into one part, or two when that cuts
/// the padded area (rows x width) by at least a fifth: rows sorted by width, the best cut point.
std::vector<std::vector<int64_t>> split_rows(const std::vector<int64_t>& plen, const std::vector<int64_t>& clen) {
  const size_t n = plen.size();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return plen[a] + clen[a] < plen[b] + clen[b]; });
  auto area = [&](size_t from, size_t to) {
    int64_t p = 0, c = 1;
    for (size_t i = from; i < to; ++i) {
      p = std::max(p, plen[order[i]]);
      c = std::max(c, clen[order[i]]);
    }
    return static_cast<double>(to - from) * static_cast<double>(p + c);
  };
  const double whole = area(0, n);
  double best = whole;
  size_t cut = 0;
  for (size_t k = 1; k < n; ++k)
    if (const double a = area(0, k) + area(k, n); a < best) {
      best = a;
      cut = k;
    }
  if (cut == 0 || best > 0.8 * whole) return {order};
  return {std::vector<int64_t>(order.begin(), order.begin() + static_cast<long>(cut)),
          std::vector<int64_t>(order.begin() + static_cast<long>(cut), order.end())};
}

/// Splits rows that continue share-unit prefixes (unit prefix length plen, tail length tlen) into
/// parts, each run as one forward whose rows attend to the longest prefix among its rows' units
/// (the shorter ones are left padded to it) and are right padded to its longest tail. The cost of
/// a part is its padded area weighted by the keys a column attends to: rows x W x (1 + (P +
/// W / 2) / kKeys), plus kPart per part; rows sorted by (prefix, tail), the cuts by dynamic
/// programming. One part unless the split costs at most 0.8 of it (as split_rows).
std::vector<std::vector<int64_t>> split_shared_rows(const std::vector<int64_t>& plen, const std::vector<int64_t>& tlen) {
  // A column attending to kKeys keys costs about twice its projections and MLP (the tiny model on
  // the CPU, where attention's backward is the slowest kernel); a part costs about kPart columns
  // more (its calls, and smaller matrix products). Both measured with bench_update --store on a
  // quickstart run: kPart 150, 400 and 1000 gave shared / unshared 0.41, 0.39 and 0.44.
  constexpr double kKeys = 300, kPart = 400;
  const size_t n = plen.size();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return plen[a] != plen[b] ? plen[a] < plen[b] : tlen[a] < tlen[b];
  });
  auto cost = [&](size_t from, size_t to) {
    double p = 0, w = 1;
    for (size_t i = from; i < to; ++i) {
      p = std::max(p, static_cast<double>(plen[order[i]]));
      w = std::max(w, static_cast<double>(tlen[order[i]]));
    }
    return static_cast<double>(to - from) * w * (1 + (p + w / 2) / kKeys) + kPart;
  };
  std::vector<double> best(n + 1, 0);
  std::vector<size_t> cut(n + 1, 0);
  for (size_t j = 1; j <= n; ++j) {
    best[j] = cost(0, j);
    for (size_t i = 1; i < j; ++i)
      if (const double c = best[i] + cost(i, j); c < best[j]) {
        best[j] = c;
        cut[j] = i;
      }
  }
  if (n == 0 || best[n] > 0.8 * cost(0, n)) return {order};
  std::vector<std::vector<int64_t>> parts;
  for (size_t j = n; j > 0; j = cut[j])
    parts.emplace_back(order.begin() + static_cast<long>(cut[j]), order.begin() + static_cast<long>(j));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

/// Fills a part's [n, W] token and mask tensors and its spans; both layouts below use it.
struct PartBuilder {
  PartBuilder(int64_t n, int64_t W, int64_t pad_id)
      : tokens(torch::full({n, W}, pad_id, torch::kInt64)), mask(torch::zeros({n, W}, torch::kInt64)),
        tk(tokens.accessor<int64_t, 2>()), mk(mask.accessor<int64_t, 2>()) {}
  /// Puts `token` (a real one) at row b, column col.
  void put(int64_t b, int64_t col, int64_t token) {
    tk[b][col] = token;
    mk[b][col] = 1;
  }
  /// Output `sample` scores its `n` completion tokens from column `start` of row b on.
  void score(int64_t sample, int64_t b, int64_t start, size_t n) {
    rows.push_back(sample);
    span_row.push_back(b);
    span_start.push_back(start);
    span_len = std::max<int64_t>(span_len, static_cast<int64_t>(n));
  }
  /// The part on `device`; spans set when `spans` (otherwise outputs are the rows, last C columns).
  Part finish(torch::Device device, int64_t completion_len, bool spans) {
    Part part;
    part.tokens = tokens.to(device);
    part.attention_mask = mask.to(device);
    part.completion_len = completion_len;
    if (spans) {
      part.score = {torch::tensor(span_row, torch::kInt64).to(device), torch::tensor(span_start, torch::kInt64).to(device),
                    span_len};
      part.first_read = *std::min_element(span_start.begin(), span_start.end()) - 1;
    }
    part.rows = std::move(rows);
    return part;
  }
  torch::Tensor tokens, mask;
  at::TensorAccessor<int64_t, 2> tk, mk;
  std::vector<int64_t> rows, span_row, span_start;
  int64_t span_len = 1;
};

/// The part whose rows are the samples samples[idx[rows]], unshared: [pad.. prompt | completion
/// ..pad]. `carried[r]` (empty: none) lists the other samples row r scores.
Part make_part(const std::vector<TrainSample>& samples, const std::vector<size_t>& idx, const std::vector<int64_t>& rows,
               const std::vector<std::vector<int64_t>>& carried, int64_t pad_id, torch::Device device) {
  const auto at = [&](int64_t r) -> const TrainSample& { return samples[idx[static_cast<size_t>(r)]]; };
  int64_t P = 0, C = 1;
  for (int64_t r : rows) {
    P = std::max<int64_t>(P, static_cast<int64_t>(at(r).prompt_ids.size()));
    C = std::max<int64_t>(C, static_cast<int64_t>(at(r).completion_ids.size()));
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  PartBuilder pb(n, P + C, pad_id);
  for (int64_t b = 0; b < n; ++b) {
    const int64_t r = rows[static_cast<size_t>(b)];
    const auto& s = at(r);
    const int64_t p = static_cast<int64_t>(s.prompt_ids.size());
    for (int64_t j = 0; j < p; ++j) pb.put(b, P - p + j, s.prompt_ids[static_cast<size_t>(j)]);
    for (size_t j = 0; j < s.completion_ids.size(); ++j) pb.put(b, P + static_cast<int64_t>(j), s.completion_ids[j]);
    pb.score(r, b, P, s.completion_ids.size());
    if (carried.empty()) continue;
    // c's context + completion are this row's first tokens: its completion starts at column
    // P - p + |c's prompt|.
    for (int64_t c : carried[static_cast<size_t>(r)])
      pb.score(c, b, P - p + static_cast<int64_t>(at(c).prompt_ids.size()), at(c).completion_ids.size());
  }
  const bool spans = pb.rows.size() != rows.size();
  return pb.finish(device, C, spans);
}

/// The part whose rows continue share-unit prefixes (Lp columns, left padded): row b holds
/// sample samples[idx[rows[b]]]'s context + completion from token skip[row] on, from column 0
/// (right padded), so that a span may run on from the prefix into the row. Every sample the row
/// scores (itself and `carried[row]`) is a span in the columns of [prefix | row].
Part make_tail_part(const std::vector<TrainSample>& samples, const std::vector<size_t>& idx,
                    const std::vector<int64_t>& rows, const std::vector<size_t>& skip,
                    const std::vector<std::vector<int64_t>>& carried, int64_t Lp, int64_t pad_id, torch::Device device) {
  const auto at = [&](int64_t r) -> const TrainSample& { return samples[idx[static_cast<size_t>(r)]]; };
  int64_t W = 1;
  for (int64_t r : rows)
    W = std::max<int64_t>(W, static_cast<int64_t>(seq_len(at(r)) - skip[static_cast<size_t>(r)]));
  const int64_t n = static_cast<int64_t>(rows.size());
  PartBuilder pb(n, W, pad_id);
  for (int64_t b = 0; b < n; ++b) {
    const int64_t r = rows[static_cast<size_t>(b)];
    const size_t from = skip[static_cast<size_t>(r)];
    for (size_t k = from; k < seq_len(at(r)); ++k) pb.put(b, static_cast<int64_t>(k - from), seq_token(at(r), k));
    auto score = [&](int64_t c) {
      // c's first completion token is token |c's context| of this row's sequence. (An empty
      // completion scores nothing; its span only has to lie inside the row.)
      const int64_t start = Lp + static_cast<int64_t>(at(c).prompt_ids.size()) - static_cast<int64_t>(from);
      pb.score(c, b, std::min(start, Lp + W - 1), at(c).completion_ids.size());
    };
    score(r);
    if (!carried.empty())
      for (int64_t c : carried[static_cast<size_t>(r)]) score(c);
  }
  const int64_t span_len = pb.span_len;
  return pb.finish(device, span_len, true);
}

}  // namespace

/// Whether sample a's context + completion are the first tokens of sample b's.
bool starts_with(const TrainSample& b, const TrainSample& a) {
  if (seq_len(a) > seq_len(b)) return false;
  for (size_t k = 0; k < seq_len(a); ++k)
    if (seq_token(a, k) != seq_token(b, k)) return false;
  return true;
}

/// Lexicographic order of context + completion (a sequence before the ones it starts).
bool seq_less(const TrainSample& x, const TrainSample& y) {
  const size_t n = std::min(seq_len(x), seq_len(y));
  for (size_t k = 0; k < n; ++k)
    if (seq_token(x, k) != seq_token(y, k)) return seq_token(x, k) < seq_token(y, k);
  return seq_len(x) < seq_len(y);
}

namespace {

using SampleAt = std::function<const TrainSample&(size_t)>;

/// The rows that run (hosts, in idx order) and what each scores besides itself: with `share`,
/// a sample whose context + completion start another's is carried by that sample's row.
struct Hosts {
  std::vector<int64_t> rows;
  std::vector<std::vector<int64_t>> carried;  ///< per position in idx; empty: none carried
};

Hosts host_rows(size_t B, const SampleAt& at, bool share) {
  Hosts h;
  if (share && B >= 2) {
    h.carried.assign(B, {});
    for (const auto& g : nest_samples(B, at)) {
      h.rows.push_back(static_cast<int64_t>(g.front()));
      for (size_t k = 1; k < g.size(); ++k) h.carried[g.front()].push_back(static_cast<int64_t>(g[k]));
    }
    std::sort(h.rows.begin(), h.rows.end());
  } else {
    for (size_t r = 0; r < B; ++r) h.rows.push_back(static_cast<int64_t>(r));
  }
  return h;
}

/// The share plan over the hosts' whole rows (context + completion): a prefix common to a unit's
/// rows runs once, and a span it holds (a carried sample, or a completion identical in every row
/// of the unit) is scored from the prefix's hidden states. Empty when nothing is shared; `seqs`
/// gets the hosts' rows in host order.
std::vector<ShareUnit> plan_shared_prefixes(const Hosts& hosts, const SampleAt& at, bool share,
                                            std::vector<std::vector<int64_t>>& seqs) {
  if (!share || hosts.rows.size() < 2) return {};
  std::vector<const std::vector<int64_t>*> rows;
  for (int64_t h : hosts.rows) {
    const auto& s = at(static_cast<size_t>(h));
    seqs.push_back(s.prompt_ids);
    seqs.back().insert(seqs.back().end(), s.completion_ids.begin(), s.completion_ids.end());
  }
  for (const auto& q : seqs) rows.push_back(&q);
  std::vector<ShareUnit> plan = plan_prompt_sharing(rows);
  if (plan.size() == hosts.rows.size()) plan.clear();  // nothing shared
  return plan;
}

/// The completion mask [B, C] fp32 and C (the longest completion, at least 1) of the batch.
void set_completion_mask(Batch& b, size_t B, const SampleAt& at, torch::Device device) {
  b.completion_len = 1;
  for (size_t r = 0; r < B; ++r) b.completion_len = std::max<int64_t>(b.completion_len, at(r).completion_ids.size());
  auto cmask = torch::zeros({static_cast<int64_t>(B), b.completion_len}, torch::kFloat32);
  for (size_t r = 0; r < B; ++r)
    cmask[static_cast<int64_t>(r)].narrow(0, 0, static_cast<int64_t>(at(r).completion_ids.size())).fill_(1.0f);
  b.completion_mask = cmask.to(device);
}

/// Rows (positions in idx) run whole, without a shared prefix, in parts cut by split_rows.
void add_whole_rows(Batch& b, const std::vector<TrainSample>& samples, const std::vector<size_t>& idx,
                    const std::vector<int64_t>& whole, const Hosts& hosts, int64_t pad_id, torch::Device device) {
  std::vector<int64_t> plen, clen;
  for (int64_t h : whole) {
    plen.push_back(static_cast<int64_t>(samples[idx[static_cast<size_t>(h)]].prompt_ids.size()));
    clen.push_back(static_cast<int64_t>(samples[idx[static_cast<size_t>(h)]].completion_ids.size()));
  }
  for (auto& k : split_rows(plen, clen)) {
    std::vector<int64_t> rows;
    for (int64_t i : k) rows.push_back(whole[static_cast<size_t>(i)]);
    b.parts.push_back(make_part(samples, idx, rows, hosts.carried, pad_id, device));
  }
}

/// The rows of the units of two or more rows, as tails continuing their unit's prefix (parts cut
/// by split_shared_rows). Returns Lp, the longest unit prefix.
int64_t add_tail_parts(Batch& b, const std::vector<TrainSample>& samples, const std::vector<size_t>& idx,
                       const Hosts& hosts, const std::vector<ShareUnit>& plan, int64_t pad_id, torch::Device device) {
  std::vector<size_t> skip(idx.size(), 0);
  std::vector<int64_t> row_unit(idx.size(), 0), shared_rows;
  int64_t Lp = 0;
  for (size_t u = 0; u < plan.size(); ++u) {
    Lp = std::max<int64_t>(Lp, static_cast<int64_t>(plan[u].prefix_len));
    for (size_t m : plan[u].members) {
      skip[static_cast<size_t>(hosts.rows[m])] = plan[u].prefix_len;
      row_unit[static_cast<size_t>(hosts.rows[m])] = static_cast<int64_t>(u);
      shared_rows.push_back(hosts.rows[m]);
    }
  }
  std::vector<int64_t> tail, plen;
  for (int64_t h : shared_rows) {
    tail.push_back(static_cast<int64_t>(seq_len(samples[idx[static_cast<size_t>(h)]]) - skip[static_cast<size_t>(h)]));
    plen.push_back(static_cast<int64_t>(skip[static_cast<size_t>(h)]));
  }
  b.prefix_hidden_from = Lp;
  for (auto& hrows : split_shared_rows(plen, tail)) {
    std::vector<int64_t> rows, units;
    int64_t keep = 0;  // the part's longest unit prefix: the prefix columns it attends to
    for (int64_t k : hrows) {
      rows.push_back(shared_rows[static_cast<size_t>(k)]);
      units.push_back(row_unit[static_cast<size_t>(rows.back())]);
      keep = std::max(keep, plen[static_cast<size_t>(k)]);
    }
    b.parts.push_back(make_tail_part(samples, idx, rows, skip, hosts.carried, keep, pad_id, device));
    auto& part = b.parts.back();
    part.prefix_row = torch::tensor(units, torch::kInt64).to(device);
    part.prefix_drop = Lp - keep;
    b.prefix_hidden_from = std::min(b.prefix_hidden_from, part.first_read + part.prefix_drop);
  }
  return Lp;
}

/// The unit prefixes [U, Lp] (left padded) and their mask: each unit's first member's first
/// prefix_len tokens.
void set_prefixes(Batch& b, const std::vector<ShareUnit>& plan, const std::vector<std::vector<int64_t>>& seqs, int64_t Lp,
                  int64_t pad_id, torch::Device device) {
  const int64_t U = static_cast<int64_t>(plan.size());
  auto pt = torch::full({U, Lp}, pad_id, torch::kInt64);
  auto pm = torch::zeros({U, Lp}, torch::kInt64);
  auto ptk = pt.accessor<int64_t, 2>();
  auto pmk = pm.accessor<int64_t, 2>();
  for (int64_t u = 0; u < U; ++u) {
    const auto& unit = plan[static_cast<size_t>(u)];
    const auto& first = seqs[unit.members.front()];  // the prefix is the first tokens of each member's row
    const int64_t n = static_cast<int64_t>(unit.prefix_len);
    for (int64_t j = 0; j < n; ++j) {
      ptk[u][Lp - n + j] = first[static_cast<size_t>(j)];
      pmk[u][Lp - n + j] = 1;
    }
  }
  b.shared = true;
  b.prefix_tokens = pt.to(device);
  b.prefix_mask = pm.to(device);
}

}  // namespace

Batch make_batch(const std::vector<TrainSample>& samples, const std::vector<size_t>& idx, int64_t pad_id,
                 torch::Device device, bool share) {
  Batch b;
  const SampleAt at = [&](size_t r) -> const TrainSample& { return samples[idx[r]]; };
  const Hosts hosts = host_rows(idx.size(), at, share);
  std::vector<std::vector<int64_t>> seqs;  // hosts' context + completion, in host order
  std::vector<ShareUnit> plan = plan_shared_prefixes(hosts, at, share, seqs);
  set_completion_mask(b, idx.size(), at, device);
  if (plan.empty()) {
    add_whole_rows(b, samples, idx, hosts.rows, hosts, pad_id, device);
    return b;
  }
  // Shared: a unit of one runs its row whole, without a prefix (as a prefix of all its tokens but
  // one it would pad every other unit's prefix to its length); the others' rows continue their
  // unit's prefix, which runs once.
  std::vector<int64_t> solo;  // the hosts of units of one
  std::erase_if(plan, [&](const ShareUnit& u) {
    if (u.members.size() > 1) return false;
    solo.push_back(hosts.rows[u.members.front()]);
    return true;
  });
  if (!solo.empty()) add_whole_rows(b, samples, idx, solo, hosts, pad_id, device);
  const int64_t Lp = add_tail_parts(b, samples, idx, hosts, plan, pad_id, device);
  set_prefixes(b, plan, seqs, Lp, pad_id, device);
  return b;
}

}  // namespace leap::rl
